"""Records and archives the tests share: awkward records, stamped records, topics archived in ranges.

Kept here rather than in a test module, so any test, in any folder, can import them.
"""

from __future__ import annotations

import time
import uuid

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.topics import TopicConfig


def awkward_rows(n: int, partitions: int):
    """Binary, empty and null keys and values; several, repeated and non-UTF-8 headers."""
    for i in range(n):
        key = [None, b"", bytes([i % 256, 0, 255]), f"k{i}".encode()][i % 4]
        value = [bytes(range(256)) * (i % 3), None, b"", f"v{i}".encode() * 10][i % 4]
        headers = [[], [("h", b"\xff\xfe\x00")], [("dup", b"1"), ("dup", b"2"), ("none", None)]][i % 3]
        yield key, value, headers, i % partitions


# An hour ago, on a whole second: older stamps would fall to the broker's retention (7 days).
BASE_MS = (int(time.time()) - 3600) * 1000


def config(topic: str, **kw) -> TopicConfig:
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", **kw)


def rows(table) -> list[dict]:
    """Arrow rows as read_kafka gives them: timestamps in epoch milliseconds."""
    out = table.to_pylist()
    for r in out:
        ts = r["timestamp"]
        r["timestamp"] = None if ts is None else round(ts.timestamp() * 1000)
    return out


def archive_in_ranges(kafka, store, spark, cfg, partitions: int, size: int) -> None:
    for p in range(partitions):
        high = kafka.watermarks(cfg.name, [p])[p][1]
        for lo in range(0, high, size):
            archive_range(OffsetRange(cfg.name, p, lo, min(lo + size, high)), cfg, kafka, store, spark)


def stamped(kafka, topic: str, n: int, partitions: int) -> None:
    """Record i stamped BASE_MS + i seconds (CreateTime), spread over the partitions in turn."""
    p = kafka.producer()
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("i", str(i).encode())],
                  partition=i % partitions, timestamp=BASE_MS + i * 1000)
    assert p.flush(30) == 0


def fields(rows: list[dict]) -> list[tuple]:
    """What a restore must keep of a record (its offset and topic change)."""
    return [(r["key"], r["value"], r["headers"], r["timestamp"], r["timestamp_type"]) for r in rows]


def delete_topic(kafka, topic: str) -> None:
    """Delete the topic and return once the broker no longer lists it (deletion is asynchronous)."""
    admin = kafka.admin()  # must outlive the future
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while topic in kafka.admin().list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed 60 s after its deletion"
        time.sleep(0.2)
