"""What the lag sensor decides in one tick, once Kafka and the runs have answered: without Dagster.

sensors/lag.py asks Kafka (topics, ids, offsets), the instance (the ranges' runs, the runs of other
origins) and Swift's manifests' metadata, then hands the answers here: per partition,
`policy.decide`, or a partition left alone because a run of another origin archives in it. The
model-based test (tests/model) calls the same function, so that what it checks is what the sensor
does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.policy import Decision, Offsets, PartitionState, decide, stopped_reason

TP = tuple[str, int]


@dataclass
class Tick:
    kept: dict[TP, PartitionState] = field(default_factory=dict)  # each partition's state after the tick
    due: list[tuple[OffsetRange, int]] = field(default_factory=list)  # ranges to request, with their attempt
    new: list[OffsetRange] = field(default_factory=list)  # those of `due` that are new ranges (not retries)
    decisions: dict[TP, Decision] = field(default_factory=dict)  # of the partitions decided (not busy)
    reasons: list[str] = field(default_factory=list)  # "topic/p: why", for the tick's summary
    warnings: list[str] = field(default_factory=list)


def decide_all(topics: dict, tps: list[TP], states: dict[TP, PartitionState],
               marks: dict[TP, tuple[int, int]], committed: dict[TP, int | None],
               runs: dict[tuple, str], over: dict[tuple, tuple[int, int]], busy: dict[TP, str], now_ms: int,
               oldest: dict[TP, int] | None = None, avg_bytes: dict[str, float] | None = None) -> Tick:
    """`topics`: TopicConfig by name; `runs`, `over`: `(run key, range key)` -> the range's run state
    (policy's IN_FLIGHT, ...) and, of a range refused as archived in part, the entry it overlaps;
    `busy`: partitions a run of another origin archives, with what says so."""
    oldest, avg_bytes = oldest or {}, avg_bytes or {}
    out = Tick()
    for tp in tps:
        s = states.get(tp, PartitionState())
        topic, p = topics[tp[0]], tp[1]
        if tp in busy and (s.key is None or s.done):
            # A run this sensor did not request (CLI, UI) is archiving in this partition:
            # a range requested now would only wait for it, or repeat its work.
            out.reasons.append(f"{topic.name}/{p}: {busy[tp]}")
            out.kept[tp] = s
            continue
        run = runs.get((s.run, s.key)) if s.key and not s.done else None
        d = decide(topic, p, s, Offsets(*marks[tp], committed[tp]), run, now_ms, oldest.get(tp),
                   avg_bytes.get(topic.name), over.get((s.run, s.key)))
        out.decisions[tp] = d
        if d.warning:
            out.warnings.append(d.warning)
        out.kept[tp] = d.state
        if d.request is not None:
            out.due.append((d.request, d.state.attempt))
            if d.run_key == d.request.key:  # a new range, not a retry
                out.new.append(d.request)
            out.reasons.append(f"{topic.name}/{p}: {d.reason}")
        elif d.warning or (d.state.key and not d.state.done):  # a loss, a give-up, a range in flight
            out.reasons.append(f"{topic.name}/{p}: {d.reason}")
    return out


def gave_up(kept: dict[TP, PartitionState]) -> dict[TP, str]:
    """The partitions given up on (a range failed `policy.MAX_ATTEMPTS` times), with what goes on: what
    the sensor records for the monitor (sensors/stopped.py), which reports each as a WARN."""
    return {tp: stopped_reason(tp[0], tp[1], s) for tp, s in kept.items() if s.stopped}
