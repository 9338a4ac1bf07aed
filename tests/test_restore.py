"""Restoring archived records into Kafka, exactly once, on the real Kafka, Swift and Spark.

The target is always read back with `read_committed` (helpers.read_kafka) and compared
field by field with the original records: key, value, headers, timestamp and its type.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from helpers import produce, read_kafka, user_env
from matos_dagster.ranges import OffsetRange
from matos_dagster.restore import Fault, Request, RestoreRefused, restore
from test_archive import awkward_rows
from test_reader import BASE_MS, archive_in_ranges, config, stamped

DAGSTER = str(Path(sys.executable).parent / "dagster")


def fields(rows: list[dict]) -> list[tuple]:
    """What a restore must keep of a record (its offset and topic change)."""
    return [(r["key"], r["value"], r["headers"], r["timestamp"], r["timestamp_type"]) for r in rows]


def archived_topic(kafka, store, spark, new_topic, n: int, partitions: int, range_size: int) -> str:
    """A topic of awkward records, archived in ranges of `range_size`, several objects a range."""
    topic = new_topic(partitions=partitions)
    produce(kafka, topic, awkward_rows(n, partitions))
    archive_in_ranges(kafka, store, spark, config(topic, slice_records=10, object_bytes=1024), partitions, range_size)
    return topic


def committed_uncommitted_read(kafka, topic: str, partitions: list[int], group: str) -> dict[int, int | None]:
    """The group's offsets, pending transactional commits ignored (read_committed would wait for them)."""
    c = Consumer({**kafka.client_config(), "group.id": group, "isolation.level": "read_uncommitted"})
    try:
        return {tp.partition: (tp.offset if tp.offset >= 0 else None)
                for tp in c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)}
    finally:
        c.close()


def records_in_log(kafka, topic: str, partition: int) -> int:
    """Records of the partition, aborted and open transactions included (read_uncommitted)."""
    c = Consumer({**kafka.client_config(), "group.id": "test-uncommitted", "isolation.level": "read_uncommitted",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    n = 0
    try:
        while True:
            m = c.poll(10)
            assert m is not None
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF
                return n
            n += 1
    finally:
        c.close()


def test_a_restore_into_a_new_topic_equals_the_originals_field_by_field(kafka, swift, spark, new_topic):
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 150, partitions=3, range_size=20)  # 50 a partition
        target = new_topic(partitions=3)
        said: list[str] = []

        report = restore(Request(topic, "kafka", target=target), kafka, store, spark, say=said.append)

    assert report.records == 150 and report.skipped == 0
    assert len(report.units) == 9  # [0,20) [20,40) [40,50) of 3 partitions
    assert sum(u["transactions"] for u in report.units) > 9  # one an object, several objects a range
    for p in range(3):
        original, restored = read_kafka(kafka, topic, p), read_kafka(kafka, target, p)
        assert fields(restored) == fields(original)  # in order, field by field
        assert all(r["timestamp_type"] == "CreateTime" for r in restored)
    # The marker: the restore's group has committed the next source offset of each partition.
    assert kafka.committed(topic, [0, 1, 2], f"matos-restore-{target}") == {0: 50, 1: 50, 2: 50}
    assert any("restored 150 record(s) from 9 range(s)" in s for s in said)

    # Run again: everything is marked restored, nothing is produced twice.
    with swift.store() as store:
        again = restore(Request(topic, "kafka", target=target), kafka, store, spark)
    assert again.records == 0 and again.skipped == 9
    assert [len(read_kafka(kafka, target, p)) for p in range(3)] == [50, 50, 50]


def test_a_restore_killed_half_way_then_run_again_leaves_every_record_exactly_once(kafka, swift, spark, new_topic):
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 120, partitions=2, range_size=20)  # 3 ranges each
        target = new_topic(partitions=2)
        group = f"matos-restore-{target}"
        # The task of partition 0's second range dies like a killed process, after producing its
        # first object's records and marker, before committing: an open transaction is left.
        kill = Fault(partition=0, start=20, after=1, how="exit")
        with pytest.raises(Exception) as crashed:
            restore(Request(topic, "kafka", target=target), kafka, store, spark, fault=kill)
        assert "exited unexpectedly" in str(crashed.value) or "crashed" in str(crashed.value), crashed.value

        marks = committed_uncommitted_read(kafka, topic, [0, 1], group)
        assert marks[0] == 20  # the first range is restored, the second is not
        assert records_in_log(kafka, target, 0) > 20  # the dead attempts' records are in the log...

        said: list[str] = []
        report = restore(Request(topic, "kafka", target=target), kafka, store, spark, say=said.append)

    # ...but fenced and aborted by the rerun, which went on from the marker.
    done = {(u["partition"], u["start"]): u for u in report.units}
    assert done[(0, 0)]["skipped"] and not done[(0, 20)]["skipped"]
    for p in (0, 1):
        restored = read_kafka(kafka, target, p)
        assert fields(restored) == fields(read_kafka(kafka, topic, p))  # exactly once, in order
    assert records_in_log(kafka, target, 0) > len(read_kafka(kafka, target, 0))
    assert kafka.committed(topic, [0, 1], group) == {0: 60, 1: 60}
    assert any("already restored" in s for s in said)


