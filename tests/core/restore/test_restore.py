"""Restoring archived records into Kafka, exactly once, on the real Kafka, Swift and Spark.

The target is always read back with `read_committed` (helpers.read_kafka) and compared
field by field with the original records: key, value, headers, timestamp and its type.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from helpers import produce, read_kafka, user_env
from samples import BASE_MS, archive_in_ranges, awkward_rows, config, delete_topic, fields, stamped

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.objects import encode
from matos_dagster.core.restore.plan import Fault, Request, RestoreFailed, RestoreRefused
from matos_dagster.core.restore.run import restore
from matos_dagster.core.swift import layout, manifest

DAGSTER = str(Path(sys.executable).parent / "dagster")


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


def test_a_deleted_topic_restored_into_itself_killed_half_way_and_run_again_holds_every_record_once_in_order(
        kafka, swift, spark, new_topic):
    # The disaster case: the topic is gone and the archive is all that is left of it. The
    # restore makes the topic again under its own name and restores into it; its progress
    # marker then lives on the very topic-partitions it fills.
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 120, partitions=2, range_size=20)  # 3 ranges each
        originals = {p: read_kafka(kafka, topic, p) for p in (0, 1)}
        delete_topic(kafka, topic)
        group = f"matos-restore-{topic}"
        # Partition 0's second range dies like a killed process after its first object's
        # records and marker went to Kafka, before the commit: an open transaction is left.
        kill = Fault(partition=0, start=20, after=1, how="exit")
        with pytest.raises(Exception) as crashed:
            restore(Request(topic, "kafka"), kafka, store, spark, fault=kill)
        assert "exited unexpectedly" in str(crashed.value) or "crashed" in str(crashed.value), crashed.value

        # The killed run had made the topic again, with the partitions and settings the records need.
        assert kafka.partitions(topic) == [0, 1]
        made = topic_config(kafka, topic)
        assert (made["message.timestamp.type"], made["retention.ms"]) == ("CreateTime", "-1")
        assert committed_uncommitted_read(kafka, topic, [0, 1], group)[0] == 20  # range [0, 20) restored
        assert records_in_log(kafka, topic, 0) > 20  # and the killed attempts' records follow it

        said: list[str] = []
        report = restore(Request(topic, "kafka"), kafka, store, spark, say=said.append)

    done = {(u["partition"], u["start"]): u for u in report.units}
    assert done[(0, 0)]["skipped"] and not done[(0, 20)]["skipped"]  # went on from the marker
    for p in (0, 1):
        # Every record once, in order: the killed attempts' records were fenced and aborted.
        assert fields(read_kafka(kafka, topic, p)) == fields(originals[p])
    assert records_in_log(kafka, topic, 0) > len(originals[0])
    assert kafka.committed(topic, [0, 1], group) == {0: 60, 1: 60}
    assert not any(s.startswith("created topic") for s in said)  # the rerun found the topic made


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
                                                   tmp_path, connect_server):
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 60, partitions=2, range_size=20)
    target = f"cli-restored-{uuid.uuid4().hex[:8]}"  # created by the restore
    # On the session's Spark Connect server, as `make run` gives the runs: no Spark driver JVM of its own.
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {topic}\n", container=swift.container,
                   MATOS_SPARK_MASTER=connect_server.url)
    (tmp_path / "restore.yaml").write_text(json.dumps({"ops": {"restore_records": {"config": {
        "topic": topic, "partition": 1, "start": 10, "end": 60, "target_topic": target}}}}))
    p = subprocess.run([DAGSTER, "job", "execute", "-m", "matos_dagster.definitions", "-j", "restore",
                        "-c", "restore.yaml"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert f"restored 20 record(s) from 2 range(s) (0 already restored) of {topic} into {target}" in out
    assert read_kafka(kafka, target, 0) == []
    assert fields(read_kafka(kafka, target, 1)) == fields(read_kafka(kafka, topic, 1, 10))


# -- fidelity: timestamps, sizes, settings (issue 12 items 2 and 3, issue 20 item 6) ------

NO_LIMIT = str(2**63 - 1)
# A topic that takes any timestamp and keeps records whatever their age.
ANY_TIME = {"message.timestamp.before.max.ms": NO_LIMIT, "message.timestamp.after.max.ms": NO_LIMIT,
            "retention.ms": "-1"}
Y1970, Y2200 = 1, 7258118400000  # 1970-01-01T00:00:00.001, 2200-01-01T00:00:00.000


def produce_stamped(kafka, topic: str, rows, **producer_conf) -> None:
    """rows: (key, value, headers, timestamp ms), into partition 0; every delivery must succeed."""
    p = kafka.producer(**producer_conf)
    errors = []
    for key, value, headers, ts in rows:
        p.produce(topic, key=key, value=value, headers=headers, timestamp=ts, partition=0,
                  on_delivery=lambda err, msg: err and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0 and errors == [], errors


def topic_config(kafka, topic: str) -> dict[str, str]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = kafka.admin()  # must outlive the future
    return {k: e.value for k, e in admin.describe_configs([res])[res].result(30).items()}


def log_end(kafka, topic: str, partition: int = 0) -> int:
    return kafka.watermarks(topic, [partition])[partition][1]


def far_stamped_topic(kafka, store, spark, new_topic) -> str:
    """An archived topic of records stamped from 1970 to 2200 (the source takes any timestamp)."""
    topic = new_topic(partitions=1, **ANY_TIME)
    now = int(time.time() * 1000)
    stamps = [Y1970, 86_400_000, now - 1000, now + 30 * 86_400_000, Y2200]
    produce_stamped(kafka, topic, [(f"k{i}".encode(), bytes([i]) * 10, [("é", b"\xff"), ("é", None)], ts)
                                   for i, ts in enumerate(stamps)])
    assert [r["timestamp"] for r in read_kafka(kafka, topic, 0)] == stamps
    archive_range(OffsetRange(topic, 0, 0, len(stamps)), config(topic), kafka, store, spark)
    return topic


def test_records_stamped_from_1970_to_2200_restore_exactly_into_a_topic_the_restore_creates(
        kafka, swift, spark, new_topic):
    """Issue 12.2: the created target had the broker's defaults and Kafka refused the records
    (INVALID_TIMESTAMP, a raw error). It gets the source's timestamp windows now."""
    target = f"restored-{uuid.uuid4().hex[:8]}"
    said: list[str] = []
    with swift.store() as store:
        topic = far_stamped_topic(kafka, store, spark, new_topic)
        report = restore(Request(topic, "kafka", target=target), kafka, store, spark, say=said.append)

    assert report.records == 5 and report.created_target == 1
    assert fields(read_kafka(kafka, target, 0)) == fields(read_kafka(kafka, topic, 0))  # timestamps too
    settings = topic_config(kafka, target)
    assert settings["message.timestamp.after.max.ms"] == NO_LIMIT == settings["message.timestamp.before.max.ms"]
    assert settings["message.timestamp.type"] == "CreateTime" and settings["retention.ms"] == "-1"
    assert report.target_config["message.timestamp.after.max.ms"] == NO_LIMIT
    assert any(f"created topic {target}" in s and "message.timestamp.after.max.ms" in s for s in said), said


