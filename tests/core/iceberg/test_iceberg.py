"""The archive as an Iceberg table (issue 16), on the real Kafka, Swift (its S3 API) and Spark.

The table must hold exactly the archived records: every record the verifier finds in the
manifests up to the committed offset, once, and nothing else (no stray object of a failed
attempt), as pyiceberg and DuckDB (offline, `iceberg_scan` over the S3 API) both read it.
"""

from __future__ import annotations

import re
import threading
import uuid
from datetime import datetime, timezone
from urllib.parse import urlsplit

import pyarrow as pa
import pytest
from helpers import check_archive, produce, read_kafka, table_rows
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.archive.slice_task import SliceJob, archive_slice
from matos_dagster.core.compact.run import compact_topic
from matos_dagster.core.iceberg.plan import summary
from matos_dagster.core.iceberg.queries import duckdb_connection, marks_of, table_files
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig
from matos_dagster.jobs.iceberg import iceberg_job


@pytest.fixture
def tables_on(monkeypatch, tmp_path):
    """Tables kept by the archive runs, in an embedded sqlite catalog of this test's own."""
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    return monkeypatch


def as_rows(table: pa.Table) -> list[dict]:
    """An engine's answer as archive rows, in (partition, offset) order."""
    table = table.select(SCHEMA.names).cast(SCHEMA)
    return sorted(table_rows(table), key=lambda r: (r["partition"], r["offset"]))


def test_the_table_holds_exactly_the_archived_records_after_a_killed_run_and_a_stray(
        kafka, swift, spark, new_topic, tables_on):
    topic = new_topic(partitions=2)
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode(), [("h", b"\x00")], i % 2) for i in range(300)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        archive_range(OffsetRange(topic, 0, 0, 60), cfg, kafka, store, spark)
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
        assert any("added 2 ranges ([60, 100), [100, 120))" in n for n in done.notes), done.notes
        archive_range(OffsetRange(topic, 1, 0, 150), cfg, kafka, store, spark)

        committed = check_archive(kafka, store, topic, cfg.group)
        assert committed == {0: 120, 1: 150}
        expected = [r for p in (0, 1) for r in read_kafka(kafka, topic, p, 0, committed[p])]

        tables = Tables(store)
        table = tables.table(topic, create=False)
        assert as_rows(table.scan().to_arrow()) == expected
        assert f"s3://{store.container}/{stray}" not in table_files(table)
        # pyiceberg with a row filter by partition, offset and timestamp (Iceberg's file metrics prune).
        since = expected[70]["timestamp"]
        where = And(EqualTo("partition", 0), GreaterThanOrEqual("offset", 50), LessThan("offset", 110),
                    GreaterThanOrEqual("timestamp", datetime.fromtimestamp(since / 1000, timezone.utc).isoformat()))
        assert as_rows(table.scan(row_filter=where).to_arrow()) == [
            r for r in expected if r["partition"] == 0 and 50 <= r["offset"] < 110 and r["timestamp"] >= since]

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
        assert report.table_records == len(expected) and report.ranges == 4



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

    # The job checks (and fails, naming the file), then rebuilds the table from the manifests.
    job = iceberg_job([cfg])
    checked = job.execute_in_process(run_config={"ops": {"table_from_manifests": {"config": {"topic": topic}}}},
                                     resources={"swift": swift}, raise_on_error=False)
    assert not checked.success
    failure = checked.get_step_failure_events()[0].event_specific_data
    assert "differs from its manifests" in failure.error.message
    assert lost in failure.user_failure_data.metadata["problems"].md_str
    rebuilt = job.execute_in_process(run_config={"ops": {"table_from_manifests": {"config": {"topic": topic, "rebuild": True}}}},
                                     resources={"swift": swift})
    assert rebuilt.output_for_node("table_from_manifests") == 60


