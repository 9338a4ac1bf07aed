"""The archive as an Iceberg table (issue 16), on the real Kafka, Swift (its S3 API) and Spark.

The table must hold exactly the archived records: every record the verifier finds in the
manifests up to the committed offset, once, and nothing else (no stray object of a failed
attempt), as pyiceberg and DuckDB (offline, `iceberg_scan` over the S3 API) both read it.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from helpers import check_archive, produce, read_kafka, table_rows
from matos_dagster import layout, records
from matos_dagster.archive import archive_range
from matos_dagster.iceberg import Tables, duckdb_connection, marks_of, table_files
from matos_dagster.iceberg_plan import summary
from matos_dagster.ranges import OffsetRange
from matos_dagster.topics import TopicConfig


@pytest.fixture
def tables_on(monkeypatch, tmp_path):
    """Tables kept by the archive runs, in an embedded sqlite catalog of this test's own."""
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    return monkeypatch


def as_rows(table: pa.Table) -> list[dict]:
    """An engine's answer as archive rows, in (partition, offset) order."""
    table = table.select(records.SCHEMA.names).cast(records.SCHEMA)
    return sorted(table_rows(table), key=lambda r: (r["partition"], r["offset"]))


def test_the_table_holds_exactly_the_archived_records_after_a_killed_run_and_a_stray(
        kafka, swift, spark, new_topic, tables_on):
    topic = new_topic(partitions=2)
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode(), [("h", b"\x00")], i % 2) for i in range(300)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=40)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        for p in (0, 1):
            archive_range(OffsetRange(topic, p, 0, 60), cfg, kafka, store, spark)
        # A run killed between its manifest and its table commit leaves what a run with the
        # table off leaves: the manifest written, the offset committed, the table behind.
        tables_on.setenv("MATOS_ICEBERG_TABLES", "false")
        archive_range(OffsetRange(topic, 0, 60, 100), cfg, kafka, store, spark)
        tables_on.setenv("MATOS_ICEBERG_TABLES", "true")
        # A failed attempt's object: Parquet records of offsets 120.. in a folder without a manifest.
        some = store.get(layout.object_name(layout.range_dir(prefix, OffsetRange(topic, 0, 0, 60)), 0, "parquet"))
        stray = layout.object_name(layout.range_dir(prefix, OffsetRange(topic, 0, 120, 150)), 120, "parquet")
        store.put(stray, some)
        # The next run of partition 0 repairs the table: [60, 100) and [100, 120) in one commit.
        done = archive_range(OffsetRange(topic, 0, 100, 120), cfg, kafka, store, spark)
        assert any("Iceberg table" in n for n in done.notes)
        archive_range(OffsetRange(topic, 1, 60, 150), cfg, kafka, store, spark)

        committed = check_archive(kafka, store, topic, cfg.group)
        assert committed == {0: 120, 1: 150}
        expected = [r for p in (0, 1) for r in read_kafka(kafka, topic, p, 0, committed[p])]

        tables = Tables(store)
        table = tables.table(topic, create=False)
        assert as_rows(table.scan().to_arrow()) == expected
        assert f"s3://{store.container}/{stray}" not in table_files(table)

        con = duckdb_connection(tables.s3)
        try:
            answer = con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')").fetch_arrow_table()
            count = con.execute(f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}')").fetchone()[0]
        finally:
            con.close()
        assert count == len(expected)
        assert as_rows(answer) == expected

        report = tables.check(prefix, topic)
        assert report.ok, report.problems
        assert report.table_records == len(expected) and report.ranges == 5

        # Rebuilt from the manifests alone, the table holds the same records.
        assert tables.rebuild(prefix, topic) == len(expected)
        assert as_rows(tables.table(topic, create=False).scan().to_arrow()) == expected
        assert tables.check(prefix, topic).ok


def test_the_check_finds_a_table_that_lost_a_range(kafka, swift, spark, new_topic, tables_on):
    topic = new_topic()
    produce(kafka, topic, ((None, f"v{i}".encode(), []) for i in range(60)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=30)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)
        archive_range(OffsetRange(topic, 0, 30, 60), cfg, kafka, store, spark)
        tables = Tables(store)
        t = tables.table(topic, create=False)
        lost = next(p for p in table_files(t) if "00000000000000000030-" in p)
        with t.transaction() as tx:  # what a bad hand edit of the table would do
            with tx.update_snapshot(snapshot_properties=summary(marks_of(t))).overwrite() as ow:
                ow.delete_data_file(table_files(t)[lost][3])
        report = tables.check(prefix, topic)
        assert not report.ok
        assert report.problems == [f"{lost} is in a manifest but not in the table"]
