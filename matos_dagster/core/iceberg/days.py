"""The table's files by day of the records' timestamps: its partition spec is the Kafka partition
and `day(timestamp)`, so a query of one day reads that day's files only.

An Iceberg partition holds one value per file, and an archive object can hold records of several
days (a range that crosses midnight, late records) or records without a timestamp. Such an object
goes into the table as copies, one per day (and one for records without a timestamp), written
once beside the table's metadata (`<table>/days/<object name>/<day>.parquet`: the name says which
object it was cut from, so `check` and compaction's `replace` find them); an object of one day
(most are: a range lasts seconds) is the table's file itself, as before. The archive's truth stays
the objects: a copy is rebuilt from its object by `rebuild`. No Dagster imports.
"""

from __future__ import annotations

import io
from datetime import timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from matos_dagster.core.days import windows
from matos_dagster.core.records.objects import encode
from matos_dagster.core.swift import layout

FIELD = "timestamp_day"  # the partition field's name
UNTIMED = "untimed"  # the copy of an object's records without a timestamp
FOLDER = "days"  # under the table's location


def has_day_field(spec) -> bool:
    return any(f.name == FIELD for f in spec.fields)


def add_day_field(update) -> None:
    """To an `update_spec()`: the day of the records' timestamp."""
    from pyiceberg.transforms import DayTransform

    update.add_field("timestamp", DayTransform(), FIELD)


def footer(file_io, path: str) -> pq.FileMetaData:
    """A Parquet file's footer (its statistics and schema), read through the table's FileIO."""
    with file_io.new_input(path).open() as f:
        return pq.read_metadata(f)


def one_day(footer: pq.FileMetaData) -> bool:
    """Whether the object's records are all stamped, on one day (UTC), by its Parquet statistics."""
    col = footer.schema.names.index("timestamp")
    lo = hi = None
    for i in range(footer.num_row_groups):
        stats = footer.row_group(i).column(col).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return footer.row_group(i).num_rows == 0
        lo = stats.min if lo is None else min(lo, stats.min)
        hi = stats.max if hi is None else max(hi, stats.max)
    if lo is None:
        return True  # no rows
    return _day_ms(lo) == _day_ms(hi)


def _day_ms(t) -> int:
    """The day of a Parquet statistic of the timestamp column (a datetime, UTC, or milliseconds)."""
    if hasattr(t, "timestamp"):
        ms = int((t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp() * 1000)
    else:
        ms = int(t)
    return windows.start_of(ms, windows.DAY_MS)


def copies_dir(table_dir: str, object_name: str) -> str:
    """The folder (in the container) of an object's copies by day."""
    return layout.join(table_dir, FOLDER, object_name)


def source_of(table_dir: str, copy_name: str) -> str | None:
    """The object a copy was cut from (names in the container), or None: not a copy."""
    head = layout.join(table_dir, FOLDER) + "/"
    if not copy_name.startswith(head):
        return None
    return copy_name[len(head):].rsplit("/", 1)[0]


def split(data: bytes) -> dict[str, bytes]:
    """An object's Parquet bytes cut by day: {day key or UNTIMED: Parquet bytes}, rows in offset order,
    the object's schema and the archive's Parquet options."""
    table = pq.read_table(io.BytesIO(data))
    stamps = table["timestamp"].cast(pa.int64())
    ms = stamps.to_numpy(zero_copy_only=False)
    nulls = stamps.is_null().to_numpy(zero_copy_only=False)
    days = np.floor_divide(np.where(nulls, 0, ms).astype(np.int64), windows.DAY_MS)
    out = {}
    for d in np.unique(days[~nulls]):
        part = table.filter(pa.array(~nulls & (days == d)))
        out[windows.key(int(d) * windows.DAY_MS, windows.DAY_MS)] = encode(part, "parquet", table.schema)
    if nulls.any():
        out[UNTIMED] = encode(table.filter(pc.is_null(table["timestamp"])), "parquet", table.schema)
    return out