def test_a_time_window_restores_exactly_the_records_in_it_partitioned_by_key(kafka, swift, spark, new_topic):
    topic = new_topic(partitions=2)
    stamped(kafka, topic, 100, 2)  # record i stamped BASE_MS + i s, partition i % 2
    since, until = BASE_MS + 25_000, BASE_MS + 62_000  # records 25..61
    target = new_topic(partitions=1)
    with swift.store() as store:
        archive_in_ranges(kafka, store, spark, config(topic, slice_records=10), partitions=2, size=20)
        report = restore(
            Request(topic, "kafka", since_ms=since, until_ms=until, target=target, keep_partition=False),
            kafka, store, spark,
        )

    expected = [r for p in (0, 1) for r in read_kafka(kafka, topic, p) if since <= r["timestamp"] < until]
    restored = read_kafka(kafka, target, 0)
    assert report.records == len(expected) == 37
    assert sorted(fields(restored)) == sorted(fields(expected))
    for p in (0, 1):  # each source partition's records keep their order
        mine = [r["key"] for r in restored if int(r["key"][1:]) % 2 == p]
        assert mine == [r["key"] for r in expected if r["partition"] == p]


def test_a_dry_run_produces_nothing_and_reports_the_counts(kafka, swift, spark, new_topic):
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 90, partitions=3, range_size=20)  # 30 a partition
        target = f"restored-{uuid.uuid4().hex[:8]}"
        keys = [OffsetRange(topic, 0, 5, 25).key, OffsetRange(topic, 2, 18, 30).key]
        req = Request(topic, "kafka", keys=tuple(keys), target=target, dry_run=True)

        report = restore(req, kafka, store, spark)

        assert report.records == 20 + 12
        assert report.records_by_partition() == {0: 20, 2: 12}
        assert [(u["partition"], u["start"], u["end"]) for u in report.units] == [(0, 5, 20), (2, 18, 20), (0, 20, 25),
                                                                                  (2, 20, 30)]
        assert report.created_target == 3
        assert target not in kafka.admin().list_topics(timeout=10).topics  # not even created

        # The same restore for real, then its dry run: everything already restored.
        real = restore(Request(topic, "kafka", keys=tuple(keys), target=target), kafka, store, spark)
        assert real.records == 32
        assert [len(read_kafka(kafka, target, p)) for p in range(3)] == [20, 0, 12]
        after = restore(req, kafka, store, spark)
        assert after.records == 0 and after.skipped == len(after.units) == 4


def test_refusals_name_the_way_out(kafka, swift, spark, new_topic):
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 20, partitions=2, range_size=20)
        small = new_topic(partitions=1)
        with pytest.raises(RestoreRefused, match="keep_partition: false"):
            restore(Request(topic, "kafka", target=small), kafka, store, spark)
        with pytest.raises(RestoreRefused, match="not both"):
            restore(Request(topic, "kafka", keys=(OffsetRange(topic, 0, 0, 5).key,), partitions=(0,)), kafka, store,
                    spark)
        gone = Request("deleted-topic", "kafka", target=small)
        assert restore(gone, kafka, store, spark).records == 0  # nothing archived under that name


def test_the_restore_job_runs_from_the_dagster_cli(kafka, swift, swift_server, kafka_server, spark, new_topic,
                                                   tmp_path):
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 60, partitions=2, range_size=20)
    target = f"cli-restored-{uuid.uuid4().hex[:8]}"  # created by the restore
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {topic}\n", container=swift.container)
    (tmp_path / "restore.yaml").write_text(json.dumps({"ops": {"restore_records": {"config": {
        "topic": topic, "partition": 1, "start": 10, "end": 60, "target_topic": target}}}}))
    p = subprocess.run([DAGSTER, "job", "execute", "-m", "matos_dagster.definitions", "-j", "restore",
                        "-c", "restore.yaml"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert f"restored 20 record(s) from 2 range(s) (0 already restored) of {topic} into {target}" in out
    assert read_kafka(kafka, target, 0) == []
    assert fields(read_kafka(kafka, target, 1)) == fields(read_kafka(kafka, topic, 1, 10))