def test_an_existing_target_that_would_refuse_the_timestamps_is_refused_naming_its_settings_and_untouched(
        kafka, swift, spark, new_topic):
    strict = new_topic(partitions=1)  # the broker's defaults: timestamps up to 1 hour ahead, 7 days' retention
    with swift.store() as store:
        topic = far_stamped_topic(kafka, store, spark, new_topic)
        with pytest.raises(RestoreRefused) as refused:
            restore(Request(topic, "kafka", target=strict), kafka, store, spark)

    text = str(refused.value)
    assert f"target topic {strict} would not keep the records as archived; nothing was produced" in text
    assert "message.timestamp.after.max.ms is 3600000" in text and "2200-01-01T00:00:00.000" in text
    assert "retention.ms is 604800000" in text and "1970-01-01T00:00:00.001" in text
    assert log_end(kafka, strict) == 0  # not a record, not even an aborted one
    assert kafka.committed(topic, [0], f"matos-restore-{strict}") == {0: None}


def test_a_4_mib_record_is_archived_and_restored_with_equal_bytes(kafka, swift, spark, new_topic):
    """Issue 12.3: the restore's producer kept librdkafka's 1,000,000-byte message.max.bytes."""
    limit = 8 * 1024**2
    topic = new_topic(partitions=1, **{"max.message.bytes": str(limit)})
    big = os.urandom(4 * 1024**2 + 7)
    produce(kafka, topic, [(b"before", b"v", []), (b"big", big, [("h", b"x")]), (None, b"after", [])], partition=0,
            **{"message.max.bytes": limit})
    target = f"restored-{uuid.uuid4().hex[:8]}"
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 3), config(topic, max_record_bytes=limit, object_bytes=2 * limit),
                             kafka, store, spark)
        assert done.manifest["largest_record_bytes"] == len(big) + len(b"big") + 2
        report = restore(Request(topic, "kafka", target=target, max_record_bytes=limit), kafka, store, spark)

    assert report.records == 3
    restored = read_kafka(kafka, target, 0)
    assert fields(restored) == fields(read_kafka(kafka, topic, 0))
    assert restored[1]["value"] == big
    assert topic_config(kafka, target)["max.message.bytes"] == str(limit)  # the source's, copied


