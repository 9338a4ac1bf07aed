"""Which event-time windows (days, or hours) of a topic are completely archived.

Per partition, from its archived contiguous prefix only (ranges read once each, in offset order,
as the monitor reads them: what is known is carried in `PartitionTime`, never re-listed). The
prefix begins at the partition's first archived entry (evaluate.py finds it), not at offset 0: an
archive begun on a topic older than its retention starts at the log start offset of that day.

- its **watermark** is the largest record timestamp archived so far minus `allowed_lateness_ms`,
  where a timestamp beyond `now + future_margin_ms` (a producer clock ahead) counts as
  `now + future_margin_ms` only: such a record is in its window like any other (counted as
  `future`), and its partition is held to the margin, neither stalled nor let ahead of it;
  records without a timestamp belong to no window (`untimed`), nor do records stamped before
  the first window (`windows_start`) or past the year 9999 (`outside`);
- it is **idle** when its prefix reaches its log end and the log end has not moved for
  `idle_ms`: it then holds back no window up to `now - allowed_lateness_ms`.

The topic's watermark is the least of its partitions'. A window `[start, end)` is **complete**
when the topic's watermark has reached `end`; windows are completed in order from the first
that had a record, at most `most` an evaluation (each is written, and each is a run). Once
complete, it stays complete: a record of it archived later is **late**, counted on the window,
which gets a new data version. With CreateTime the timestamps are the producers'; with
LogAppendTime the broker's, which only move forward, so nothing is late then but what waited
beyond the lateness to be appended.

No Dagster imports: `advance` is one evaluation step, pure; evaluate.py reads the ranges' hour
buckets (days/buckets.py), keeps the state and the open windows' shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from matos_dagster.core.days import buckets as hours
from matos_dagster.core.days.windows import start_of

LOST = "lost:"  # a Part's name for an acknowledged loss (a range's name is its Swift folder)
END_MS = 253_402_300_800_000  # 10000-01-01 UTC: no window (nor Dagster partition key) past the year 9999


@dataclass(frozen=True)
class Rules:
    length_ms: int  # windows.DAY_MS or HOUR_MS
    allowed_lateness_ms: int = 0
    idle_ms: int = 300_000
    future_margin_ms: int = 3_600_000
    first_ms: int = 0  # the first window's start (windows_start): no window before it


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
    # The prefix is read up to here; None: not begun (where its archive begins is not known yet).
    next_offset: int | None = None
    max_ts: int | None = None  # the largest timestamp read, held to the future margin: the watermark's
    future: int = 0  # records stamped beyond now + the margin when read (in their windows all the same)
    untimed: int = 0
    log_end: int = -1  # the log end last seen, and since when (idleness)
    log_end_since_ms: int = 0
    lost: int = 0  # offsets of acknowledged losses passed over (their records are in no window)
    late: int = 0  # records of a window already complete when they were read
    # Acknowledged losses passed over since the last timed record, [start, end, the latest timestamp
    # before them or None]: the windows they touched are known once a record after them is read.
    losses: list = field(default_factory=list)
    outside: int = 0  # records stamped before the first window or past the year 9999: in no window


@dataclass
class TopicTime:
    """One topic's state between evaluations: per partition, and where complete windows are."""

    partitions: dict[int, PartitionTime] = field(default_factory=dict)
    complete_to: int | None = None  # every window ending at or before this is complete
    # The windows not complete yet, as read by this evaluation: window start -> partition -> part.
    # Shares of earlier evaluations are kept apart, one object per window (evaluate.py), so the
    # state does not grow with the windows a slow partition holds open.
    pending: dict[int, dict[int, Part]] = field(default_factory=dict)
    first_window: int | None = None  # the first window that had a record: complete windows begin there


@dataclass(frozen=True)
class Update:
    """A window to (re)materialise: complete for the first time, or a complete one with late records."""

    start: int
    end: int
    parts: dict[int, Part]
    late: bool  # parts hold only what changed in a window already complete (late records, losses)


def next_completion_ms(state: TopicTime, rules: Rules) -> int | None:
    """The earliest time (ms) at which an evaluation can complete a window of the topic; None: no window
    begun yet. The first window not complete ends at E; a partition's watermark reaches E no sooner
    than `now + future_margin_ms - allowed_lateness_ms` (a timestamp counts as now plus the margin at
    most, whenever it was read) or, idle, `now - allowed_lateness_ms`."""
    since = state.complete_to if state.complete_to is not None else state.first_window
    if since is None:
        return None
    return max(since, rules.first_ms) + rules.length_ms + rules.allowed_lateness_ms - rules.future_margin_ms


