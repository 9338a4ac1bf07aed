"""Records as Arrow rows, Parquet and JSON Lines: lossless and byte-for-byte repeatable."""

import pytest

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


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_every_field_survives_a_round_trip(fmt):
    table = records.decode(records.encode(batch().table(), fmt), fmt)
    rows = table.to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 13, 14]
    assert {r["topic"] for r in rows} == {"orders"} and {r["partition"] for r in rows} == {3}
    assert [r["key"] for r in rows] == [b"k1", None, b"", b"\x00\xff\xfe"]
    assert [r["value"] for r in rows] == [b"v1", None, b"", bytes(range(256))]
    assert [r["timestamp_type"] for r in rows] == ["CreateTime", "LogAppendTime", "CreateTime", "NotAvailable"]
    assert rows[0]["timestamp"].timestamp() * 1000 == 1_700_000_000_123
    assert rows[3]["timestamp"] is None
    assert rows[3]["headers"] == [
        {"key": "dup", "value": b"\xff\x00"},
        {"key": "dup", "value": None},
        {"key": "é", "value": b""},
    ]
    assert rows[1]["headers"] == [] and rows[2]["headers"] == []


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
