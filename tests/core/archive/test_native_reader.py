"""The native slice reader (matos_dagster/core/archive/native) writes what the Python reader writes.

Each case runs `slice_task.archive_slice` twice on the same Kafka records, once per reader
(MATOS_NATIVE_READER=false / true), into two directories of one container, and compares the objects
byte for byte, the manifest entries field by field, and the errors message by message. Real
Kafka and Swift; no Spark (the task's own code, in this process).
"""

from __future__ import annotations

import dataclasses
import random
import re
import uuid

import pytest
from confluent_kafka import KafkaException
from helpers import decode_object

from matos_dagster.core.archive import native, slice_task
from matos_dagster.core.archive.slice_task import RecordTooLarge, SliceJob, SliceStuck
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.batch import Batch

READERS = ("python", "native")
# Records with old timestamps, kept: retention by time would delete them under the test.
KEEP = {"retention.ms": "-1", "message.timestamp.before.max.ms": str(2**63 - 1)}


@pytest.fixture(autouse=True)
def native_is_built():
    why = native.why_not() if not native.disabled() else None
    assert why is None, f"the native reader must be built for these tests: {why}"


def run(reader: str, monkeypatch, job: SliceJob) -> list[dict]:
    monkeypatch.setenv("MATOS_NATIVE_READER", "true" if reader == "native" else "false")
    return slice_task.archive_slice(job)


def job_for(kafka, store, topic: str, start: int, end: int, **kw) -> SliceJob:
    return SliceJob(slice=OffsetRange(topic, 0, start, end), directory=f"d-{uuid.uuid4().hex[:8]}",
                    kafka_conf=kafka.client_config(), group=f"g-{topic}", swift=store.params, **kw)


def both(kafka, store, monkeypatch, topic, start, end, **kw) -> dict[str, tuple[list[dict], list[bytes]]]:
    """Each reader's entries (names made relative, `reader` dropped) and object bytes."""
    out = {}
    for reader in READERS:
        job = job_for(kafka, store, topic, start, end, **kw)
        written = run(reader, monkeypatch, job)
        assert {o["reader"] for o in written} <= {reader}
        out[reader] = (
            [{**{k: v for k, v in o.items() if k != "reader"}, "name": o["name"][len(job.directory):]} for o in written],
            [store.get(o["name"]) for o in written],
        )
    return out


# Nulls, empty keys and values, repeated and null-valued headers, UTF-8 header keys, sizes
# from 0 to a few KiB: every column's edge, in one partition.
def mixed_records(n: int) -> list[tuple]:
    rows = []
    for i in range(n):
        key = None if i % 7 == 0 else b"" if i % 11 == 0 else f"k{i}".encode()
        value = None if i % 5 == 0 else b"" if i % 13 == 0 else bytes([i % 256]) * (i * 37 % 3000)
        headers = [] if i % 3 == 0 else [("h", b"1"), ("h", None), ("é日本", b"x" * (i % 9)), ("h", b"")][: 1 + i % 4]
        rows.append((key, value, headers, 1_700_000_000_000 + (i * 7919) % 100_000))
    return rows


def produce(kafka, topic: str, rows) -> None:
    p = kafka.producer()
    errors = []
    for key, value, headers, ts in rows:
        p.produce(topic, key=key, value=value, headers=headers or None, timestamp=ts, partition=0,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(60) == 0 and errors == [], errors


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_both_readers_write_byte_identical_objects_split_at_the_same_records(
        fmt, kafka, swift, new_topic, monkeypatch):
    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, mixed_records(400))
    # Small chunks and objects: many chunk seals inside each object and many objects a slice.
    monkeypatch.setattr(slice_task, "_new_batch",
                        lambda job: Batch(job.slice.topic, job.slice.partition, chunk_bytes=3000))
    with swift.store() as store:
        got = both(kafka, store, monkeypatch, topic, 3, 397, format=fmt, object_bytes=60_000)
    (py_entries, py_bytes), (nat_entries, nat_bytes) = got["python"], got["native"]
    assert len(py_entries) >= 5  # the slice was split into several objects
    assert nat_entries == py_entries
    assert nat_bytes == py_bytes
    assert sum(e["records"] for e in py_entries) == 394


