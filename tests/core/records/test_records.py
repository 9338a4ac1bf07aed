"""Records as Arrow rows, Parquet and JSON Lines: lossless and byte-for-byte repeatable."""

import hashlib
import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import decode_object, missing, table_rows

from matos_dagster.core.archive import slice_task
from matos_dagster.core.records import objects
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.objects import ObjectWriter, decode, encode, row_sizes, write_object

ROWS = [
    # offset, ts type, ts, key, value, headers
    (10, 1, 1_700_000_000_123, b"k1", b"v1", [("h", b"1")]),
    (11, 2, 1_700_000_000_124, None, None, []),  # null key and value stay null
    (13, 1, 1_700_000_000_125, b"", b"", None),  # empty, not null; offset 12 is a hole
    (14, 0, -1, b"\x00\xff\xfe", bytes(range(256)), [("dup", b"\xff\x00"), ("dup", None), ("é", b"")]),
]


def batch():
    b = Batch("orders", 3)
    for offset, ts_type, ts, key, value, headers in ROWS:
        b.add(offset, ts_type, ts, key, value, headers, 0)
    return b


EXPECTED = [
    {"topic": "orders", "partition": 3, "offset": 10, "timestamp": 1_700_000_000_123, "timestamp_type": "CreateTime",
     "key": b"k1", "value": b"v1", "headers": [{"key": "h", "value": b"1"}]},
    {"topic": "orders", "partition": 3, "offset": 11, "timestamp": 1_700_000_000_124,
     "timestamp_type": "LogAppendTime", "key": None, "value": None, "headers": []},
    {"topic": "orders", "partition": 3, "offset": 13, "timestamp": 1_700_000_000_125, "timestamp_type": "CreateTime",
     "key": b"", "value": b"", "headers": []},
    {"topic": "orders", "partition": 3, "offset": 14, "timestamp": None, "timestamp_type": "NotAvailable",
     "key": b"\x00\xff\xfe", "value": bytes(range(256)),
     "headers": [{"key": "dup", "value": b"\xff\x00"}, {"key": "dup", "value": None}, {"key": "é", "value": b""}]},
]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_every_field_survives_a_round_trip(fmt):
    data = encode(batch().table(), fmt)
    assert table_rows(decode(data, fmt)) == EXPECTED  # every field of every row
    assert decode_object(data, fmt) == EXPECTED  # and as independent code reads the object


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_the_same_records_always_give_the_same_bytes(fmt):
    assert encode(batch().table(), fmt) == encode(batch().table(), fmt)


def test_stats_describe_the_batch():
    assert batch().stats() == {
        "records": 4,
        "first_offset": 10,
        "last_offset": 14,
        "min_timestamp": 1_700_000_000_123,
        "max_timestamp": 1_700_000_000_125,
        # What the batch holds of each hour of event time: records, bytes, first and last offset, the
        # latest timestamp (core/days/buckets.py); the record without a timestamp is in no hour.
        "hours": {"1699999200000": [3, 6, 10, 13, 1_700_000_000_125]},
    }


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_an_object_gathered_in_small_chunks_is_byte_identical_to_one_gathered_whole(fmt):
    # The batch turns every chunk_bytes of records into Arrow as it goes (memory); a retried
    # range must still rewrite exactly the bytes of the first attempt, whatever the chunking.
    def gathered(chunk_bytes):
        b = Batch("orders", 3, chunk_bytes=chunk_bytes)
        for o in range(5_000):
            r = random.Random(o)
            value = r.randbytes(r.randint(0, 200)) if o % 7 else None
            headers = [("h", b"x"), ("h", None)] if o % 3 == 0 else None
            ts_type = o % 3
            b.add(1_000 + o, ts_type, 1_600_000_000_000 + o * 13 % 977, b"k%d" % (o % 50), value, headers,
                  len(value or b"") + 8)
        return b
    whole, chunked = gathered(1 << 40), gathered(1_000)
    assert len(chunked._chunks) > 50, "the small chunk size must really cut the records into chunks"
    assert whole.stats() == chunked.stats()
    assert encode(chunked.table(), fmt) == encode(whole.table(), fmt)