def test_a_refused_delivery_aborts_its_transaction_names_the_setting_and_a_rerun_restores_the_rest_once(
        kafka, swift, spark, new_topic):
    """The delivery-failure and abort paths: a manifest written before largest_record_bytes cannot
    say how large its records are, so Kafka refuses a too large one as it is produced."""
    topic = new_topic(partitions=1, **{"max.message.bytes": str(2 * 1024**2)})
    rows = [(f"k{i}".encode(), (b"x" * 600_000) if i == 6 else f"v{i}".encode(), []) for i in range(10)]
    produce(kafka, topic, rows, partition=0, **{"message.max.bytes": 2 * 1024**2})
    target = new_topic(partitions=1, **{"max.message.bytes": "300000"})
    group = f"matos-restore-{target}"
    said: list[str] = []
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 10), config(topic, object_bytes=1024), kafka, store, spark)
        assert len(done.manifest["objects"]) >= 3  # records 0-5, 6 alone, then the rest
        older = dict(done.manifest, objects=[{k: v for k, v in o.items() if k != "largest_record_bytes"}
                                             for o in done.manifest["objects"]])
        older.pop("largest_record_bytes")
        store.put_json(done.manifest_name, older)

        with pytest.raises(RestoreFailed) as failed:
            restore(Request(topic, "kafka", target=target), kafka, store, spark, say=said.append)
        text = str(failed.value)
        assert f"were not delivered to topic {target}" in text and "MSG_SIZE_TOO_LARGE" in text, text
        assert f"raise max.message.bytes on {target}" in text and "transaction is aborted" in text
        assert any("without largest_record_bytes" in s for s in said), said
        # Records 0-5 went in a committed transaction; record 6's transaction was aborted, not left
        # open (read_kafka would wait for an open one and fail), and the marker stays before it.
        assert [r["key"] for r in read_kafka(kafka, target, 0)] == [f"k{i}".encode() for i in range(6)]
        assert kafka.committed(topic, [0], group) == {0: 6}

        admin = kafka.admin()  # as the error says: raise max.message.bytes, run again
        alter = ConfigResource(ConfigResource.Type.TOPIC, target, incremental_configs=[
            ConfigEntry("max.message.bytes", str(2 * 1024**2), incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([alter])[alter].result(30)
        again = restore(Request(topic, "kafka", target=target), kafka, store, spark)

    assert again.records == 4
    assert fields(read_kafka(kafka, target, 0)) == fields(read_kafka(kafka, topic, 0))  # each once, in order


def test_a_task_that_fails_mid_transaction_aborts_it(kafka, swift, spark, new_topic):
    """The abort path: an exception between producing and committing aborts the transaction at
    once, so read_committed readers of the target are not held back until it times out."""
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 40, partitions=1, range_size=20)
        target = new_topic(partitions=1)
        # Every attempt of the second range's task (Spark retries it) fails in its first transaction.
        drill = Fault(partition=0, start=20, after=1, how="raise")
        with pytest.raises(Exception, match="fault drill"):
            restore(Request(topic, "kafka", target=target), kafka, store, spark, fault=drill)

        committed = read_kafka(kafka, target, 0)  # returns only if no transaction is left open
        assert log_end(kafka, target) > len(committed) == 20  # aborted records and markers follow them
        assert kafka.committed(topic, [0], f"matos-restore-{target}") == {0: 20}
        assert fields(committed) == fields(read_kafka(kafka, topic, 0, 0, 20))


def test_records_archived_without_a_timestamp_restore_stamped_at_the_restore(kafka, swift, spark, new_topic):
    """Records of an old message format have no timestamp (archived as null, NotAvailable);
    the archive is written here as such a topic would have left it."""
    topic = new_topic(partitions=1)
    target = f"restored-{uuid.uuid4().hex[:8]}"
    r = OffsetRange(topic, 0, 0, 3)
    batch = Batch(topic, 0)
    for offset, key in enumerate([b"a", None, b"c"]):
        batch.add(offset, 0, -1, key, b"v" + bytes([offset]), [("h", None)], 3)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, "")
        name = layout.object_name(layout.range_dir(prefix, r), 0, "parquet")
        data = encode(batch.table(), "parquet")
        md5 = store.put(name, data)
        store.put_json(layout.manifest_name(prefix, r), manifest.build(r, "parquet", [
            {"name": name, "bytes": len(data), "md5": md5, "record_bytes": batch.nbytes,
             "largest_record_bytes": batch.largest, **batch.stats()}]))
        before = int(time.time() * 1000)
        report = restore(Request(topic, "kafka", target=target), kafka, store, spark)
        after = int(time.time() * 1000)

    restored = read_kafka(kafka, target, 0)
    assert report.records == 3
    assert [(x["key"], x["value"], x["headers"]) for x in restored] == [
        (b"a", b"v\x00", [{"key": "h", "value": None}]), (None, b"v\x01", [{"key": "h", "value": None}]),
        (b"c", b"v\x02", [{"key": "h", "value": None}])]
    assert all(x["timestamp_type"] == "CreateTime" and before <= x["timestamp"] <= after for x in restored)


def test_log_append_time_records_restore_with_their_archived_timestamps(kafka, swift, spark, new_topic):
    topic = new_topic(partitions=1, **{"message.timestamp.type": "LogAppendTime"})
    produce_stamped(kafka, topic, [(f"k{i}".encode(), b"v", [], 86_400_000 + i) for i in range(5)])
    original = read_kafka(kafka, topic, 0)
    assert {r["timestamp_type"] for r in original} == {"LogAppendTime"}  # the broker's time, not 1970
    target = f"restored-{uuid.uuid4().hex[:8]}"
    same_kind = new_topic(partitions=1, **{"message.timestamp.type": "LogAppendTime"})
    said: list[str] = []
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 5), config(topic), kafka, store, spark)
        restore(Request(topic, "kafka", target=target), kafka, store, spark)
        before = int(time.time() * 1000)
        report = restore(Request(topic, "kafka", target=same_kind), kafka, store, spark, say=said.append)

    restored = read_kafka(kafka, target, 0)
    assert [(r["key"], r["timestamp"]) for r in restored] == [(r["key"], r["timestamp"]) for r in original]
    assert {r["timestamp_type"] for r in restored} == {"CreateTime"}  # created as CreateTime to keep them
    # Into a LogAppendTime topic the broker stamps them anew, and the restore says so.
    assert any("message.timestamp.type=LogAppendTime" in s for s in said) and report.notes
    assert all(r["timestamp"] >= before for r in read_kafka(kafka, same_kind, 0))


def test_a_restore_whose_source_topic_is_gone_is_refused_before_creating_anything(kafka, swift, spark, new_topic):
    target = f"restored-{uuid.uuid4().hex[:8]}"
    with swift.store() as store:
        topic = archived_topic(kafka, store, spark, new_topic, 20, partitions=2, range_size=20)
        delete_topic(kafka, topic)
        with pytest.raises(RestoreRefused) as refused:
            restore(Request(topic, "kafka", target=target), kafka, store, spark)

    assert f"Create topic {topic} with at least 2 partition(s)" in str(refused.value)
    assert target not in kafka.admin().list_topics(timeout=10).topics  # the target was not created either