def test_an_object_ends_at_the_record_that_fills_object_bytes_exactly_in_both_readers(
        kafka, swift, new_topic, monkeypatch):
    # Records of exactly 1,000 bytes (a value, no key, no header) and objects of 10,000: the
    # tenth record fills an object exactly and stays in it; the eleventh starts the next. A
    # boundary off by one record, or by less than a record, in either reader fails here.
    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, [(None, bytes([i % 256]) * 1000, [], 1_700_000_000_000 + i) for i in range(45)])
    with swift.store() as store:
        got = both(kafka, store, monkeypatch, topic, 0, 45, object_bytes=10_000)
    for reader, (entries, _) in got.items():
        assert [(e["first_offset"], e["records"], e["record_bytes"]) for e in entries] == [
            (0, 10, 10_000), (10, 10, 10_000), (20, 10, 10_000), (30, 10, 10_000), (40, 5, 5_000)], reader
    assert got["native"][1] == got["python"][1]


def transactions(kafka, topic: str, outcomes: list[bool]) -> None:
    from test_archive import transactions as make

    make(kafka, topic, outcomes)


@pytest.mark.parametrize("start, end", [(0, 24), (2, 14)])
def test_both_readers_skip_aborted_records_and_markers_alike(start, end, kafka, swift, new_topic, monkeypatch):
    # Offsets: 0-4 committed, 5 marker, 6-10 aborted, 11 marker, 12-16 committed, 17 marker,
    # 18-22 aborted, 23 marker. One slice ends in the log's last marker, one in aborted records.
    topic = new_topic(partitions=1, **KEEP)
    transactions(kafka, topic, [True, False, True, False])
    with swift.store() as store:
        got = both(kafka, store, monkeypatch, topic, start, end)
    assert got["native"] == got["python"]
    offsets = [r["offset"] for data in got["native"][1] for r in decode_object(data, "parquet")]
    assert offsets == [o for o in [*range(0, 5), *range(12, 17)] if start <= o < end]


@pytest.mark.parametrize("reader", READERS)
def test_a_slice_larger_than_the_prefetch_bound_never_waits_long_for_its_next_fetch(
        reader, kafka, swift, new_topic, monkeypatch, capfd):
    # The slice consumer prefetches at most 8 MiB (memory per task). When its queue holds that
    # much, librdkafka postpones the partition's next fetch by fetch.queue.backoff.ms, 1,000 ms
    # by default: a task then read at most 8 MiB a second and waited the rest (W1's archive,
    # 1 GB, took 44.8 s instead of 12.9; both readers). librdkafka logs each of those
    # postponements with its length (debug=fetch, to stderr): the slice must fill the queue at
    # least once (else this tests nothing) and never be held back for more than 50 ms (the
    # queue drains in about 100 ms at a task's speed). Not a timing: the lengths are librdkafka's.
    topic = new_topic(partitions=1, **KEEP)
    n = 32 * 1024  # 32 MiB of records, four times the prefetch bound
    # In large record batches, as a busy producer writes them (the bench's settings): fetched
    # 1 MiB at a time, they fill the queue faster than a task empties it.
    p = kafka.producer(**{"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4"})
    values = random.Random(3).randbytes(n + 1024)  # incompressible, as the bench's
    for i in range(n):
        p.produce(topic, value=values[i:i + 1024], partition=0, timestamp=1_700_000_000_000 + i)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    del p  # its threads end now, not when a failure's traceback is dropped
    capfd.readouterr()
    with swift.store() as store:
        job = job_for(kafka, store, topic, 0, n)
        job = dataclasses.replace(job, kafka_conf={**job.kafka_conf, "debug": "fetch"})
        written = run(reader, monkeypatch, job)
    log = capfd.readouterr().err
    assert sum(o["records"] for o in written) == n and {o["reader"] for o in written} == {reader}
    waits = [int(ms) for ms in re.findall(r"Fetch backoff for (\d+)ms: Local: Queue full", log)]
    assert waits, "the prefetch queue never filled: this slice does not exercise the bound"
    assert max(waits) <= 50, f"librdkafka held the slice's fetches back {len(waits)} times, up to {max(waits)} ms"


def test_a_record_above_max_record_bytes_fails_both_readers_with_the_same_message(
        kafka, swift, new_topic, monkeypatch):
    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, [(b"k", b"v" * 10, [], 1), (b"k", b"v" * 100, [("é", b"12")], 2)])
    messages = {}
    with swift.store() as store:
        for reader in READERS:
            job = job_for(kafka, store, topic, 0, 2, max_record_bytes=100)
            (refused,) = run(reader, monkeypatch, job)  # an entry, not an error Spark would retry
            assert refused["kind"] == RecordTooLarge.__name__
            messages[reader] = refused["refused"]
            assert list(store.list(job.directory + "/")) == []  # nothing written
    assert messages["native"] == messages["python"]
    assert "@1 is 105 bytes" in messages["native"]


