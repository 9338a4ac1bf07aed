"""An expired partition's Iceberg table brought in step with its archive: the erasure's swap (core/erase/table.py).

A range the expiry made an expired span holds no object any more: its files leave the table with
nothing added (`Gone`); a range rewritten without its old records has its files swapped for its
objects now. Then the older snapshots naming the replaced files are expired, so no snapshot reaches
an expired record or a deleted object. Decided from what the table and Swift hold: a re-run commits
nothing more. No Dagster imports.
"""

from __future__ import annotations

import logging
from typing import Callable

from matos_dagster.core.erase.table import Gone, TableForgotten, swap
from matos_dagster.core.iceberg.access import enabled
from matos_dagster.core.iceberg.hooks import table_name
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.iceberg.queries import marks_of
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.manifest import Manifest
from matos_dagster.core.swift.store import Store

log = logging.getLogger(__name__)


def expire_in_table(store: Store, prefix: str, topic, partition: int, changed: list[tuple[int, int]],
                    incarnation: int = 1, say: Callable[[str], None] = log.info) -> TableForgotten | None:
    """The table of `topic`'s `incarnation` after the expiry changed the ranges `changed` of `partition`;
    None when tables are off or the topic is not Parquet. A TableError of one line when the catalog or
    S3 fails (the partition's expiry cursor has not moved: the next expiry run does it again)."""
    if not enabled() or topic.format != "parquet" or not changed:
        return None
    name = table_name(topic.name, incarnation)
    try:
        tables = Tables(store)
        t = tables.table(name, create=False)
        end = marks_of(t).get(partition) if t is not None and t.current_snapshot() is not None else None
        if end is None:
            return None  # none of the partition in the table: catching up adds the ranges as they are now
        docs = []
        for start, stop in sorted(set(changed)):
            if stop > end:
                continue  # not in the table yet: catching up passes over an expired span, adds a rewritten range
            doc = store.get_json(layout.manifest_name(prefix, OffsetRange(topic.name, partition, start, stop)))
            docs.append(Manifest.from_json(doc) if doc is not None else Gone(topic.name, partition, start, stop))
        return swap(tables, prefix, topic.name, name, partition, docs, say, what="expired")
    except Exception as e:  # noqa: BLE001 - the catalog's, S3's or pyiceberg's own: one line, the next run ends it
        what = str(e).splitlines()[0] if str(e) else ""
        raise TableError(f"{topic.name}/{partition}: the records are expired from the archive, but the Iceberg table "
                         f"{name} could not be brought in step ({type(e).__name__}: {what}); check "
                         "MATOS_ICEBERG_CATALOG and MATOS_S3_*, then run the expire job again") from None