# -- ObjectWriter: objects written as the records come (memory), bytes fixed by the rows ------


def many_rows(n: int, seed: int = 0) -> pa.RecordBatch:
    """n records with every edge (null and empty keys and values, repeated, null-valued and
    UTF-8 header keys, unknown timestamps), as one Arrow record batch of SCHEMA."""
    b = Batch("orders", 3)
    for o in range(n):
        r = random.Random(seed * 1_000_003 + o)
        key = None if o % 7 == 0 else b"" if o % 11 == 0 else b"k%d" % (o % 50)
        value = None if o % 5 == 0 else r.randbytes(r.randint(0, 300))
        headers = [("h", b"x"), ("h", None), ("é日", r.randbytes(o % 5))][: o % 4] or None
        b.add(1_000 + 2 * o, o % 3, 1_600_000_000_000 + o * 13 % 977, key, value, headers,
              slice_task._size(key, value, headers))
    return b.table().to_batches()[0]


def splits(rows: pa.RecordBatch, seed: int) -> list[pa.RecordBatch]:
    """The rows cut at random places into record batches (zero-copy slices, some of one row)."""
    r = random.Random(seed)
    cuts = sorted(set(r.sample(range(1, rows.num_rows), r.randint(1, 60)) + [1, rows.num_rows - 1]))
    return [rows.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, rows.num_rows])]


def row_groups(data: bytes) -> list[int]:
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


@pytest.fixture
def small_row_groups(monkeypatch):
    """Row groups of 4 KiB of records, so a thousand records make many of them."""
    monkeypatch.setattr(objects, "ROW_GROUP_BYTES", 4 * 1024)