def test_an_open_transaction_stalls_both_readers_with_the_same_message(kafka, swift, new_topic, monkeypatch):
    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, [(b"k", b"v", [], 1)])
    tx = kafka.producer(**{"transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce(topic, key=b"open", value=b"open", partition=0)
    tx.flush(30)
    messages = {}
    try:
        with swift.store() as store:
            for reader in READERS:
                with pytest.raises(SliceStuck) as e:
                    run(reader, monkeypatch, job_for(kafka, store, topic, 0, 2, stall_timeout_s=1.0))
                messages[reader] = str(e.value)
    finally:
        tx.abort_transaction(30)
    assert messages["native"] == messages["python"]
    assert "at offset 1 (slice ends at 2)" in messages["native"]


def test_offsets_kafka_does_not_have_fail_both_readers_with_the_same_kafka_error(
        kafka, swift, new_topic, monkeypatch):
    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, [(b"k", b"v", [], 1)])
    codes = {}
    with swift.store() as store:
        for reader in READERS:
            with pytest.raises(KafkaException) as e:
                run(reader, monkeypatch, job_for(kafka, store, topic, 50, 60))
            codes[reader] = e.value.args[0].code()
    assert codes["native"] == codes["python"]


def test_the_python_reader_is_used_and_named_when_the_native_one_is_turned_off(monkeypatch):
    monkeypatch.setenv("MATOS_NATIVE_READER", "false")
    assert native.why_not({}) == "MATOS_NATIVE_READER=false"
    monkeypatch.setenv("MATOS_NATIVE_READER", "true")
    assert native.why_not({"bootstrap.servers": "x", "enable.idempotence": True}) is None
    assert "oauth_cb" in native.why_not({"oauth_cb": lambda conf: None})  # only confluent-kafka takes callables


def test_settings_reach_librdkafka_as_confluent_kafka_writes_them():
    assert native.conf_strings({"a": True, "b": False, "c": 32768, "d": "x"}) == {
        "a": "true", "b": "false", "c": "32768", "d": "x"}


def test_the_reader_flag_of_a_turned_off_native_reader_is_python(kafka, swift, new_topic, monkeypatch):
    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, [(b"k", b"v", [], 1)])
    with swift.store() as store:
        assert [o["reader"] for o in run("python", monkeypatch, job_for(kafka, store, topic, 0, 1))] == ["python"]
        assert [o["reader"] for o in run("native", monkeypatch, job_for(kafka, store, topic, 0, 1))] == ["native"]


def test_a_spark_archive_run_names_the_reader_in_its_log_and_asset_metadata(kafka, swift, spark, new_topic):
    from samples import config

    from matos_dagster.assets.archive import metadata
    from matos_dagster.core.archive.range_run import archive_range

    topic = new_topic(partitions=1, **KEEP)
    produce(kafka, topic, mixed_records(20))
    said = []
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 20), config(topic), kafka, store, spark, say=said.append)
    # `make test-python-reader` runs this with MATOS_NATIVE_READER=false in the session's Spark
    # workers: then it proves those runs really used the Python reader.
    expected = "python" if native.disabled() else "native"
    assert done.reader == expected  # the executors' Python workers load it too
    assert metadata(done, "u")["reader"].value == expected
    assert any(f"read by the {expected} slice reader" in line for line in said)
    assert all("reader" not in o for o in done.manifest["objects"])  # the manifest's format is unchanged


def test_the_python_reader_fallback_shows_in_the_asset_metadata():
    from matos_dagster.assets.archive import metadata
    from matos_dagster.core.archive.range_run import Archived

    doc = {"records": 1, "bytes": 10, "record_bytes": 2, "objects": [{"name": "a"}], "first_offset": 0,
           "last_offset": 0, "min_timestamp": None, "max_timestamp": None}
    done = Archived(OffsetRange("t", 0, 0, 1), "m", doc, False, None, 1, 1.0, 1, reader="python")
    assert metadata(done, "u")["reader"].value == "python"
    assert "reader" not in metadata(Archived(OffsetRange("t", 0, 0, 1), "m", doc, True, 1, 1, 1.0), "u")


def test_a_worker_without_the_native_reader_says_why_once_not_per_task(monkeypatch, caplog):
    """A Spark worker runs task after task: the reason is a warning the first time, then debug only."""
    import logging

    monkeypatch.setattr(slice_task, "_said", set())
    monkeypatch.setattr(slice_task, "_archive_python", lambda job, erased: [])  # the reading itself: not the claim
    monkeypatch.setenv("MATOS_NATIVE_READER", "false")
    job = SliceJob(OffsetRange("t", 0, 0, 10), "d", {}, "g", swift=None)
    with caplog.at_level(logging.DEBUG, logger=slice_task.log.name):
        for _ in range(3):
            slice_task.archive_slice(job)
    said = [r for r in caplog.records if "Python reader (MATOS_NATIVE_READER=false)" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