def test_compaction_replaces_the_small_ranges_files_in_the_table_and_a_missed_replacement_is_repaired(
        kafka, swift, spark, new_topic, tables_on):
    topic = new_topic()
    produce(kafka, topic, ((f"k{i}".encode(), bytes(100), []) for i in range(40)))
    # Two ranges of 10 records (about 1,000 record bytes each) make a group.
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", compact_bytes=1500,
                      compact_min_age_s=0.0, compact_grace_s=0.0)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        for a in range(0, 40, 10):
            archive_range(OffsetRange(topic, 0, a, a + 10), cfg, kafka, store, spark)
        committed = kafka.committed(topic, [0], cfg.group)
        # The first switch, [0, 20), as a run killed before its table commit leaves it: the table
        # still names the small ranges' objects.
        tables_on.setenv("MATOS_ICEBERG_TABLES", "false")
        assert compact_topic(cfg, committed, store, spark, max_groups=1).partitions[0].groups == [(0, 20)]
        tables_on.setenv("MATOS_ICEBERG_TABLES", "true")
        # The next run replaces them in the table before it deletes their folders, then switches
        # [20, 40) and replaces its ranges' files right after.
        done = compact_topic(cfg, committed, store, spark).partitions[0]
        assert done.groups == [(20, 40)] and done.folders_deleted == 2

        tables = Tables(store)
        table = tables.table(topic, create=False)
        compacted = {f"s3://{store.container}/{o['name']}" for a, b in ((0, 20), (20, 40))
                     for o in store.get_json(layout.manifest_name(prefix, OffsetRange(topic, 0, a, b)))["objects"]}
        assert set(table_files(table)) == compacted
        assert table.current_snapshot().summary.operation.value == "overwrite"
        con = duckdb_connection(tables.s3)
        try:  # every file the table names is still there: DuckDB reads them all
            answer = con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')").fetch_arrow_table()
        finally:
            con.close()
        assert as_rows(answer) == read_kafka(kafka, topic, 0, 0, 40)
        assert tables.check(prefix, topic).ok


def test_queries_while_ranges_are_archived_see_every_archived_record_once(kafka, swift, spark, new_topic, tables_on):
    topic = new_topic()
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode(), []) for i in range(90)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    kafka_rows = read_kafka(kafka, topic, 0, 0, 90)
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)
        tables = Tables(store)
        answers, failed = [], []

        def archive_the_rest():
            try:
                with swift.store() as own:  # a Store is one connection: one per thread
                    for a in (30, 60):
                        archive_range(OffsetRange(topic, 0, a, a + 30), cfg, kafka, own, spark)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                failed.append(e)

        worker = threading.Thread(target=archive_the_rest)
        worker.start()
        con = duckdb_connection(tables.s3)
        try:
            while True:
                finished = not worker.is_alive()
                table = tables.table(topic, create=False)
                end = marks_of(table)[0]
                answer = con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}')").fetch_arrow_table()
                answers.append((end, as_rows(answer)))
                if finished:
                    break
                worker.join(timeout=1.0)  # a query a second at most: the two cores are the archive run's too
        finally:
            worker.join()
            con.close()
    assert not failed, failed
    # Every answer holds exactly the records archived up to its snapshot's watermark, once each.
    for end, rows in answers:
        assert rows == kafka_rows[:end]
    assert answers[-1][0] == 90
    print(f"{len(answers)} answers, watermarks {sorted({end for end, _ in answers})}")


