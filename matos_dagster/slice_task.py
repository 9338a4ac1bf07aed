"""The Spark task: read one slice of a range straight from Kafka, write it to Swift.

Runs on an executor. It opens its own Kafka consumer and Swift connection, so no record
passes through the driver or a local disk, and it holds at most one object's worth of
records in memory (`object_bytes`), however large the range. It returns only what the
manifest needs to know about the objects it wrote. No Dagster imports.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from matos_dagster import layout, records
from matos_dagster.ranges import OffsetRange
from matos_dagster.store import Store, SwiftParams


CONSUME_BATCH = 5000  # messages per consume call at most


class RecordTooLarge(ValueError):
    pass


class SliceStuck(TimeoutError):
    pass


@dataclass(frozen=True)
class SliceJob:
    slice: OffsetRange
    directory: str  # the range's directory in Swift
    kafka_conf: dict[str, Any] = field(repr=False)  # librdkafka settings, secrets included
    group: str
    swift: SwiftParams
    format: str = "parquet"
    object_bytes: int = 64 * 1024**2
    max_record_bytes: int = 16 * 1024**2
    # How long to wait for the next record before deciding the slice cannot finish. Offsets
    # below the log end offset are either records, holes or a still-open transaction; only
    # the last can keep us waiting, and not forever.
    stall_timeout_s: float = 120.0


def archive_slice(job: SliceJob) -> list[dict]:
    """Write the records of `job.slice` as objects; return one manifest entry per object."""
    s = job.slice
    written: list[dict] = []
    consumer = Consumer(
        {
            **job.kafka_conf,
            "group.id": job.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            # Offsets deleted under us must fail the task, never silently jump ahead.
            "auto.offset.reset": "error",
            # EOF events tell us the log end (or last stable offset) was reached, which is how
            # a slice that ends in transaction markers or aborted records finishes.
            "enable.partition.eof": True,
            # Prefetch is bounded so a task's memory stays near one object.
            "queued.max.messages.kbytes": 32768,
            "fetch.max.bytes": 32 * 1024**2,
        }
    )
    store = Store(job.swift)
    # The cyclic GC is paused while the slice runs. The loop makes no reference cycles, but
    # confluent-kafka's Messages are GC-tracked: each consume() brings 5,000 that outlive young
    # collections while they are read, which keeps triggering full collections, and every full
    # one walks the batch's lists (one pointer per key, value, offset, ...). Measured: 35-45%
    # of the task's CPU with 100-byte records. Restored (if it was on) when the slice ends.
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        consumer.assign([TopicPartition(s.topic, s.partition, s.start)])
        batch = records.Batch(s.topic, s.partition)
        last_progress = time.monotonic()
        done = False
        next_offset = s.start
        while not done:
            msgs = consumer.consume(num_messages=consume_batch(s.end - next_offset), timeout=1.0)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # Nothing more is readable now; if that point is past our end, the
                        # offsets left were markers or aborted records: we are done.
                        if m.offset() >= s.end:
                            done = True
                            break
                        continue
                    raise KafkaException(err)
                offset = m.offset()
                if offset >= s.end:
                    done = True
                    break
                next_offset = offset + 1
                key, value, headers = m.key(), m.value(), m.headers()
                # `_size`, inlined: this loop runs once per record. Header keys are str: their
                # UTF-8 bytes count (isascii is O(1), so ASCII keys are not encoded).
                size = (len(key) if key else 0) + (len(value) if value else 0)
                if headers:
                    for hk, hv in headers:
                        size += (len(hk) if hk.isascii() else len(hk.encode())) + (len(hv) if hv else 0)
                if size > job.max_record_bytes:
                    raise RecordTooLarge(
                        f"record {s.topic}/{s.partition}@{offset} is {size} bytes, above the topic's "
                        f"max_record_bytes ({job.max_record_bytes}); raise it in the topics file to archive it"
                    )
                if batch.nbytes and batch.nbytes + size > job.object_bytes:
                    written.append(_flush(batch, job, store))
                    batch = records.Batch(s.topic, s.partition)
                ts_type, ts = m.timestamp()
                batch.add(offset, ts_type, ts, key, value, headers, size)
            if msgs:
                last_progress = time.monotonic()
            if not done:
                position = consumer.position([TopicPartition(s.topic, s.partition)])[0].offset
                if position >= s.end:
                    done = True
                elif time.monotonic() - last_progress > job.stall_timeout_s:
                    raise SliceStuck(
                        f"no record of {s.topic}/{s.partition} arrived for {job.stall_timeout_s:.0f}s at "
                        f"offset {max(position, s.start)} (slice ends at {s.end}): an open transaction "
                        "or an unreachable broker keeps the slice from finishing"
                    )
        if len(batch):
            written.append(_flush(batch, job, store))
        return written
    finally:
        if gc_enabled:
            gc.enable()
        consumer.close()
        store.close()


def consume_batch(remaining: int) -> int:
    """Messages to ask `consume` for: at most the offsets the slice still needs.

    `consume(n, timeout)` returns only when it has n messages or the timeout ends, so asking
    for more than the log holds past our position waits the whole timeout (1 s per slice whose
    end is near the log end, a third of a small range's run). Markers or aborted records among
    the remaining offsets can still leave it short: then it waits, as before, and ends by position.
    """
    return max(1, min(CONSUME_BATCH, remaining))


def _flush(batch: records.Batch, job: SliceJob, store: Store) -> dict:
    stats = batch.stats()
    data = records.encode(batch.table(), job.format)
    name = layout.object_name(job.directory, stats["first_offset"], job.format)
    md5 = store.put(name, data)
    return {"name": name, "bytes": len(data), "md5": md5, "record_bytes": batch.nbytes,
            "largest_record_bytes": batch.largest, **stats}


def _size(key: bytes | None, value: bytes | None, headers) -> int:
    """A record's bytes: key, value, header keys (UTF-8) and header values."""
    n = (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        for hk, hv in headers:
            n += len(hk.encode()) + (len(hv) if hv else 0)
    return n
