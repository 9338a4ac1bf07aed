"""An erased partition's Iceberg table brought in step with its archive: no file and no snapshot of
the table reaches an erased record.

The table's data files are the archive's objects (or, for an object of several days, copies of
it by day beside the table: core/iceberg/days.py). After an erasure rewrote the partition's ranges
(rewrite.py), for each range of the table that holds an offset the request erased (its manifest
names it in `erased`):

1. the table's files of the range are swapped for the range's objects now, in one commit, as
   compaction's replacement does (`Tables.replace`; a range whose objects all went has none to
   add). Never pyiceberg's `delete`: it writes files of its own that no manifest knows;
2. the copies by day cut from objects the manifest no longer lists are deleted from Swift;
3. every older snapshot that still names a file of those ranges the current snapshot does not is
   expired, and the metadata files only they used deleted (iceberg/expiry.py), so time travel
   reaches no erased record either.

Each step is decided from what the table and Swift hold, so a killed erasure run again ends in the
same state, and a run with nothing left to do commits nothing. No Dagster imports.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable, Iterable

from matos_dagster.core.erase.rewrite import ErasureError
from matos_dagster.core.iceberg import days, expiry
from matos_dagster.core.iceberg.access import enabled
from matos_dagster.core.iceberg.hooks import table_name
from matos_dagster.core.iceberg.queries import marks_of, table_files
from matos_dagster.core.iceberg.table import COMMIT_TRIES, Tables
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import RANGE, PartitionArchive
from matos_dagster.core.swift.manifest import Manifest
from matos_dagster.core.swift.store import Store

log = logging.getLogger(__name__)

END = 2**63 - 1  # past any offset


@dataclass
class TableForgotten:
    table: str
    ranges: list[tuple[int, int]] = field(default_factory=list)  # ranges whose files were swapped
    copies_deleted: int = 0
    snapshots_expired: int = 0


def forget_in_table(store: Store, prefix: str, topic, partition: int, offsets: Iterable[int], incarnation: int = 1,
                    again: str = "", say: Callable[[str], None] = log.info) -> TableForgotten | None:
    """Steps 1-3 for the table of `topic`'s `incarnation` (whose archive is under `prefix`), for the
    ranges holding `offsets`: the request's erased offsets of the partition, this run's and those of
    an earlier run of it. None when tables are off, the topic is not Parquet or no offset was erased.
    The catalog or S3 failing: an ErasureError of one line, ending with `again` (how to run the
    erasure again), with the archive already erased."""
    offsets = sorted(set(offsets))
    if not enabled() or topic.format != "parquet" or not offsets:
        return None
    name = table_name(topic.name, incarnation)
    try:
        return _forget(Tables(store), prefix, topic.name, name, partition, offsets, say)
    except Exception as e:  # noqa: BLE001 - the catalog's, S3's or pyiceberg's own: one line, the re-run ends it
        what = str(e).splitlines()[0] if str(e) else ""
        raise ErasureError(f"{topic.name}/{partition}: the records are erased from the archive, but the Iceberg "
                           f"table {name} could not be brought in step ({type(e).__name__}: {what}); check "
                           f"MATOS_ICEBERG_CATALOG and MATOS_S3_*, then {again or 'run the erasure again'}") from None


def _forget(tables: Tables, prefix: str, topic: str, name: str, partition: int, offsets: list[int],
            say: Callable[[str], None]) -> TableForgotten:
    from pyiceberg.exceptions import CommitFailedException

    out = TableForgotten(".".join(tables.identifier(name)))
    t = tables.table(name, create=False)
    if t is None or t.current_snapshot() is None:
        return out
    end = marks_of(t).get(partition)
    if end is None:
        return out  # none of the partition in the table: catching up adds the objects as they are now
    archive = PartitionArchive(tables.store, prefix, topic, partition)
    erased = []
    for e in archive.entries_from(offsets[0]):  # the ranges holding the offsets: a manifest read each
        if e.end > end or e.start > offsets[-1]:
            break  # above the watermark (not in the table yet), or past the offsets
        held = bisect_left(offsets, e.start) < bisect_left(offsets, e.end)
        doc = archive.read(e) if e.kind == RANGE and held else None
        if doc is not None and doc.get("erased"):
            erased.append(Manifest.from_json(doc))
    return swap(tables, prefix, topic, name, partition, erased, say, out, "erased")


def swap(tables: Tables, prefix: str, topic: str, name: str, partition: int, docs: list, say: Callable[[str], None],
         out: TableForgotten | None = None, what: str = "erased") -> TableForgotten:
    """Steps 1-3 for the ranges `docs` (their manifests now, or `Gone` for a range no manifest holds any
    more: an expired span) of the table `name`, in the table below its watermark."""
    from pyiceberg.exceptions import CommitFailedException

    out = out or TableForgotten(".".join(tables.identifier(name)))
    if not docs:
        return out
    table_dir = layout.join(tables.root, name)
    for doc in docs:
        if tables.replace(topic, doc, name):  # 1.
            out.ranges.append((doc.start, doc.end))
        listed = {o.name for o in doc.objects}  # none for a Gone range
        folder = layout.join(table_dir, days.FOLDER, layout.range_dir(prefix, doc.range)) + "/"
        for o in list(tables.store.list(folder)):  # 2. (the replacement deletes them; a crash after its commit did not)
            if days.source_of(table_dir, o["name"]) not in listed:
                tables.store.delete(o["name"])
                out.copies_deleted += 1
    for tries in range(COMMIT_TRIES):  # 3., again when another partition's run committed meanwhile
        t = tables.table(name, create=False)
        old = _older_snapshots(t, partition, [(d.start, d.end) for d in docs])
        try:
            out.snapshots_expired = expiry.expire_these(t, old, strict=True).expired
            break
        except CommitFailedException:
            if tries == COMMIT_TRIES - 1:
                raise
    if out.ranges or out.copies_deleted or out.snapshots_expired:
        say(f"{topic}/{partition}: table {out.table}: {len(out.ranges)} {what} range(s) swapped in, "
            f"{out.copies_deleted} copy(ies) by day deleted, {out.snapshots_expired} older snapshot(s) expired")
    return out


@dataclass(frozen=True)
class Gone:
    """A range of the table whose records all went (an expired span, core/expire/): what
    `Tables.replace` reads of a manifest, with no object to add."""

    topic: str
    partition: int
    start: int
    end: int
    objects: tuple = ()
    records: int = 0

    @property
    def range(self):
        from matos_dagster.core.offsets.ranges import OffsetRange

        return OffsetRange(self.topic, self.partition, self.start, self.end)


def _older_snapshots(t, partition: int, spans: list[tuple[int, int]]) -> list:
    """The snapshots, other than the current one, that name a file of the partition inside `spans` that
    the current snapshot does not name: a file the erasure replaced (or an older one still)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.expressions import EqualTo

    current = t.current_snapshot().snapshot_id
    now = set(table_files(t, partition, 0, END))
    field_id = t.schema().find_field("offset").field_id
    ftype = t.schema().find_field("offset").field_type
    out = []
    for s in t.snapshots():
        if s.snapshot_id == current:
            continue
        for task in t.scan(snapshot_id=s.snapshot_id, row_filter=EqualTo("partition", partition)).plan_files():
            f = task.file
            if f.file_path in now:
                continue
            lo, hi = from_bytes(ftype, f.lower_bounds[field_id]), from_bytes(ftype, f.upper_bounds[field_id])
            if any(lo < b and hi >= a for a, b in spans):
                out.append(s)
                break
    return out
