"""Records as Arrow rows, Parquet and JSON Lines: lossless and byte-for-byte repeatable."""

import random

import pytest

from helpers import decode_object, table_rows
from matos_dagster import records

ROWS = [
    # offset, ts type, ts, key, value, headers
    (10, 1, 1_700_000_000_123, b"k1", b"v1", [("h", b"1")]),
    (11, 2, 1_700_000_000_124, None, None, []),  # null key and value stay null
    (13, 1, 1_700_000_000_125, b"", b"", None),  # empty, not null; offset 12 is a hole
    (14, 0, -1, b"\x00\xff\xfe", bytes(range(256)), [("dup", b"\xff\x00"), ("dup", None), ("é", b"")]),
]


def batch():
    b = records.Batch("orders", 3)
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
    data = records.encode(batch().table(), fmt)
    assert table_rows(records.decode(data, fmt)) == EXPECTED  # every field of every row
    assert decode_object(data, fmt) == EXPECTED  # and as independent code reads the object


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_the_same_records_always_give_the_same_bytes(fmt):
    assert records.encode(batch().table(), fmt) == records.encode(batch().table(), fmt)


def test_stats_describe_the_batch():
    assert batch().stats() == {
        "records": 4,
        "first_offset": 10,
        "last_offset": 14,
        "min_timestamp": 1_700_000_000_123,
        "max_timestamp": 1_700_000_000_125,
    }


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_an_object_gathered_in_small_chunks_is_byte_identical_to_one_gathered_whole(fmt):
    # The batch turns every chunk_bytes of records into Arrow as it goes (memory); a retried
    # range must still rewrite exactly the bytes of the first attempt, whatever the chunking.
    def gathered(chunk_bytes):
        b = records.Batch("orders", 3, chunk_bytes=chunk_bytes)
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
    assert records.encode(chunked.table(), fmt) == records.encode(whole.table(), fmt)
