"""Which manifests a read of the archive takes (core/reader.py): bounded, whatever the history.

An offset window lists the entries from its start to its end; a time window finds its first range
by a binary search over offsets (`_first_stamped_at_or_after`), reading the min/max timestamps of
O(log offsets) manifests. Restore plans the same way (core/restore/plan.py). No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

from matos_dagster.core.offsets.ranges import OFFSET_WIDTH
from matos_dagster.core.swift.archived import EXPIRED, LOSS, RANGE, Entry, PartitionArchive
from matos_dagster.core.swift.store import Store


@dataclass(frozen=True)
class Window:
    """Offsets `[start, end)` of one partition, and a time window; None is open."""

    partition: int
    start: int | None = None
    end: int | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def overlaps_offsets(self, lo: int, hi: int) -> bool:
        """Whether `[lo, hi)` shares an offset with the window."""
        return (self.start is None or hi > self.start) and (self.end is None or lo < self.end)

    def overlaps_times(self, min_ts: int | None, max_ts: int | None) -> bool:
        """Whether records stamped within [min_ts, max_ts] may fall in the time window."""
        if self.since_ms is None and self.until_ms is None:
            return True
        if min_ts is None or max_ts is None:  # no record with a timestamp
            return False
        return (self.since_ms is None or max_ts >= self.since_ms) and (self.until_ms is None or min_ts < self.until_ms)

    def clip(self, lo: int, hi: int) -> tuple[int, int]:
        """`[lo, hi)` narrowed to the window's offsets."""
        return (lo if self.start is None else max(lo, self.start), hi if self.end is None else min(hi, self.end))


@dataclass
class Selection:
    """What a read takes from the archive: manifests to read, and what it passed over."""

    manifests: list[dict] = field(default_factory=list)  # sorted by partition and start
    notes: list[str] = field(default_factory=list)  # acknowledged losses met in the windows


def find_manifests(store: Store, prefix: str, topic: str, windows: Iterable[Window], scan_all: bool = False) -> Selection:
    """The manifests that may hold records of the windows, found with bounded listings.

    An offset window lists the entries from its start and stops at its end. A time window
    finds its first range by a binary search over offsets, reading the min/max timestamps
    of O(log offsets) manifests, then reads manifests forward until one starts at or after
    its end. That is exact when timestamps do not decrease with offsets (as Kafka's own
    `offsetsForTimes` assumes); `scan_all` reads every manifest of the offset window
    instead, for topics whose producers set timestamps out of order. Acknowledged losses
    in a window hold no records: they are skipped, with a note.
    """
    by_partition: dict[int, list[Window]] = {}
    for w in windows:
        by_partition.setdefault(w.partition, []).append(w)
    out = Selection()
    for p, ws in sorted(by_partition.items()):
        archive = PartitionArchive(store, prefix, topic, p)
        docs: dict[int, dict] = {}
        for w in ws:
            for doc in _window_manifests(archive, w, scan_all, out.notes):
                docs.setdefault(doc["start"], doc)
        out.manifests += [d for _, d in sorted(docs.items())]
    return out


def _window_manifests(archive: PartitionArchive, w: Window, scan_all: bool, notes: list[str]) -> Iterator[dict]:
    timed = w.since_ms is not None or w.until_ms is not None
    begin = w.start or 0
    if timed and not scan_all and w.since_ms is not None:
        first = _first_stamped_at_or_after(archive, w.since_ms, begin)
        if first is None:
            return
        begin = max(begin, first.start)
    entries = archive.all() if begin == 0 and w.start is None else archive.entries_from(begin)
    for e in entries:
        if w.end is not None and e.start >= w.end:
            return
        if e.kind == LOSS:
            notes.append(f"{archive.topic}/{archive.partition}[{e.start}, {e.end}): an acknowledged loss "
                         f"({e.end - e.start} offsets deleted from Kafka before they were archived): no records "
                         "to read there, skipped")
            continue
        if e.kind == EXPIRED:  # core/expire/: removed as the topic's retention asks; no loss to warn of
            continue
        doc = archive.read(e)
        if doc is None:  # removed since it was listed
            continue
        lo_ts, hi_ts = doc.get("min_timestamp"), doc.get("max_timestamp")
        if w.overlaps_offsets(e.start, e.end) and w.overlaps_times(lo_ts, hi_ts):
            yield doc
        elif timed and not scan_all and w.until_ms is not None and lo_ts is not None and lo_ts >= w.until_ms:
            return  # timestamps do not decrease with offsets: every later range is later still


def _first_stamped_at_or_after(archive: PartitionArchive, since_ms: int, lo: int) -> Entry | None:
    """The first range from offset `lo` whose records may be stamped at or after `since_ms`.

    A binary search over offsets: `entry_at_or_after(x)` is one small listing, and whether
    its range's newest record is stamped before `since_ms` only changes once along the
    offsets when timestamps do not decrease with them.
    """
    cache: dict[int, tuple[Entry | None, dict | None]] = {}

    def probe(x: int) -> Entry | None:
        """The first range at or after `x` with timestamps, or None; and whether it qualifies."""
        e = archive.entry_at_or_after(x)
        while e is not None:
            if e.start not in cache:
                cache[e.start] = (e, archive.read(e) if e.kind == RANGE else None)
            doc = cache[e.start][1]
            if doc is not None and doc.get("max_timestamp") is not None:
                return e
            e = archive.entry_at_or_after(e.end)  # a loss, or a range of unstamped records: the next
        return None

    def qualifies(x: int) -> bool:
        e = probe(x)
        return e is None or cache[e.start][1]["max_timestamp"] >= since_ms

    below = archive.last_before(lo)  # a range covering `lo` part-way comes first
    if below is not None and below.end > lo:
        lo = below.start
    if qualifies(lo):
        return probe(lo)
    last = archive.last_before(_AFTER_ALL)
    hi = lo + 1 if last is None else max(lo + 1, last.end)
    # qualifies(lo) is False, qualifies(hi) is True (no range at or after the last one's end)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if qualifies(mid):
            hi = mid
        else:
            lo = mid
    return probe(hi)


_AFTER_ALL = 10**OFFSET_WIDTH - 1  # sorts after every range folder
