"""One partition's archive from an offset on, read in two listings: what a batch run needs of it.

A run of many one-record ranges (the lag sensor's batch over a busy estate) asked Swift, per
range, whether its manifest was there, which entries it overlapped, which objects an earlier
attempt had left in its folder, and, to commit, where the contiguous archived prefix ended:
seven requests a range, each costing Swift's servers more CPU than the range's own object. A
`ListedPartition` answers all of them for every range of the partition at or above `start` from
what it read once: the entry just below `start` (one reverse listing, mostly) and every folder
from `start` on (one forward listing, mostly). The run holds the partition's turn (turns.py), so
nobody else adds an entry meanwhile; the manifests the run writes are `add`ed. Were one added
anyway, the prefix found here would end before it: the commit is then short, never past a hole.

Answers what `PartitionArchive` answers (`entries_from`, `overlapping`, `last_before`) for
offsets at or above `start`, by the same rules (archived.py's `effective`). No Dagster imports.
"""

from __future__ import annotations

from typing import Iterator

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import _MARKERS, RANGE, Entry, Folder, PartitionArchive, effective
from matos_dagster.core.swift.store import Store

REVERSE_PAGE = 100  # objects: the folder below `start` and its markers, in one request unless it is a large one


class ListedPartition:
    def __init__(self, store: Store, prefix: str, topic: str, partition: int, start: int):
        self.archive = PartitionArchive(store, prefix, topic, partition)
        self.start = start
        self.before = last_before(self.archive, start)
        self.folders: dict[tuple[int, int], Folder] = {f.span: f for f in self.archive.folders_from(start)}
        self.added: list[Entry] = []

    def names(self, r: OffsetRange) -> list[str]:
        """The objects of `r`'s folder as listed (an earlier attempt's, or the range's archive)."""
        f = self.folders.get((r.start, r.end))
        return list(f.names) if f is not None else []

    def has_manifest(self, r: OffsetRange) -> bool:
        f = self.folders.get((r.start, r.end))
        return f is not None and any(n.endswith("/" + layout.MANIFEST) for n in f.names)

    def add(self, r: OffsetRange) -> None:
        """A manifest this run wrote: an entry from now on."""
        self.added.append(Entry(r.start, r.end, RANGE))

    def _entries(self) -> list[Entry]:
        return sorted([f.entry for f in self.folders.values() if f.entry is not None] + self.added)

    def last_before(self, offset: int) -> Entry | None:
        self._covers(offset)
        below = [e for e in self._entries() if e.start < offset] + ([self.before] if self.before else [])
        return max(below, key=lambda e: (e.start, e.end), default=None)

    def entries_from(self, offset: int) -> Iterator[Entry]:
        before = self.last_before(offset)
        reach = None
        if before is not None and before.end > offset:
            yield before
            reach = before.end
        yield from effective((e for e in self._entries() if e.start >= offset), reach)

    overlapping = PartitionArchive.overlapping  # over this class's `entries_from`

    def _covers(self, offset: int) -> None:
        if offset < self.start:
            raise ValueError(f"listed from offset {self.start}, not {offset}")


def last_before(archive: PartitionArchive, offset: int) -> Entry | None:
    """`archive.last_before(offset)` in one request, mostly: a reverse listing of objects, not of folders
    then of each folder's markers. Where one page does not settle it (a folder of many objects, or
    many unfinished attempts), `archive.last_before` itself."""
    items = archive.store.list_page(archive.dir, marker=archive._folder(offset), reverse=True, limit=REVERSE_PAGE)
    folder, markers = None, {}
    for item in items:
        path, _, base = item.get("name", "").rpartition("/")
        if layout.parse_range_dir(path) is None:
            continue
        if path != folder:
            if markers:  # the folder above is complete: every name of it sorts above this one
                return _entry(folder, markers)
            folder, markers = path, {}
        if base in _MARKERS:
            markers[base] = item.get("last_modified")
    if len(items) < REVERSE_PAGE:  # the listing ended: the last folder is complete too
        return _entry(folder, markers) if markers else None
    return archive.last_before(offset)


def _entry(folder: str, markers: dict[str, str | None]) -> Entry:
    start, end = layout.parse_range_dir(folder)
    name = next(n for n in _MARKERS if n in markers)
    return Entry(start, end, _MARKERS[name], markers[name])
