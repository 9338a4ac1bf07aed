"""The monitor's verdict of one topic, from Kafka's offsets and what the topic's last verdict handed on.

report.py judges a partition from the archive's entries; this decides, per partition, what that
judgement needs to read, and what the verdict hands on to the next one:

- a partition whose log start, log end and committed offset have not moved since the last verdict,
  and which that verdict found *settled* (no gap, overlap or loss, nothing archived past its
  `Known`, its `Known` reaching the committed offset), is judged from its `Known` alone: no Swift
  request, as a listing would find nothing new (its lag age is recomputed, its window grows);
- any other partition is listed from its `Known` (report.start_from); the archive's mark is read
  only where the last verdict has no `Known`;
- the last verdict's metadata (`archive_state`, and `samples`, the window of WARN and stall
  samples) is all an evaluation reads of the past: never an older verdict.

Whether a topic is due (`is_due`) is a question of the same state: its verdict is old, or a
committed offset moved since (an archive run committed). No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from matos_dagster.core.days import evaluate as days_evaluate
from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.monitor import marks
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.monitor.report import Known, PartitionReport, Sample
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

# A busy partition's mark (marks.py) is rewritten this often, not at every verdict: its Known moves at
# each one, and the mark only spares a fresh instance part of a listing. A partition come to rest (its
# Known as the last verdict's) has its mark brought up to date at once.
MARK_EVERY_S = 600.0
CARRIED = "carried: nothing moved"  # `started_from` of a partition judged without Swift
DAYS = ("late_records", "future_timestamps", "untimed_records")  # the topic's days (core/days/)


@dataclass(frozen=True)
class Offsets:
    low: int  # log start
    high: int  # log end
    committed: int | None

    @property
    def position(self) -> int:
        """Where the archive goes on from: the committed offset, or the log start."""
        return self.committed if self.committed is not None else self.low


@dataclass
class Previous:
    """What a topic's last verdict hands on: parsed from its metadata's plain values."""

    t: float = 0.0  # when it was made; 0: never
    where: str | None = None  # the archive it looked at (container/prefix)
    known: dict[int, Known] = field(default_factory=dict)
    samples: dict[int, list[Sample]] = field(default_factory=dict)  # oldest first
    offsets: dict[int, Offsets] = field(default_factory=dict)
    oldest: dict[int, int | None] = field(default_factory=dict)  # ms, of the first record waiting
    settled: frozenset[int] = frozenset()
    listed: bool = True  # it listed Swift: the days' counts are read again
    days: dict[str, int] | None = None
    missing: bool = False  # the topic was not in Kafka
    stopped: frozenset[int] = frozenset()  # partitions the lag sensor had stopped requesting
    marked_at: dict[int, float] = field(default_factory=dict)  # when this instance last wrote each mark
    unmarked: frozenset[int] = frozenset()  # partitions whose mark is behind their Known
    raw: dict[str, Any] = field(default_factory=dict)  # its `samples` and `archive_state`, as found

    @classmethod
    def parse(cls, t: float, meta: Mapping[str, Any]) -> "Previous":
        """From a verdict's metadata values (JSON documents, numbers). Verdicts of earlier versions
        (one sample per partition, no offsets) hand on their `Known` and samples; each partition is
        then listed once."""
        state = meta.get("archive_state") or {}
        out = cls(t=t, where=state.get("where"), missing=bool(state.get("missing")),
                  raw={k: meta[k] for k in ("samples", "archive_state") if k in meta})
        for p, doc in (state.get("partitions") or {}).items():
            k = Known.from_json(doc)
            if k is not None:
                out.known[int(p)] = k
        for p, doc in (meta.get("samples") or {}).items():
            rows = [doc] if doc and not isinstance(doc[0], list) else doc  # one sample: an earlier version
            out.samples[int(p)] = [Sample(float(a), None if b is None else int(b), int(c)) for a, b, c in rows]
        for p, (low, high, committed) in (state.get("offsets") or {}).items():
            out.offsets[int(p)] = Offsets(int(low), int(high), None if committed is None else int(committed))
        out.oldest = {int(p): ts for p, ts in (state.get("oldest_ms") or {}).items()}
        out.settled = frozenset(int(p) for p in state.get("settled") or ())
        out.stopped = frozenset(int(p) for p in state.get("stopped") or ())
        out.marked_at = {int(p): float(t) for p, t in (state.get("marked_at") or {}).items()}
        out.unmarked = frozenset(int(p) for p in state.get("unmarked") or ())
        out.listed = bool(state.get("listed", True))
        if all(isinstance(meta.get(k), int) for k in DAYS):
            out.days = {k: meta[k] for k in DAYS}
        return out


NEVER = Previous()


@dataclass
class Verdict:
    topic: TopicConfig
    reports: list[PartitionReport]
    started: dict[int, str]  # per partition: from what it was judged (report.start_from, or CARRIED)
    listings: int  # Swift listing requests it made
    days: dict[str, int | None] | None  # the topic's days' counts, for a topic with time windows
    samples: dict  # the window handed on, as JSON
    state: dict  # `archive_state` handed on, as JSON
    missing: bool = False

    @property
    def status(self) -> str:
        return monitor.WARN if self.missing else monitor.overall(self.reports)


def is_due(previous: Previous, offsets: Mapping[int, Offsets] | None, now: float, max_age_s: float,
           stopped: Mapping[int, str] | None = None, moved_after_s: float = 0.0) -> str | None:
    """Why the topic's verdict is to be made again now, or None. `offsets`: its partitions' (None:
    the topic is not in Kafka); `stopped`: the partitions the lag sensor stopped requesting, now;
    `moved_after_s`: committed offsets that moved make it due once the verdict is this old."""
    if previous.t == 0:
        return "no verdict yet"
    if now - previous.t >= max_age_s:
        return "due by age"
    if (offsets is None) != previous.missing:
        return "gone from Kafka" if offsets is None else "back in Kafka"
    if offsets is None:
        return None
    if set(offsets) != set(previous.offsets):
        return "partitions changed"
    if moved(previous, offsets) and now - previous.t >= moved_after_s:
        return "committed offsets moved"
    if set(stopped or ()) != previous.stopped:
        return "the lag sensor stopped or resumed a partition"
    return None


def moved(previous: Previous, offsets: Mapping[int, Offsets] | None) -> bool:
    """A committed offset of the topic's partitions moved since the verdict."""
    return offsets is not None and set(offsets) == set(previous.offsets) and any(
        o.committed != previous.offsets[p].committed for p, o in offsets.items())


