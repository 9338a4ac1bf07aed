"""Finding what is archived: the one module that reads the archive's listings in Swift.

A partition's archive is a row of range folders named `<start:020d>-<end:020d>/`, which
sort in offset order (layout.py). A folder counts when it holds `_manifest.json` (an
archived range) or `_loss.json` (an acknowledged loss, see loss.py); any other folder is an
unfinished attempt and counts as nothing. These counted folders are the partition's
*entries*: every offset the archive vouches for is in exactly one of them.

Recurring work never reads the whole row, so its cost does not grow with the history:

- `entries_from(offset)`: one reverse listing (plus one small listing per folder probed)
  finds the entry that covers `offset` part-way; then pages of names from `offset` on,
  read lazily as the caller goes on. From the committed offset, that is the ranges not yet
  committed: a handful, whatever the history.
- `entry_at_or_after(offset)`: one small listing; a binary search over offsets with it
  costs O(log offsets) requests (the reader's time windows).
- `all()`: every entry, page by page: full audits only (`verify --all`).

No Dagster imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from matos_dagster import layout
from matos_dagster.ranges import OFFSET_WIDTH, OffsetRange
from matos_dagster.store import LIST_PAGE, Store

RANGE, LOSS = "range", "loss"
_MARKERS = {layout.MANIFEST: RANGE, layout.LOSS: LOSS}
_PARTITION_DIR = re.compile(r"partition=(\d+)/?$")
PROBE = 16  # folders asked for per reverse listing: unfinished attempts are rare


@dataclass(frozen=True, order=True)
class Entry:
    """An archived range (`kind` RANGE) or an acknowledged loss (LOSS): `[start, end)`."""

    start: int
    end: int
    kind: str

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
        name = layout.manifest_name(self.prefix, r) if entry.kind == RANGE else layout.loss_name(self.prefix, r)
        return self.store.get_json(name)

    def entries_from(self, offset: int) -> Iterator[Entry]:
        """Every entry holding an offset at or above `offset`, in offset order.

        First the entry that starts below `offset` and reaches past it (an administrator may
        have moved the committed offset into a range), then those starting at or after it.
        Lazy: each page is listed when the caller gets to it, so a caller that stops at
        the first hole lists no further.
        """
        before = self.last_before(offset)
        if before is not None and before.end > offset:
            yield before
        yield from self._forward(self._folder(offset))

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
        return next(self._forward(self._folder(offset), page=PROBE * 4), None)

    def last_before(self, offset: int) -> Entry | None:
        """The entry with the greatest start below `offset`, or None."""
        marker = self._folder(offset)
        while True:
            folders = self.store.list_page(self.dir, marker=marker, delimiter="/", reverse=True, limit=PROBE)
            for item in folders:
                folder = item.get("subdir", "")
                span = layout.parse_range_dir(folder)
                if span is None:
                    continue
                kinds = self._kinds(folder)
                if kinds:
                    return Entry(span[0], span[1], kinds[0])
            if len(folders) < PROBE:
                return None
            marker = folders[-1].get("subdir") or folders[-1].get("name")

    def all(self) -> Iterator[Entry]:
        """Every entry of the partition, in offset order: the whole history (audits only)."""
        return self._forward(None)

    def _folder(self, offset: int) -> str:
        # Folder names are `<start:020d>-<end:020d>/`: every folder starting at or after
        # `offset` sorts after this, every one starting below it sorts before.
        return f"{self.dir}{offset:0{OFFSET_WIDTH}d}"

    def _kinds(self, folder: str) -> list[str]:
        """What the folder's marker objects make it: [RANGE], [LOSS], both, or []."""
        # Marker names start with `_`, which sorts before `part-`: list just those ("`" follows "_").
        items = self.store.list_page(folder, end_marker=folder + "`")
        found = {item.get("name", "")[len(folder):] for item in items}
        return [kind for name, kind in _MARKERS.items() if name in found]

    def _forward(self, marker: str | None, page: int = LIST_PAGE) -> Iterator[Entry]:
        while True:
            items = self.store.list_page(self.dir, marker=marker, limit=page)
            for item in items:
                e = entry_of(item.get("name", ""))
                if e is not None:
                    yield e
            if len(items) < page:
                return
            marker = items[-1]["name"]


def entry_of(name: str) -> Entry | None:
    """The entry an object name stands for, if it is a manifest or a loss record."""
    folder, _, base = name.rpartition("/")
    kind = _MARKERS.get(base)
    if kind is None:
        return None
    span = layout.parse_range_dir(folder)
    return Entry(span[0], span[1], kind) if span else None


def archived_partitions(store: Store, prefix: str, topic: str) -> list[int]:
    """The partitions with a folder in the archive (one listing of folders, not objects)."""
    out = []
    for item in store.list(layout.topic_dir(prefix, topic) + "/", delimiter="/"):
        m = _PARTITION_DIR.search(item.get("subdir", ""))
        if m:
            out.append(int(m[1]))
    return sorted(out)
