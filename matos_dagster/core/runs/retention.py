"""What Dagster may forget: old partition keys and old runs. No Dagster imports.

The archive in Swift is complete and is the truth of what is archived; Dagster's partition
keys and run records are a recent view of it. Left alone, both grow with every range (a key
and a run every 20-30 s per partition at the default batch policy), and the UI's Partitions
page and `DAGSTER_HOME` grow without bound. The `retention` job (jobs/retention.py) applies
these rules on a schedule:

- **keys**: per topic partition, the newest `keep_keys` keys (by offset) stay. An older key
  is removed only if its range is committed (its end at or below the group's committed
  offset), archived (its manifest is in Swift, checked by the job) and no run of it is in
  flight. A pruned range is still read, verified and restored from Swift, which never
  consults the keys.
- **runs**: per job, the newest `keep_runs` finished runs stay (the sensor's bytes-per-record
  estimate reads the latest materialisation, the monitor its last evaluations), and a failed
  run stays `keep_failed_days` for an operator. Runs not finished are never touched, nor the
  newest successful run of each day or hour (`holds_a_window`): it holds that window's
  materialisation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator

from matos_dagster.core.offsets.ranges import MalformedKey, OffsetRange, parse_key

DAY_S = 86_400
# The monitor reads its last few evaluations (monitor.WINDOW) from the runs that made them.
MIN_KEEP_RUNS = 10


@dataclass(frozen=True)
class Policy:
    keep_keys: int = 1000  # per topic partition
    keep_runs: int = 1000  # finished runs per job
    keep_failed_days: float = 14.0

    def __post_init__(self) -> None:
        if self.keep_keys < 1:
            raise ValueError(f"MATOS_KEEP_KEYS must be at least 1 (the range in flight keeps its key), "
                             f"got {self.keep_keys}")
        if self.keep_runs < MIN_KEEP_RUNS:
            raise ValueError(f"MATOS_KEEP_RUNS must be at least {MIN_KEEP_RUNS} (the monitor reads its last "
                             f"evaluations from them), got {self.keep_runs}")
        if self.keep_failed_days < 0:
            raise ValueError(f"MATOS_KEEP_FAILED_RUNS_DAYS must be 0 or more, got {self.keep_failed_days}")


def prunable_keys(
    keys: Iterable[str], keep: int, committed: dict[int, int | None], in_flight: set[str]
) -> list[OffsetRange]:
    """Ranges of `keys` (one topic) that may lose their key, oldest first, before the Swift check.

    `committed`: the group's committed offset per partition (None: never committed, so
    nothing is). Keys that are not well-formed are left alone: they are not ranges we made.
    """
    by_partition: dict[int, list[OffsetRange]] = {}
    for key in keys:
        try:
            r = parse_key(key)
        except MalformedKey:
            continue
        by_partition.setdefault(r.partition, []).append(r)
    out: list[OffsetRange] = []
    for p, ranges in sorted(by_partition.items()):
        ranges.sort(key=lambda r: (r.start, r.end))
        upto = committed.get(p)
        for r in ranges[: max(0, len(ranges) - keep)]:
            if upto is not None and r.end <= upto and r.key not in in_flight:
                out.append(r)
    return out


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    job: str
    finished: bool
    failed: bool
    created_s: float
    partition: str | None = None  # the run's partition key, if any


def holds_a_window(run: RunInfo) -> bool:
    """A successful run of a partition that is not an offset range: a day or an hour of event time
    (or a user's own time partition). Dagster reads a partition's materialisation from the run that
    made it: deleting that run would show the day as never materialised, and automation would run
    what depends on it again. Their number grows by one a window, not a range."""
    if run.partition is None or run.failed:
        return False
    try:
        parse_key(run.partition)
    except MalformedKey:
        return True
    return False


def deletable_runs(runs_newest_first: Iterable[RunInfo], policy: Policy, now_s: float) -> Iterator[str]:
    """Ids of the runs to delete, from runs given newest first. The newest successful run of each
    job and window (`holds_a_window`) is kept, outside the count."""
    seen: Counter[str] = Counter()
    windows: set[tuple[str, str]] = set()
    for run in runs_newest_first:
        if not run.finished:
            continue
        if holds_a_window(run) and (run.job, run.partition) not in windows:
            windows.add((run.job, run.partition))
            continue
        seen[run.job] += 1
        if seen[run.job] <= policy.keep_runs:
            continue
        if run.failed and now_s - run.created_s < policy.keep_failed_days * DAY_S:
            continue
        yield run.run_id