def carried(previous: Previous, offsets: Mapping[int, Offsets], where: str) -> set[int]:
    """The partitions judged without Swift: settled at the last verdict, and nothing moved since."""
    if previous.where != where:
        return set()
    return {p for p, o in offsets.items() if p in previous.settled and previous.offsets.get(p) == o}


def waiting(previous: Previous, offsets: Mapping[int, Offsets], where: str) -> dict[int, int]:
    """The offsets whose record's timestamp the verdict needs (the oldest record waiting, for the
    lag in seconds), per partition; a carried partition's is the last verdict's."""
    skip = carried(previous, offsets, where)
    return {p: o.position for p, o in offsets.items() if p not in skip and o.high > o.position}


def judge(topic: TopicConfig, offsets: Mapping[int, Offsets], oldest: Mapping[int, int | None], previous: Previous,
          where: str, prefix: str, store: Callable[[], Store], now: float,
          stopped: Mapping[int, str] | None = None) -> Verdict:
    """The topic's verdict. `oldest`: the `waiting` partitions' timestamps (ms); `store`: the Swift
    store, opened on first use (a topic whose partitions are all carried may not need it);
    `stopped`: the partitions the lag sensor no longer requests ranges of, and why."""
    stopped = stopped or {}
    carry = carried(previous, offsets, where)
    same = previous.where == where
    known = previous.known if same else {}
    marked_at = {p: t for p, t in previous.marked_at.items() if p in offsets} if same else {}
    behind_before = previous.unmarked if same else frozenset()
    unmarked = []
    listed = [p for p in sorted(offsets) if p not in carry]
    entries: dict[int, list] = {}
    given: dict[int, Known | None] = {}
    started = {p: CARRIED for p in carry}
    marked: dict[int, Known | None] = {}
    counts: dict[int, dict] = {}
    listings = 0
    if listed:
        s = store()
        before = s.listings
        for p in listed:
            archive = PartitionArchive(s, prefix, topic.name, p)
            # The mark is another instance's claim: read only where this one knows nothing.
            marked[p] = marks.read_mark(s, prefix, topic.name, p) if p not in known else None
            given[p], started[p] = monitor.start_from(archive, known.get(p), marked[p], offsets[p].high)
            entries[p] = monitor.read_entries(archive, given[p], offsets[p].high)
            if topic.key_format != "none" or topic.value_format != "none":
                counts[p] = monitor.typed_counts(archive, entries[p])
        listings = s.listings - before
    reports, settled, samples = [], [], {}
    for p in sorted(offsets):
        o = offsets[p]
        ts = previous.oldest.get(p) if p in carry else oldest.get(p)
        history = previous.samples.get(p, [])
        r = monitor.evaluate_partition(topic, p, o.low, o.high, o.committed, entries.get(p, []), ts, history, now,
                                       known.get(p) if p in carry else given[p], counts.get(p), stopped.get(p))
        reports.append(r)
        samples[str(p)] = [[s.t, s.committed, s.lag] for s in (history + [r.sample(now)])[-(monitor.WINDOW - 1):]]
        if _settled(r):
            settled.append(p)
        behind = r.known is not None and (p in behind_before or p in entries and r.known != (marked.get(p)
                                                                                        or known.get(p)))
        if behind:  # the mark is written when it moves only, and a busy one every MARK_EVERY_S
            if p not in marked_at or now - marked_at[p] >= MARK_EVERY_S or r.known == known.get(p):
                marks.write_mark(store(), prefix, topic.name, p, r.known)
                marked_at[p] = round(now, 3)
            else:
                unmarked.append(p)
    days = None
    if topic.time_window != "none":
        # The days' state is written by the days sensor after the archive moved: read again while
        # this topic moves and once after, carried while it rests.
        days = previous.days if not listed and not previous.listed and previous.days is not None else {
            k: v for k, v in days_evaluate.counts(store(), prefix, topic.name).items() if k in DAYS}
    state = {
        "where": where,
        "partitions": {str(r.partition): r.known.to_json() for r in reports if r.known is not None},
        "offsets": {str(p): [o.low, o.high, o.committed] for p, o in sorted(offsets.items())},
        "oldest_ms": {str(p): previous.oldest.get(p) if p in carry else oldest.get(p)
                      for p in sorted(offsets) if offsets[p].high > offsets[p].position},
        "settled": settled,
        "listed": bool(listed),
        "stopped": sorted(p for p in stopped if p in offsets),
        "marked_at": {str(p): t for p, t in sorted(marked_at.items())},
        "unmarked": unmarked,
    }
    return Verdict(topic, reports, started, listings, days, samples, state)