def test_a_record_counts_in_row_sizes_as_the_slice_task_counts_it():
    rows = many_rows(500)
    t = pa.Table.from_batches([rows])
    expected = [slice_task._size(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
                for r in t.to_pylist()]
    assert row_sizes(rows).tolist() == expected
    assert row_sizes(rows.slice(100, 50)).tolist() == expected[100:150]  # a slice counts its own rows


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_any_split_of_the_same_records_into_batches_writes_the_same_bytes(fmt, small_row_groups):
    # The native reader hands Arrow batches of its own sizes, the Python reader 4 MiB chunks, a
    # retried range either: the object must be the same bytes whichever way its rows came.
    rows = many_rows(1_500)
    whole, stats = write_object([rows], fmt)
    for seed in range(3):
        data, split_stats = write_object(splits(rows, seed), fmt)
        assert data == whole, f"split {seed} changed the bytes"
        assert split_stats == stats
    assert table_rows(decode(whole, fmt)) == table_rows(pa.Table.from_batches([rows]))
    if fmt == "parquet":
        assert len(row_groups(whole)) > 10, "the records must span many row groups for this test to mean anything"


def test_a_row_group_ends_at_the_record_that_brings_it_to_row_group_bytes(small_row_groups):
    rows = many_rows(1_500)
    data, _ = write_object(splits(rows, 1), "parquet")
    sizes = row_sizes(rows).tolist()
    start = 0
    for n in row_groups(data)[:-1]:
        group = sizes[start:start + n]
        assert sum(group) >= objects.ROW_GROUP_BYTES > sum(group[:-1]), (start, n)
        start += n
    last = sizes[start:]
    assert sum(last) < objects.ROW_GROUP_BYTES or sum(last) >= objects.ROW_GROUP_BYTES > sum(last[:-1])


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_a_batch_encoding_as_it_goes_writes_what_a_batch_kept_whole_writes(fmt, small_row_groups):
    def gathered(chunk_bytes: int, streamed: bool) -> Batch:
        b = Batch("orders", 3, chunk_bytes=chunk_bytes, fmt=fmt if streamed else None)
        for row in pa.Table.from_batches([many_rows(1_000)]).to_pylist():
            headers = [(h["key"], h["value"]) for h in row["headers"]] or None
            ts_type = {"NotAvailable": 0, "CreateTime": 1, "LogAppendTime": 2}[row["timestamp_type"]]
            ts = int(row["timestamp"].timestamp() * 1000) if row["timestamp"] else -1
            b.add(row["offset"], ts_type, ts, row["key"], row["value"], headers,
                  slice_task._size(row["key"], row["value"], headers))
        return b

    streamed = gathered(5_000, True)
    assert streamed._chunks == [], "a batch given the format keeps no chunk: each went into the object"
    kept = gathered(1 << 40, False)
    assert streamed.stats() == kept.stats() == {**streamed.writer(fmt).stats(), "hours": kept.stats()["hours"]}
    assert sum(n for n, *_ in kept.stats()["hours"].values()) == sum(r["timestamp"] is not None for r in
                                                                     many_rows(1_000).to_pylist())
    assert streamed.writer(fmt).finish() == kept.writer(fmt).finish()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_the_writer_gives_the_md5_of_the_bytes_it_wrote_however_the_rows_came(fmt, small_row_groups):
    # The upload sends this md5 for Swift to check, instead of hashing the object again.
    rows = many_rows(1_500)
    for batches in ([rows], splits(rows, 0), splits(rows, 1)):
        w = ObjectWriter(fmt)
        assert w.md5 is None
        for b in batches:
            w.write(b)
        data = w.finish()
        assert w.md5 == hashlib.md5(data).hexdigest()


def test_swift_refuses_an_upload_whose_md5_is_not_its_bytes_and_keeps_the_object_it_had(swift):
    from matos_dagster.core.swift.store import SwiftError

    good = encode(batch().table(), "parquet")
    corrupt = good[:-1] + bytes([good[-1] ^ 1])
    with swift.store() as store:
        assert store.put("o.parquet", good, md5=hashlib.md5(good).hexdigest()) == hashlib.md5(good).hexdigest()
        with pytest.raises(SwiftError, match="do not match their md5.*422"):
            store.put("o.parquet", corrupt, md5=hashlib.md5(good).hexdigest())
        with pytest.raises(SwiftError, match="422"):
            store.put("new.parquet", corrupt, md5=hashlib.md5(good).hexdigest())
        assert store.get("o.parquet") == good
        assert store.get("new.parquet") is None


def version_1_parquet(table: pa.Table) -> bytes:
    """An object as manifest version 1 wrote it: the whole object as one row group."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", use_dictionary=["topic", "timestamp_type"],
                   write_statistics=["partition", "offset", "timestamp"])
    return buf.getvalue()


def test_objects_written_before_row_groups_still_read_and_small_ones_keep_their_bytes(small_row_groups):
    old = version_1_parquet(batch().table())
    assert decode(old, "parquet").equals(batch().table())
    assert decode_object(old, "parquet") == EXPECTED
    # An object under ROW_GROUP_BYTES of records is one row group: the bytes version 1 wrote.
    assert encode(batch().table(), "parquet") == old
    # A larger one: other bytes (several row groups), the same rows.
    big = pa.Table.from_batches([many_rows(1_000)])
    old_big, new_big = version_1_parquet(big), encode(big, "parquet")
    assert len(row_groups(old_big)) == 1 and len(row_groups(new_big)) > 1
    assert decode(old_big, "parquet").equals(decode(new_big, "parquet"))
    assert decode_object(old_big, "parquet") == decode_object(new_big, "parquet")


def test_what_the_writer_cannot_write_is_refused_naming_what_to_change():
    with pytest.raises(ValueError, match="unknown format 'csv': use parquet or jsonl"):
        ObjectWriter("csv")
    w = ObjectWriter("parquet")
    with pytest.raises(ValueError, match="does not have the archive's schema"):
        w.write(pa.record_batch({"offset": pa.array([1], pa.int64())}))
    w.write(many_rows(3))
    w.finish()
    with pytest.raises(ValueError, match="finished"):
        w.write(many_rows(3))


def native_reader_built(reader: str) -> None:
    """The native case needs the native reader built (`make install` builds it where it can).
    Asked with MATOS_NATIVE_READER=true already set, so a run that turned it off for the Spark
    workers (`make test-python-reader`) still proves it here, in this process."""
    from matos_dagster.core.archive import native
    if reader == "native" and (why := native.why_not()) is not None:
        missing(f"the native reader is not built here ({why}): apt-get install librdkafka-dev gcc, "
                "then make install")


@pytest.mark.parametrize("reader", ["python", "native"])
def test_a_slice_in_objects_of_many_row_groups_reads_back_as_kafka_holds_it_and_a_retry_writes_the_same_bytes(
        reader, kafka, swift, new_topic, monkeypatch, small_row_groups):
    # Real Kafka and Swift, the task's own code in this process: row groups cut inside the
    # readers' chunks (4 KiB groups, 4 MiB chunks), several objects, every column's edge.
    from helpers import produce, read_kafka

    from matos_dagster.core.offsets.ranges import OffsetRange

    monkeypatch.setenv("MATOS_NATIVE_READER", "true" if reader == "native" else "false")
    native_reader_built(reader)
    topic = new_topic()
    rows = pa.Table.from_batches([many_rows(400)]).to_pylist()
    produce(kafka, topic, [(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in rows], 0)
    with swift.store() as store:
        def archived(directory: str) -> tuple[list[dict], list[bytes]]:
            job = slice_task.SliceJob(slice=OffsetRange(topic, 0, 0, 400), directory=directory,
                                      kafka_conf=kafka.client_config(), group=f"g-{topic}", swift=store.params,
                                      object_bytes=15_000)
            written = slice_task.archive_slice(job)
            return written, [store.get(o["name"]) for o in written]

        first, first_bytes = archived("first")
        retry, retry_bytes = archived("first")  # the same range again, as a retried run writes it
    assert {o["reader"] for o in first} == {reader}
    assert len(first) > 2 and all(len(row_groups(b)) > 2 for b in first_bytes[:-1])
    assert retry_bytes == first_bytes and retry == first
    assert [row for b in first_bytes for row in decode_object(b, "parquet")] == read_kafka(kafka, topic, 0)


@pytest.mark.parametrize("reader", ["python", "native"])
def test_a_record_larger_than_the_tasks_prefetch_bound_is_archived_whole(reader, kafka, swift, new_topic, monkeypatch):
    # The slice consumer prefetches at most 8 MiB (memory per task); Kafka still hands over a
    # record batch larger than that, so a 12 MiB record (max_record_bytes allows 16) is archived.
    from helpers import produce, read_kafka

    from matos_dagster.core.offsets.ranges import OffsetRange

    monkeypatch.setenv("MATOS_NATIVE_READER", "true" if reader == "native" else "false")
    native_reader_built(reader)
    conf = slice_task.consumer_conf({}, "g")
    big = random.Random(7).randbytes(12 * 1024**2)
    assert len(big) > conf["fetch.max.bytes"] and len(big) > conf["queued.max.messages.kbytes"] * 1024
    topic = new_topic(**{"max.message.bytes": str(16 * 1024**2)})
    produce(kafka, topic, [(b"a", b"1", []), (b"big", big, [("h", b"x")]), (b"c", None, [])], 0,
            **{"message.max.bytes": 16 * 1024**2})
    with swift.store() as store:
        job = slice_task.SliceJob(slice=OffsetRange(topic, 0, 0, 3), directory="d", kafka_conf=kafka.client_config(),
                                  group=f"g-{topic}", swift=store.params, object_bytes=8 * 1024**2)
        written = slice_task.archive_slice(job)
        rows = [row for o in written for row in decode_object(store.get(o["name"]), "parquet")]
    assert {o["reader"] for o in written} == {reader} and [o["records"] for o in written] == [1, 1, 1]
    assert rows == read_kafka(kafka, topic, 0) and rows[1]["value"] == big
