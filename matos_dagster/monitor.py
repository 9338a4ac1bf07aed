"""The monitor's judgement of one topic: Matos' `monitor`, grown up, with Burrow's rules.

Per topic partition: log start and end offsets, committed offset, archived high-water mark
(AHWM: end of the contiguous prefix of ranges whose manifest is in Swift), lag in records
and seconds, gaps, overlaps and data lost to retention. Status over a window of recent
evaluations, as Burrow evaluates a consumer:

- ERROR: a gap or an overlap between manifests, committed offsets not covered by the
  archive, offsets deleted before they were archived, or a stall (lag, and the committed
  offset has not moved for `stall_s`);
- WARN: lag above the topic's threshold in every evaluation of the window, and not shrinking;
- OK otherwise.

No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matos_dagster.ranges import coverage
from matos_dagster.topics import TopicConfig

OK, WARN, ERROR = "OK", "WARN", "ERROR"
_RANK = {OK: 0, WARN: 1, ERROR: 2}
WINDOW = 5  # evaluations, this one included


@dataclass(frozen=True)
class Sample:
    """One partition at one evaluation; kept in the check's metadata for the next ones."""

    t: float  # seconds since the epoch
    committed: int | None
    lag: int


@dataclass
class PartitionReport:
    partition: int
    log_start: int
    log_end: int
    committed: int | None
    ahwm: int | None
    archived_ranges: int
    lag_records: int
    lag_seconds: float
    gaps: list[tuple[int, int]] = field(default_factory=list)
    overlaps: list[tuple[int, int]] = field(default_factory=list)
    lost: list[tuple[int, int]] = field(default_factory=list)
    status: str = OK
    reasons: list[str] = field(default_factory=list)

    def sample(self, now: float) -> Sample:
        return Sample(now, self.committed, self.lag_records)


def evaluate_partition(
    topic: TopicConfig,
    partition: int,
    low: int,
    high: int,
    committed: int | None,
    ranges: list[tuple[int, int]],
    oldest_unarchived_ts_ms: int | None,
    history: list[Sample],
    now: float,
) -> PartitionReport:
    """`history`: this partition's samples from earlier evaluations, oldest first."""
    cov = coverage(ranges)
    position = committed if committed is not None else low
    lag = max(0, high - position)
    lag_s = max(0.0, now - oldest_unarchived_ts_ms / 1000) if lag and oldest_unarchived_ts_ms else 0.0
    r = PartitionReport(partition, low, high, committed, cov.contiguous_end, len(ranges), lag, lag_s)
    r.gaps = list(cov.gaps)
    r.overlaps = list(cov.overlaps)

    archived_to = cov.contiguous_end if cov.contiguous_end is not None else position
    if committed is not None and committed > archived_to and not _covered(ranges, archived_to, committed):
        r.gaps.append((archived_to, committed))
        r.reasons.append(f"offsets [{archived_to}, {committed}) are committed but in no manifest")
    if cov.gaps:
        r.reasons.append("gaps between archived ranges: " + _spans(cov.gaps))
    if r.overlaps:
        r.reasons.append("overlapping archived ranges: " + _spans(r.overlaps))

    # Offsets below the log start that no manifest holds are gone for good: in a gap, or
    # between the end of the archive and the log start. Before anything was archived or
    # committed, nothing was promised, so nothing is counted lost.
    unarchived = list(r.gaps)
    if committed is not None or ranges:
        unarchived.append((max(position, archived_to), low))
    r.lost = [(lo, min(hi, low)) for lo, hi in unarchived if lo < min(hi, low)]
    if r.lost:
        r.reasons.append("records deleted before they were archived: " + _spans(r.lost))

    window = history[-(WINDOW - 1):]
    stalled_since = _stalled_since(history, committed, now)
    if lag > 0 and stalled_since is not None and now - stalled_since >= topic.stall_s:
        r.reasons.append(f"stalled: committed offset {committed} has not moved for {now - stalled_since:.0f}s with lag {lag}")

    if r.reasons:
        r.status = ERROR
    elif lag > topic.lag_warn_records and window and all(s.lag > topic.lag_warn_records for s in window) and lag >= window[0].lag:
        r.status = WARN
        r.reasons.append(
            f"lag {lag} above {topic.lag_warn_records} for the last {len(window) + 1} evaluations and not shrinking"
        )
    return r


def overall(reports: list[PartitionReport]) -> str:
    return max((r.status for r in reports), key=_RANK.__getitem__, default=OK)


def _stalled_since(history: list[Sample], committed: int | None, now: float) -> float | None:
    """Earliest time of the run of samples, ending now, in which the committed offset is this one."""
    since = None
    for s in reversed(history):
        if s.committed != committed or s.lag == 0:
            break
        since = s.t
    return since


def _covered(ranges: list[tuple[int, int]], lo: int, hi: int) -> bool:
    pos = lo
    for a, b in sorted(ranges):
        if a <= pos < b:
            pos = b
    return pos >= hi


def _spans(spans) -> str:
    return ", ".join(f"[{a}, {b})" for a, b in spans)
