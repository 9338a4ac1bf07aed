"""An archive object goes into the day-partitioned table as itself when all its records are stamped
on one day, and as copies by day otherwise (core/iceberg/days.py): the rules, on objects in memory."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
from typed_samples import T0, raw_rows

from matos_dagster.core.days import windows
from matos_dagster.core.iceberg import days
from matos_dagster.core.records.objects import encode

DAY = windows.DAY_MS


def footer(data: bytes):
    return pq.read_metadata(io.BytesIO(data))


def object_of(*stamps) -> bytes:
    """An object of one record per stamp (None: no timestamp), offsets from 0."""
    table = raw_rows("t", 0, 0, len(stamps))
    table = table.set_column(3, "timestamp", pa.array(stamps, pa.timestamp("ms", tz="UTC")))
    return encode(table, "parquet", table.schema)


def test_an_object_of_one_day_is_the_tables_file_itself():
    data = object_of(T0, T0 + DAY - 1)
    assert days.one_day(footer(data))
    before_1970 = object_of(-DAY, -1)
    assert days.one_day(footer(before_1970))


def test_an_object_across_midnight_or_with_records_without_a_timestamp_is_cut_by_day():
    data = object_of(T0 + DAY - 1, None, T0 + DAY, T0 + 5)
    assert not days.one_day(footer(data))
    parts = {day: pq.read_table(io.BytesIO(b)) for day, b in days.split(data).items()}
    assert {day: t["offset"].to_pylist() for day, t in parts.items()} == {
        "2026-01-01": [0, 3], "2026-01-02": [2], "untimed": [1]}
    assert all(t.schema == parts["untimed"].schema for t in parts.values())
    assert not days.one_day(footer(object_of(None, None)))


def test_a_copy_names_the_object_it_was_cut_from():
    folder = days.copies_dir("kafka/_iceberg/t", "kafka/topic=t/partition=0/0-10/part-0.parquet")
    assert days.source_of("kafka/_iceberg/t", f"{folder}/2026-01-01.parquet") == \
        "kafka/topic=t/partition=0/0-10/part-0.parquet"
    assert days.source_of("kafka/_iceberg/t", "kafka/topic=t/partition=0/0-10/part-0.parquet") is None
