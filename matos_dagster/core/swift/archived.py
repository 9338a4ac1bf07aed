"""Finding what is archived: the one module that reads the archive's listings in Swift.

A partition's archive is a row of range folders named `<start:020d>-<end:020d>/`, which
sort in offset order (layout.py). A folder counts when it holds `_manifest.json` (an
archived range), `_loss.json` (an acknowledged loss, see loss.py) or `_expired.json` (a span
whose records expired by age, core/expire/); any other folder is an
unfinished attempt and counts as nothing. These counted folders are the partition's
*entries*.

Compaction (core/compact/) adds a folder that contains others: `[a, c)` whose manifest replaces
`[a, b)` and `[b, c)`. The rule, here and nowhere else: when entries nest, the containing one is
*effective* and the contained ones are *superseded*; the finder yields effective entries only,
so every offset the archive vouches for is in exactly one yielded entry. A superseded folder
keeps its objects until compaction's grace period has passed, so a caller that meets one
(below, `last_before` from inside a compacted range) still reads the same records.

Recurring work never reads the whole row, so its cost does not grow with the history:

- `entries_from(offset)`: one reverse listing (plus one small listing per folder probed)
  finds the entry that covers `offset` part-way; then pages of names from `offset` on,
  read lazily as the caller goes on. From the committed offset, that is the ranges not yet
  committed: a handful, whatever the history.
- `entry_at_or_after(offset)`: one small listing; a binary search over offsets with it
  costs O(log offsets) requests (the reader's time windows).
- `all()`: every entry, page by page: full audits only (`matos verify --audit-all`).

No Dagster imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from matos_dagster.core.offsets.ranges import OFFSET_WIDTH, OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import LIST_PAGE, Store

RANGE, LOSS, EXPIRED = "range", "loss", "expired"
# In a folder with several markers, the first named here is what the folder is: an expired span's
# marker is written before its manifest and objects are deleted (core/expire/), so it wins.
_MARKERS = {layout.EXPIRED: EXPIRED, layout.MANIFEST: RANGE, layout.LOSS: LOSS}
_RANK = {LOSS: 0, RANGE: 1, EXPIRED: 2}
_PARTITION_DIR = re.compile(r"partition=(\d+)/?$")
PROBE = 16  # folders asked for per reverse listing: unfinished attempts are rare


@dataclass(frozen=True, order=True)
class Entry:
    """An archived range (`kind` RANGE), an acknowledged loss (LOSS) or an expired span (EXPIRED): `[start, end)`."""

    start: int
    end: int
    kind: str
    # The marker object's Last-Modified as Swift lists it (ISO 8601, UTC), when the listing
    # gave it: compaction's minimum age and grace period. Not part of the entry's identity.
    modified: str | None = field(default=None, compare=False)

    @property
    def span(self) -> tuple[int, int]:
        return (self.start, self.end)


@dataclass
class Folder:
    """A range folder as listed: its entry (None: an unfinished attempt or a half-deleted
    folder) and the names of every object in it."""

    start: int
    end: int
    entry: Entry | None = None
    names: list[str] = field(default_factory=list)

    @property
    def span(self) -> tuple[int, int]:
        return (self.start, self.end)


class PartitionArchive:
    """The entries of one topic partition in one store, found by bounded listings."""

    def __init__(self, store: Store, prefix: str, topic: str, partition: int):
        self.store = store
        self.prefix = prefix
        self.topic = topic
        self.partition = partition
        self.dir = layout.partition_dir(prefix, topic, partition) + "/"

    def range(self, entry: Entry) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, entry.start, entry.end)

    def read(self, entry: Entry) -> dict | None:
        """The entry's manifest (RANGE) or loss record (LOSS); None if it vanished meanwhile."""
        r = self.range(entry)
        name = {RANGE: layout.manifest_name, EXPIRED: layout.expired_name}.get(entry.kind, layout.loss_name)(self.prefix, r)
        return self.store.get_json(name)

    def entries_from(self, offset: int) -> Iterator[Entry]:
        """Every entry holding an offset at or above `offset`, in offset order.

        First the entry that starts below `offset` and reaches past it (an administrator may
        have moved the committed offset into a range), then those starting at or after it.
        Lazy: each page is listed when the caller gets to it, so a caller that stops at
        the first hole lists no further.
        """
        before = self.last_before(offset)
        reach = None
        if before is not None and before.end > offset:
            yield before
            reach = before.end  # entries inside it are superseded by it (or by what holds it)
        yield from effective(self._forward(self._folder(offset)), reach)

    def overlapping(self, start: int, end: int) -> list[Entry]:
        """The entries that share an offset with `[start, end)`."""
        out = []
        for e in self.entries_from(start):
            if e.start >= end:
                break
            out.append(e)
        return out

    def entry_at_or_after(self, offset: int) -> Entry | None:
        """The first entry starting at or after `offset` (one small listing, mostly)."""
        return next(effective(self._forward(self._folder(offset), page=PROBE * 4)), None)

    def last_before(self, offset: int) -> Entry | None:
        """The entry with the greatest start below `offset` (the longest of those), or None.

        From inside a compacted range `[a, c)` whose replaced folders are still there, this is
        the replaced folder holding the offsets just below `offset`: superseded, yet intact
        (its objects hold the same records) until compaction's grace period has passed.
        Deciding whether an entry is contained would mean listing back to the container's
        start, which no bound limits; the entries yielded from here on never overlap it.
        """
        marker = self._folder(offset)
        while True:
            folders = self.store.list_page(self.dir, marker=marker, delimiter="/", reverse=True, limit=PROBE)
            for item in folders:
                folder = item.get("subdir", "")
                span = layout.parse_range_dir(folder)
                if span is None:
                    continue
                kinds, modified = self._kinds(folder)
                if kinds:
                    return Entry(span[0], span[1], kinds[0], modified)
            if len(folders) < PROBE:
                return None
            marker = folders[-1].get("subdir") or folders[-1].get("name")

    def all(self) -> Iterator[Entry]:
        """Every effective entry of the partition, in offset order: the whole history (audits only)."""
        return effective(self._forward(None))

    def folders_from(self, offset: int) -> Iterator["Folder"]:
        """Every range folder starting at or after `offset`, in (start, end) order, with its objects.

        Superseded entries and folders without a marker included: for compaction, which
        deletes the folders it replaced. Lazy, like `entries_from`.
        """
        current: Folder | None = None
        for item in self._items(self._folder(offset), LIST_PAGE):
            name = item.get("name", "")
            span = layout.parse_range_dir(name.rpartition("/")[0])
            if span is None:
                continue
            if current is None or current.span != span:
                if current is not None:
                    yield current
                current = Folder(span[0], span[1])
            current.names.append(name)
            e = entry_of(name, item.get("last_modified"))
            if e is not None and (current.entry is None or _RANK[e.kind] > _RANK[current.entry.kind]):
                current.entry = e
        if current is not None:
            yield current

    def _folder(self, offset: int) -> str:
        # Folder names are `<start:020d>-<end:020d>/`: every folder starting at or after
        # `offset` sorts after this, every one starting below it sorts before.
        return f"{self.dir}{offset:0{OFFSET_WIDTH}d}"

    def _kinds(self, folder: str) -> tuple[list[str], str | None]:
        """What the folder's marker objects make it ([RANGE], [LOSS], both, or []), and when."""
        # Marker names start with `_`, which sorts before `part-`: list just those ("`" follows "_").
        items = self.store.list_page(folder, end_marker=folder + "`")
        found = {item.get("name", "")[len(folder):]: item.get("last_modified") for item in items}
        kinds = [kind for name, kind in _MARKERS.items() if name in found]
        return kinds, (found[next(n for n, k in _MARKERS.items() if k == kinds[0])] if kinds else None)

    def _forward(self, marker: str | None, page: int = LIST_PAGE) -> Iterator[Entry]:
        for item in self._items(marker, page):
            e = entry_of(item.get("name", ""), item.get("last_modified"))
            if e is not None:
                yield e

    def _items(self, marker: str | None, page: int) -> Iterator[dict]:
        while True:
            items = self.store.list_page(self.dir, marker=marker, limit=page)
            yield from items
            if len(items) < page:
                return
            marker = items[-1]["name"]


