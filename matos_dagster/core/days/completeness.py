"""Which event-time windows (days, or hours) of a topic are completely archived.

Per partition, from its archived contiguous prefix only (ranges read once each, in offset order,
as the monitor reads them: what is known is carried in `PartitionTime`, never re-listed):

- its **watermark** is the largest record timestamp archived so far minus `allowed_lateness_ms`,
  where a timestamp beyond `now + future_margin_ms` (a producer clock far ahead) moves nothing
  and is counted as `future`; records without a timestamp belong to no window (`untimed`);
- it is **idle** when its prefix reaches its log end and the log end has not moved for
  `idle_ms`: it then holds back no window up to `now - allowed_lateness_ms`.

The topic's watermark is the least of its partitions'. A window `[start, end)` is **complete**
when the topic's watermark has reached `end`. Once complete, it stays complete: a record of it
archived later is **late**, counted on the window, which gets a new data version. With CreateTime
the timestamps are the producers'; with LogAppendTime the broker's, which only move forward, so
nothing is late then but what waited beyond the lateness to be appended.

No Dagster imports: `advance` is one evaluation, pure; the Dagster shell reads the ranges'
hour buckets (days/buckets.py) and keeps the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from matos_dagster.core.days import buckets as hours
from matos_dagster.core.days.windows import start_of

LOST = "lost:"  # a Part's name for an acknowledged loss (a range's name is its Swift folder)


@dataclass(frozen=True)
class Rules:
    length_ms: int  # windows.DAY_MS or HOUR_MS
    allowed_lateness_ms: int = 0
    idle_ms: int = 300_000
    future_margin_ms: int = 3_600_000


@dataclass(frozen=True)
class ArchivedRange:
    """A range of the partition's prefix, as the manifest gives it: `[start, end)`, its name, its hours."""

    start: int
    end: int
    name: str
    buckets: hours.Buckets
    untimed: int = 0
    lost: int = 0  # an acknowledged loss: offsets of no window


@dataclass
class Part:
    """What one partition holds of one window, per range: `{range name: [records, bytes,
    first_offset, last_offset, late]}`, so adding a range's share again changes nothing."""

    ranges: dict[str, list[int]] = field(default_factory=dict)

    def add(self, n: int, nb: int, lo: int, hi: int, name: str, late: bool) -> None:
        r = self.ranges.get(name)
        if r is None:
            self.ranges[name] = [n, nb, lo, hi, n if late else 0]
        else:  # the range's other hours of the same window
            self.ranges[name] = [r[0] + n, r[1] + nb, min(r[2], lo), max(r[3], hi), r[4] + (n if late else 0)]

    def add_loss(self, start: int, end: int) -> None:
        """An acknowledged loss `[start, end)` that may have held records of the window (no record: a name
        of its own, LOST + offsets, so the window's records, bytes and offsets are its ranges' alone)."""
        self.ranges[f"{LOST}{start}-{end}"] = [0, 0, start, end - 1, 0]

    def merge(self, other: "Part") -> None:
        self.ranges.update(other.ranges)

    def _held(self):
        return [r for name, r in self.ranges.items() if not name.startswith(LOST)]

    @property
    def names(self) -> list[str]:
        """The ranges (Swift folders) that hold the window's records, in order."""
        return sorted(name for name in self.ranges if not name.startswith(LOST))

    @property
    def records(self) -> int:
        return sum(r[0] for r in self._held())

    @property
    def bytes(self) -> int:
        return sum(r[1] for r in self._held())

    @property
    def first_offset(self) -> int | None:
        return min((r[2] for r in self._held()), default=None)

    @property
    def last_offset(self) -> int | None:
        return max((r[3] for r in self._held()), default=None)

    @property
    def late(self) -> int:
        return sum(r[4] for r in self._held())

    @property
    def losses(self) -> list[tuple[int, int]]:
        """The acknowledged losses `[start, end)` that may have held records of the window."""
        return sorted((r[2], r[3] + 1) for name, r in self.ranges.items() if name.startswith(LOST))


@dataclass
class PartitionTime:
    next_offset: int = 0  # the prefix is read up to here
    max_ts: int | None = None  # the largest timestamp that moves the watermark
    future: int = 0  # records stamped beyond now + the margin when read
    untimed: int = 0
    log_end: int = -1  # the log end last seen, and since when (idleness)
    log_end_since_ms: int = 0
    lost: int = 0  # offsets of acknowledged losses passed over (their records are in no window)
    late: int = 0  # records of a window already complete when they were read
    # Acknowledged losses passed over since the last timed record, [start, end, the latest timestamp
    # before them or None]: the windows they touched are known once a record after them is read.
    losses: list = field(default_factory=list)