def missing(topic: TopicConfig, previous: Previous) -> Verdict:
    """The verdict of a named topic that Kafka does not have: what the last verdict handed on is
    handed on unchanged, so a topic back in Kafka (or a moment's metadata error) loses nothing."""
    state = dict(previous.raw.get("archive_state") or {})
    state["missing"] = True
    return Verdict(topic, [], {}, 0, None, previous.raw.get("samples") or {}, state, missing=True)


def _settled(r: PartitionReport) -> bool:
    """Whether a listing of this partition would find nothing new until its offsets move: no problem
    (one is examined again at every evaluation until it is mended; an entry past what is known lies
    past a hole or an overlap, so it is one), and what is known reaches the committed offset (a
    listing that lags a commit is read again)."""
    if r.gaps or r.overlaps or r.lost:
        return False
    return r.committed is None or (r.known is not None and r.known.sound_to >= r.committed)


def kafka_offsets(kafka: KafkaClient, topics: list[TopicConfig], listing: Mapping[str, list[int]]
                  ) -> dict[str, dict[int, Offsets]]:
    """Every partition's offsets of the `topics` Kafka has (`listing`: many.topics), in one
    ListOffsets per side and one OffsetFetch per group, whatever the number of topics."""
    present = [t for t in topics if t.name in listing]
    marks = many.watermarks(kafka, [(t.name, p) for t in present for p in listing[t.name]])
    committed: dict[tuple[str, int], int | None] = {}
    for group in sorted({t.group for t in present}):
        committed.update(many.committed(kafka, group, [(t.name, p) for t in present if t.group == group
                                                       for p in listing[t.name]]))
    return {t.name: {p: Offsets(*marks[(t.name, p)], committed[(t.name, p)]) for p in listing[t.name]}
            for t in present}