def entry_of(name: str, modified: str | None = None) -> Entry | None:
    """The entry an object name stands for, if it is a manifest or a loss record."""
    folder, _, base = name.rpartition("/")
    kind = _MARKERS.get(base)
    if kind is None:
        return None
    span = layout.parse_range_dir(folder)
    return Entry(span[0], span[1], kind, modified) if span else None


def effective(entries: Iterable[Entry], reach: int | None = None) -> Iterator[Entry]:
    """The effective entries of `entries` (sorted by start, then end, as Swift lists them).

    An entry contained in another is superseded. In name order a compacted folder `a-c`
    comes after `a-b` (same start, longer) and before `b-c`, so: of entries with the same
    start the longest is kept (one entry is held back until the next start is seen), and an
    entry that ends at or before the furthest end yielded so far (`reach`; pass the end of an
    entry already yielded) is inside it. Entries that cross without nesting are both yielded:
    they are an overlap, which the verifier and the monitor report; compaction never makes one.
    A folder holding both a manifest and a loss record is one entry, the archived range; one
    holding an expired span's marker is that span, whatever else it still holds.
    """
    held: Entry | None = None
    for e in entries:
        if held is not None and e.start == held.start:
            if e.end > held.end or (e.end == held.end and _RANK[e.kind] >= _RANK[held.kind]):
                held = e  # longer, or the same folder's stronger marker (an expired span's, then a manifest)
            continue
        if held is not None and (reach is None or held.end > reach):
            yield held
            reach = held.end if reach is None else max(reach, held.end)
        held = e
    if held is not None and (reach is None or held.end > reach):
        yield held


def archived_partitions(store: Store, prefix: str, topic: str) -> list[int]:
    """The partitions with a folder in the archive (one listing of folders, not objects)."""
    out = []
    for item in store.list(layout.topic_dir(prefix, topic) + "/", delimiter="/"):
        m = _PARTITION_DIR.search(item.get("subdir", ""))
        if m:
            out.append(int(m[1]))
    return sorted(out)