@dataclass
class TopicTime:
    """One topic's state between evaluations: per partition, and the windows not yet reported."""

    partitions: dict[int, PartitionTime] = field(default_factory=dict)
    complete_to: int | None = None  # every window ending at or before this is complete
    pending: dict[int, dict[int, Part]] = field(default_factory=dict)  # window start -> partition -> part


@dataclass(frozen=True)
class Update:
    """A window to (re)materialise: complete for the first time, or a complete one with late records."""

    start: int
    end: int
    parts: dict[int, Part]
    late: bool  # parts hold only what changed in a window already complete (late records, losses)


def partition_watermark(p: PartitionTime, log_end: int, now_ms: int, rules: Rules) -> int | None:
    """The partition's watermark, None while it has none (nothing archived, not idle)."""
    idle = p.next_offset >= log_end and p.log_end == log_end and now_ms - p.log_end_since_ms >= rules.idle_ms
    marks = [p.max_ts - rules.allowed_lateness_ms] if p.max_ts is not None else []
    if idle:
        marks.append(now_ms - rules.allowed_lateness_ms)
    return max(marks) if marks else None


def advance(state: TopicTime, ranges: dict[int, list[ArchivedRange]], log_ends: dict[int, int], now_ms: int,
            rules: Rules) -> tuple[TopicTime, list[Update]]:
    """One evaluation: `ranges` are each partition's archived ranges from its `next_offset` on, in
    order and contiguous (the caller stops at a gap); `log_ends` every partition's log end. Returns
    the new state and the windows to materialise, oldest first."""
    limit = now_ms + rules.future_margin_ms
    late_parts: dict[int, dict[int, Part]] = {}

    def complete(w: int) -> bool:
        return state.complete_to is not None and w + rules.length_ms <= state.complete_to

    def into(w: int, partition: int) -> Part:
        """The partition's share of window `w` in this evaluation: pending, or a change to a complete window."""
        return (late_parts if complete(w) else state.pending).setdefault(w, {}).setdefault(partition, Part())

    for partition, log_end in log_ends.items():
        p = state.partitions.setdefault(partition, PartitionTime())
        if p.log_end != log_end:
            p.log_end, p.log_end_since_ms = log_end, now_ms
        for r in ranges.get(partition, []):
            if r.start != p.next_offset:
                break  # not contiguous: the rest waits for the gap to be archived
            p.untimed += r.untimed
            if r.lost:
                p.lost += r.lost
                p.losses.append([r.start, r.end, p.max_ts])
                if p.max_ts is not None:  # the window of the last record before it, known now
                    into(start_of(p.max_ts, rules.length_ms), partition).add_loss(r.start, r.end)
            timed = [h for h in r.buckets if h <= limit]
            if p.losses and timed:
                # A loss may have held records of any window from the last record before it to the first after.
                after = start_of(min(timed), rules.length_ms)
                for lo, hi, before in p.losses:
                    for w in range(after if before is None else start_of(before, rules.length_ms),
                                   after + rules.length_ms, rules.length_ms):
                        into(w, partition).add_loss(lo, hi)
                p.losses = []
            for h, (n, nb, lo, hi, mx) in sorted(r.buckets.items()):
                if h > limit:
                    p.future += n
                    continue
                if mx <= limit:
                    p.max_ts = mx if p.max_ts is None else max(p.max_ts, mx)
                w = start_of(h, rules.length_ms)
                late = complete(w)
                into(w, partition).add(n, nb, lo, hi, r.name, late)
                p.late += n if late else 0
            p.next_offset = r.end
    marks = [partition_watermark(state.partitions[q], log_ends[q], now_ms, rules) for q in log_ends]
    updates = [Update(w, w + rules.length_ms, parts, True) for w, parts in sorted(late_parts.items())]
    if marks and None not in marks:
        reach = start_of(min(marks), rules.length_ms)  # windows ending at or before it are complete
        if state.complete_to is None or reach > state.complete_to:
            done = {w for w in state.pending if w + rules.length_ms <= reach}
            # and the windows with no record in between, from the first window that had one
            since = state.complete_to if state.complete_to is not None else min(done, default=reach)
            done.update(range(since, reach, rules.length_ms))
            updates += [Update(w, w + rules.length_ms, state.pending.pop(w, {}), False) for w in sorted(done)]
            state = replace(state, complete_to=reach)
    return state, sorted(updates, key=lambda u: (u.start, u.late))