def test_the_archive_assets_metadata_shows_the_table_growing_range_by_range(
        tmp_path, kafka, swift, spark_resource, new_topic, tables_on):
    from dagster import DagsterInstance, materialize

    from matos_dagster.assets.archive import archive_asset

    topic = new_topic()
    produce(kafka, topic, ((None, f"v{i}".encode(), []) for i in range(40)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    keys = [OffsetRange(topic, 0, 0, 15).key, OffsetRange(topic, 0, 15, 40).key]
    resources = {"kafka": kafka, "swift": swift, "spark": spark_resource}
    seen = []
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:
        instance.add_dynamic_partitions(cfg.partitions_name, keys)
        for key in keys:
            result = materialize([archive_asset(cfg)], partition_key=key, instance=instance, resources=resources)
            (mat,) = result.asset_materializations_for_node(cfg.asset_name)
            seen.append(mat.metadata)
    with swift.store() as store:
        tables = Tables(store)
        table = tables.table(topic, create=False)
        snapshots = [s.snapshot_id for s in table.snapshots()]
    # Each range's materialisation names the snapshot its commit made, and the table's size then.
    assert [m["iceberg_snapshot_id"].value for m in seen] == [str(s) for s in snapshots[-2:]]
    assert [m["iceberg_records"].value for m in seen] == [15, 40]  # ints: Dagster plots them per range
    assert [m["iceberg_watermark"].value for m in seen] == [15, 40]
    assert {m["iceberg_table"].value for m in seen} == {".".join(tables.identifier(topic))}


def readme_blocks() -> list[str]:
    """The Python blocks of the documentation's Iceberg section (docs/operations/reading.md), in order."""
    from matos_dagster.core.settings import PROJECT_ROOT

    text = (PROJECT_ROOT / "docs" / "operations" / "reading.md").read_text()
    start = text.index("## The archive as an Iceberg table")
    end = text.find("\n## ", start)
    return re.findall(r"^```python\n(.*?)^```", text[start:end if end > 0 else len(text)], flags=re.S | re.M)


def test_the_readme_reads_pyiceberg_duckdb_spark_sql_and_the_raw_layout_as_written(
        kafka, swift, swift_server, spark, new_topic, tables_on):
    """Each README block, as written but for the endpoint, container and topic: the table's answers
    (pyiceberg, DuckDB, Spark SQL) hold exactly the archived records once; the raw layout's do not
    (the caveat the README states)."""
    # Record i: partition i % 2, a minute after record i - 1 from 2026-01-01T00:00Z (the README's
    # filter); kept whatever their age (time-based retention would delete them before they are archived).
    topic = new_topic(partitions=2, **{"retention.ms": "-1"})
    base = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    producer = kafka.producer()
    for i in range(130):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2, timestamp=base + i * 60_000)
    assert producer.flush(30) == 0
    del producer  # its client stops with it, not when Kafka does
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        for p, a, b in ((0, 0, 65), (1, 0, 30), (1, 30, 60)):
            archive_range(OffsetRange(topic, p, a, b), cfg, kafka, store, spark)
        # A range being archived: its objects written, its manifest not yet (what a run is between).
        unfinished = OffsetRange(topic, 1, 60, 65)
        archive_slice(SliceJob(slice=unfinished, directory=layout.range_dir(prefix, unfinished),
                               kafka_conf=kafka.client_config(), group=cfg.group, swift=store.params))
        # A failed attempt's stray: a copy of [0, 65)'s object in a folder no manifest vouches for.
        (obj,) = store.get_json(layout.manifest_name(prefix, OffsetRange(topic, 0, 0, 65)))["objects"]
        stray = layout.object_name(layout.range_dir(prefix, OffsetRange(topic, 0, 0, 40)), 0, "parquet")
        store.put(stray, store.get(obj["name"]))
        assert check_archive(kafka, store, topic, cfg.group) == {0: 65, 1: 60}
    expected = read_kafka(kafka, topic, 0, 0, 65) + read_kafka(kafka, topic, 1, 0, 60)

    blocks = readme_blocks()
    assert len(blocks) == 4 and "Tables(store)" in blocks[0] and "iceberg_scan" in blocks[1] \
        and "read_parquet" in blocks[2] and "spark_frame" in blocks[3]
    netloc = urlsplit(swift_server.auth_url).netloc
    subs = {"127.0.0.1:8080": netloc, "matos-archive": swift.container, '"demo"': f'"{topic}"',
            "topic=demo/": f"topic={topic}/"}
    assert (swift_server.user, swift_server.key) == ("test:tester", "testing")  # the README's keys
    namespace: dict = {}
    try:
        for block in blocks:
            for old, new in subs.items():
                block = block.replace(old, new)
            exec(compile(block, "README.md", "exec"), namespace)
    finally:
        if "con" in namespace:
            namespace["con"].close()
    assert all(old in "".join(blocks) for old in subs)  # every substitution took

    since = base + 3_600_000
    selected = as_rows(namespace["selected"])
    assert selected == [r for r in expected if r["partition"] == 1 and 10 <= r["offset"] < 50 and r["timestamp"] >= since]
    assert [r["offset"] for r in selected] == list(range(30, 50))  # the filter's three bounds all bit

    assert as_rows(namespace["archived"]) == expected
    assert sorted(namespace["per_partition"]) == [(0, 65), (1, 60)]

    # Spark SQL over the table (through the S3 API): the archived records, once.
    assert as_rows(namespace["rows"]) == expected
    assert sorted((r["partition"], r["n"], r["last"]) for r in namespace["counted"]) == [(0, 65, 64), (1, 60, 59)]

    # The raw layout: the archived records, plus the stray's (again) and the unfinished range's.
    raw = as_rows(namespace["raw"])
    assert raw == sorted(expected + read_kafka(kafka, topic, 0, 0, 65) + read_kafka(kafka, topic, 1, 60, 65),
                         key=lambda r: (r["partition"], r["offset"]))


_SPARK_CONNECT_READ = """
import json, sys
from pyspark.sql import SparkSession
from matos_dagster.core.iceberg.queries import spark_frame
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.resources import SwiftResource

a = json.loads(sys.argv[1])
swift = SwiftResource(auth_url=a["auth_url"], user=a["user"], key=a["key"], container=a["container"], prefix="kafka")
with swift.store() as store:
    table = Tables(store).table(a["topic"], create=False)
spark = SparkSession.builder.remote(a["url"]).getOrCreate()
spark_frame(spark, table).createOrReplaceTempView("archived")
rows = spark.sql("SELECT partition, `offset`, value FROM archived ORDER BY partition, `offset`").collect()
print("ROWS", json.dumps([[r[0], r[1], r[2].decode()] for r in rows]))
"""


@pytest.mark.slow
def test_spark_sql_over_the_table_on_a_spark_connect_session(kafka, swift, spark, connect_server, new_topic, tables_on):
    """The README's `.remote(...)` variant: a client of the local stack's Spark Connect server (a process
    of its own: one process holds either a classic or a Connect session) reads every archived record once."""
    import json
    import os
    import subprocess
    import sys

    from matos_dagster.core.settings import PROJECT_ROOT

    topic = new_topic()
    produce(kafka, topic, ((None, f"v{i}".encode(), []) for i in range(50)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)
        archive_range(OffsetRange(topic, 0, 30, 50), cfg, kafka, store, spark)
    args = {"auth_url": swift.auth_url, "user": swift.user, "key": swift.key, "container": swift.container,
            "topic": topic, "url": connect_server.url}
    out = subprocess.run([sys.executable, "-c", _SPARK_CONNECT_READ, json.dumps(args)], env=dict(os.environ),
                         cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    line = [x for x in out.stdout.splitlines() if x.startswith("ROWS ")]
    assert line, out.stdout[-2000:] + out.stderr[-3000:]
    assert json.loads(line[0][5:]) == [[0, i, f"v{i}"] for i in range(50)]


def test_a_later_incarnation_of_a_topic_has_a_table_of_its_own_and_adds_nothing_to_the_earlier_ones(
        kafka, swift, spark, new_topic, tables_on):
    """A topic deleted and created again starts at offset 0 again: its ranges in the earlier log's table
    would repeat offsets. Incarnation 2's ranges (here the same records archived as incarnation 2)
    go to `<topic>__incarnation_2`, and the topic's table keeps only incarnation 1's."""
    from matos_dagster.core.iceberg.hooks import table_name
    from matos_dagster.core.swift.incarnations import Incarnation

    topic = new_topic()
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode(), [], 0) for i in range(20)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 20), cfg, kafka, store, spark)
        second = archive_range(OffsetRange(topic, 0, 0, 20), cfg, kafka, store, spark,
                               incarnation=Incarnation(2, "KP4OX/ckTgCidsZp99pVGg"))
        assert second.manifest_name.startswith(f"kafka/incarnation=2/topic={topic}/")
        tables = Tables(store)
        first, later = tables.table(topic, create=False), tables.table(table_name(topic, 2), create=False)
        expected = read_kafka(kafka, topic, 0, 0, 20)
        assert as_rows(first.scan().to_arrow()) == expected and as_rows(later.scan().to_arrow()) == expected
        assert not [f for f in table_files(first) if "/incarnation=" in f]
        assert all("/incarnation=2/" in f for f in table_files(later))
