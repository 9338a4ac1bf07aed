"""The runs' Iceberg steps: the archive run's after a range's manifest and offset commit
(`keep_table`, and `table_state` for the asset's metadata), and compaction's after a switch
(`keep_compacted`). Each is a no-op when tables are off (MATOS_ICEBERG_TABLES) or the topic is not
Parquet; what went wrong or is worth a look comes back as the run's notes. No Dagster imports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from matos_dagster.core.iceberg.access import enabled
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.iceberg.queries import marks_of
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import RANGE, Entry, PartitionArchive
from matos_dagster.core.swift.manifest import Manifest
from matos_dagster.core.swift.store import Store

log = logging.getLogger(__name__)


def table_name(topic: str, incarnation: int = 1) -> str:
    """The table of a topic's incarnation: the topic's name for the first; a later one (a topic deleted and
    created again, core/swift/incarnations.py) has a table of its own, as its offsets start at 0 again."""
    return topic if incarnation == 1 else f"{topic}__incarnation_{incarnation}"


def keep_table(store: Store, prefix: str, topic, partition: int, say: Callable[[str], None] = log.info,
               incarnation: int = 1) -> list[str]:
    """The archive's hook after a range's manifest: bring the table of the topic's `incarnation` (whose
    archive is under `prefix`) up to date (no-op when off)."""
    if not enabled() or topic.format != "parquet":
        return []
    try:
        tables = Tables(store)
        steps = tables.sync(prefix, topic.name, partition, say, table_name(topic.name, incarnation))
    except Exception as e:  # noqa: BLE001 - the catalog's, S3's or pyiceberg's own: say what holds
        raise TableError(
            f"{topic.name}/{partition}: the range is archived and its offset committed, but the topic's Iceberg "
            f"table could not be updated ({type(e).__name__}: {e}). The next run of the partition catches the table "
            "up; check MATOS_ICEBERG_CATALOG and MATOS_S3_*, or rebuild it (the iceberg_table job, rebuild: true)"
        ) from None
    notes = expiry_notes(tables, topic.name)
    added = [span for s in steps for span in s.ranges]
    if len(added) < 2:
        return notes  # the run's own range: said above, nothing to warn about
    # More than the run's own range: ranges a run stopped between manifest and table commit left
    # out, or ranges archived ahead of a hole that this run filled. Worth a line in the run's log.
    return notes + [f"Iceberg table of {topic.name}/{partition}: added {len(added)} ranges "
                    f"({', '.join(f'[{a}, {b})' for a, b in added)}), not only this run's: earlier ones were archived "
                    "but not yet in the table (a run stopped between its manifest and its table commit, or a hole "
                    "before them)"]


def expiry_notes(tables: Tables, topic: str) -> list[str]:
    """A warning for the run's log when the expiry its commit made could not delete every file."""
    failed = tables.expiry.failed
    if not failed:
        return []
    return [f"Iceberg table of {topic}: {len(failed)} metadata file(s) of expired snapshots could not be deleted "
            f"(e.g. {failed[0]}); they are kept in {layout.PENDING_DELETES} beside the table's metadata and the next "
            "expiry deletes them (unreferenced meanwhile: nothing reads them)"]


@dataclass(frozen=True)
class TableState:
    """The topic's table as a run leaves it: what the archive asset's metadata shows."""

    table: str
    snapshot_id: int | None  # None: no snapshot yet
    records: int  # in the whole table, every partition
    files: int
    watermark: int | None  # the run's Kafka partition's: the table holds its records below this offset


def table_state(store: Store, topic, partition: int, incarnation: int = 1) -> TableState | None:
    """The topic's table now (after keep_table's commit, or another run's since): None when tables are off."""
    if not enabled() or topic.format != "parquet":
        return None
    try:
        tables = Tables(store)
        t = tables.table(table_name(topic.name, incarnation), create=False)
    except Exception as e:  # noqa: BLE001 - the catalog's or S3's own: the archive itself is done
        raise TableError(f"{topic.name}: the Iceberg table's state could not be read ({type(e).__name__}: {e}); "
                         "check MATOS_ICEBERG_CATALOG and MATOS_S3_*") from None
    name = ".".join(tables.identifier(table_name(topic.name, incarnation)))
    snap = t.current_snapshot() if t is not None else None
    if snap is None:
        return TableState(name, None, 0, 0, None)
    s = snap.summary
    return TableState(name, snap.snapshot_id, int(s["total-records"] or 0), int(s["total-data-files"] or 0),
                      marks_of(t).get(partition))


def keep_compacted(store: Store, prefix: str, topic, partition: int, spans: list[tuple[int, int]],
                   say: Callable[[str], None] = log.info) -> list[str]:
    """Compaction's hook, after a switch and again before the replaced folders are deleted: the
    compacted ranges' objects replace the small ranges' files in the table, one commit each
    (idempotent: a range already replaced costs a look at the table's metadata, no commit)."""
    if not enabled() or topic.format != "parquet" or not spans:
        return []
    tables = Tables(store)
    # First catch up: a compacted range across the watermark is replaced by catching up.
    tables.sync(prefix, topic.name, partition, say)
    archive = PartitionArchive(store, prefix, topic.name, partition)
    out = expiry_notes(tables, topic.name)
    for start, end in spans:
        doc = archive.read(Entry(start, end, RANGE))
        if doc is not None and tables.replace(topic.name, Manifest.from_json(doc)):
            out.append(f"Iceberg table of {topic.name}: [{start}, {end}) replaces the ranges it compacted")
            say(out[-1])
    return out
