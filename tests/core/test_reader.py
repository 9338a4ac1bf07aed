"""Reading the archive back as a table (pyarrow, Spark), on the real Kafka, Swift and Spark.

What is read is compared with what Kafka itself returns (helpers.read_kafka), and the
objects fetched are counted: a selection reads only the manifests and objects it needs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
from helpers import produce, read_kafka
from samples import BASE_MS, archive_in_ranges, awkward_rows, config, rows, stamped

from matos_dagster.core import reader
from matos_dagster.core.reader import read_dataframe, read_table
from matos_dagster.core.swift import incarnations, layout


def count_gets(store) -> list[str]:
    """Every name `store.get` fetches from now on (get_json goes through get too)."""
    fetched: list[str] = []
    real = store.get

    def get(name):
        fetched.append(name)
        return real(name)

    store.get = get
    return fetched


def test_an_offset_window_reads_kafkas_records_and_only_the_objects_it_needs(kafka, swift, spark, new_topic):
    topic = new_topic(partitions=2)
    produce(kafka, topic, awkward_rows(240, 2))  # 120 a partition
    cfg = config(topic, slice_records=20, object_bytes=2048)  # several objects a range
    with swift.store() as store:
        archive_in_ranges(kafka, store, spark, cfg, partitions=2, size=40)  # [0,40) [40,80) [80,120)
        fetched = count_gets(store)

        table = read_table(store, "kafka", topic, partitions=[1], start=50, end=95)

        assert rows(table) == read_kafka(kafka, topic, 1, 50, 95)
        assert [r["offset"] for r in rows(table)] == list(range(50, 95))
        manifests = [n for n in fetched if n.endswith(layout.MANIFEST)]
        # The topic's record of incarnations (one small GET: which log to read) is no object.
        objects = [n for n in fetched if not n.endswith(layout.MANIFEST) and n != incarnations.record_name("kafka", topic)]
        p1 = layout.partition_dir("kafka", topic, 1)
        assert sorted(manifests) == [
            f"{p1}/00000000000000000040-00000000000000000080/_manifest.json",
            f"{p1}/00000000000000000080-00000000000000000120/_manifest.json",
        ]
        # Exactly the objects whose offsets meet [50, 95): none before, none after.
        wanted = []
        for m in manifests:
            for o in store.get_json(m)["objects"]:
                if o["last_offset"] >= 50 and o["first_offset"] < 95:
                    wanted.append(o["name"])
        assert sorted(objects) == sorted(wanted) and len(objects) >= 2

        # Every partition, open offsets: the whole archive, sorted by partition and offset.
        everything = read_table(swift.params(), "kafka", topic)
        assert rows(everything) == read_kafka(kafka, topic, 0) + read_kafka(kafka, topic, 1)
        assert read_table(store, "kafka", topic, partitions=[0], start=500).num_rows == 0
        assert read_table(store, "kafka", "no-such-topic").num_rows == 0


def test_a_time_window_reads_exactly_the_records_stamped_in_it(kafka, swift, spark, new_topic):
    topic = new_topic(partitions=2)
    stamped(kafka, topic, 120, 2)
    cfg = config(topic, slice_records=10)
    since, until = BASE_MS + 35_000, BASE_MS + 71_000  # records 35..70
    with swift.store() as store:
        archive_in_ranges(kafka, store, spark, cfg, partitions=2, size=20)  # 3 ranges a partition
        fetched = count_gets(store)

        table = read_table(store, "kafka", topic, since_ms=since, until_ms=until)

        expected = [r for p in (0, 1) for r in read_kafka(kafka, topic, p) if since <= r["timestamp"] < until]
        assert rows(table) == expected
        assert sorted(int(r["value"][1:]) for r in rows(table)) == list(range(35, 71))
        # Every manifest is read (they hold the time spans), but only objects whose min/max
        # timestamps meet the window.
        # The topic's record of incarnations (one small GET: which log to read) is no object.
        objects = [n for n in fetched if not n.endswith(layout.MANIFEST) and n != incarnations.record_name("kafka", topic)]
        for name in objects:
            doc = store.get_json(name.rsplit("/", 1)[0] + "/" + layout.MANIFEST)
            o = next(o for o in doc["objects"] if o["name"] == name)
            assert o["max_timestamp"] >= since and o["min_timestamp"] < until, name
        total_objects = sum(len(store.get_json(n)["objects"]) for n in set(fetched) if n.endswith(layout.MANIFEST))
        assert 0 < len(objects) < total_objects

        # Both windows at once: offsets and time.
        both = read_table(store, "kafka", topic, partitions=[0], start=20, since_ms=since, until_ms=until)
        assert rows(both) == [r for r in expected if r["partition"] == 0 and r["offset"] >= 20]


def test_read_dataframe_reads_the_objects_in_spark_tasks(kafka, swift, spark, new_topic):
    topic = new_topic(partitions=2)
    produce(kafka, topic, awkward_rows(120, 2))
    cfg = config(topic, slice_records=20, object_bytes=1024)
    with swift.store() as store:
        archive_in_ranges(kafka, store, spark, cfg, partitions=2, size=30)
    params = swift.params()

    df = read_dataframe(spark, params, "kafka", topic, partitions=[0, 1], start=10, end=50)
    assert df.rdd.getNumPartitions() > 2  # one task an object
    got = [
        {**r.asDict(), "timestamp": r["ts_ms"], "key": _b(r["key"]), "value": _b(r["value"]),
         "headers": [{"key": h["key"], "value": _b(h["value"])} for h in r["headers"]]}
        for r in df.selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect()
    ]
    for r in got:
        del r["ts_ms"]
    assert got == read_kafka(kafka, topic, 0, 10, 50) + read_kafka(kafka, topic, 1, 10, 50)
    assert df.where("partition = 1").count() == 40
    assert read_dataframe(spark, params, "kafka", topic, start=1000).count() == 0


def _b(v):
    return None if v is None else bytes(v)


def test_the_hive_layout_reads_as_a_dataset_with_pyarrow(kafka, swift, swift_server, spark, new_topic, tmp_path):
    """The README's recipe: `swift download` the topic's folder, then pyarrow.dataset with hive partitioning."""
    topic = new_topic(partitions=2)
    produce(kafka, topic, awkward_rows(60, 2))
    cfg = config(topic, slice_records=10)
    with swift.store() as store:
        archive_in_ranges(kafka, store, spark, cfg, partitions=2, size=15)
    swift_cli = str(Path(sys.executable).parent / "swift")
    subprocess.run(
        [swift_cli, "-A", swift_server.auth_url, "-U", swift_server.user, "-K", swift_server.key, "download",
         swift.container, "--prefix", f"kafka/topic={topic}/", "-D", str(tmp_path / "archive")],
        check=True, capture_output=True, timeout=120,
    )
    dataset = ds.dataset(tmp_path / "archive" / "kafka", format="parquet", partitioning="hive")
    table = dataset.to_table(filter=(ds.field("partition") == 1) & (ds.field("offset") >= 5)).sort_by("offset")
    assert rows(table) == read_kafka(kafka, topic, 1, 5)
    with swift.store() as store:
        assert reader.archived_partitions(store, "kafka", topic) == [0, 1]