def partition_watermark(p: PartitionTime, log_start: int, log_end: int, now_ms: int, rules: Rules) -> int | None:
    """The partition's watermark, None while it has none (nothing archived, not idle). A partition not
    begun is at its log end when its log is empty (nothing to archive)."""
    read_to = p.next_offset if p.next_offset is not None else log_start
    idle = read_to >= log_end and p.log_end == log_end and now_ms - p.log_end_since_ms >= rules.idle_ms
    marks = [p.max_ts - rules.allowed_lateness_ms] if p.max_ts is not None else []
    if idle:
        marks.append(now_ms - rules.allowed_lateness_ms)
    return max(marks) if marks else None


def advance(state: TopicTime, ranges: dict[int, list[ArchivedRange]], log_ends: dict[int, int], now_ms: int,
            rules: Rules, log_starts: dict[int, int] | None = None,
            most: int | None = None) -> tuple[TopicTime, list[Update]]:
    """One evaluation step: `ranges` are each partition's archived ranges from its `next_offset` on (a
    partition not begun begins at its first one), in order and contiguous (the caller stops at a gap);
    `log_ends` every partition's log end, `log_starts` its log start (default 0). Returns the new
    state and the windows to materialise, oldest first: at most `most` newly complete ones."""
    limit = now_ms + rules.future_margin_ms
    late_parts: dict[int, dict[int, Part]] = {}

    def complete(w: int) -> bool:
        return state.complete_to is not None and w + rules.length_ms <= state.complete_to

    def into(w: int, partition: int) -> Part | None:
        """The partition's share of window `w` in this evaluation: pending, or a change to a complete
        window; None when `w` is no window (before the first, past the year 9999)."""
        if w < rules.first_ms or w + rules.length_ms > END_MS:
            return None
        if state.complete_to is None and (state.first_window is None or w < state.first_window):
            state.first_window = w
        return (late_parts if complete(w) else state.pending).setdefault(w, {}).setdefault(partition, Part())

    def windows(a: int, b: int) -> range:
        """The windows from the one of timestamp `a` to the one of `b` (either order), that can be windows."""
        return range(max(start_of(min(a, b), rules.length_ms), rules.first_ms),
                     min(start_of(max(a, b), rules.length_ms), END_MS - rules.length_ms) + rules.length_ms,
                     rules.length_ms)

    for partition, log_end in log_ends.items():
        p = state.partitions.setdefault(partition, PartitionTime())
        if p.log_end != log_end:
            p.log_end, p.log_end_since_ms = log_end, now_ms
        for r in ranges.get(partition, []):
            if p.next_offset is None:
                p.next_offset = r.start  # the partition's first entry: where its archive begins
            if r.start != p.next_offset:
                break  # not contiguous: the rest waits for the gap to be archived
            p.untimed += r.untimed
            if r.lost:
                p.lost += r.lost
                p.losses.append([r.start, r.end, p.max_ts])
                if p.max_ts is not None:  # the window of the last record before it, known now
                    for w in windows(p.max_ts, p.max_ts):
                        into(w, partition).add_loss(r.start, r.end)
            # A time beyond the margin is no bound on what the partition may still send.
            timed = [h for h in r.buckets if h <= limit]
            if p.losses and timed:
                # A loss may have held records of any window from the last record before it to the first after.
                after = min(timed)
                for lo, hi, before in p.losses:
                    for w in windows(after if before is None else before, after):
                        into(w, partition).add_loss(lo, hi)
                p.losses = []
            for h, (n, nb, lo, hi, mx) in sorted(r.buckets.items()):
                if h > limit:
                    p.future += n
                # Held to the margin: a clock ahead neither stalls the topic nor moves it past now + margin.
                p.max_ts = min(mx, limit) if p.max_ts is None else max(p.max_ts, min(mx, limit))
                w = start_of(h, rules.length_ms)
                part = into(w, partition)
                if part is None:
                    p.outside += n
                    continue
                late = complete(w)
                part.add(n, nb, lo, hi, r.name, late)
                p.late += n if late else 0
            p.next_offset = r.end
    starts = log_starts or {}
    marks = [partition_watermark(state.partitions[q], starts.get(q, 0), log_ends[q], now_ms, rules) for q in log_ends]
    updates = [Update(w, w + rules.length_ms, parts, True) for w, parts in sorted(late_parts.items())]
    since = state.complete_to if state.complete_to is not None else state.first_window
    if since is not None:
        since = max(since, rules.first_ms)  # also when windows_start was moved past complete windows
    if marks and None not in marks and since is not None:
        reach = start_of(min(marks), rules.length_ms)  # windows ending at or before it are complete
        if most is not None:
            reach = min(reach, since + max(0, most) * rules.length_ms)
        if reach > since:
            # Every window from `since`: those with records, and those without any in between
            # (an empty Sunday between complete days is a complete Sunday).
            updates += [Update(w, w + rules.length_ms, state.pending.pop(w, {}), False)
                        for w in range(since, reach, rules.length_ms)]
            state = replace(state, complete_to=reach)
    return state, sorted(updates, key=lambda u: (u.start, u.late))
