"""The Spark task: read one slice of a range straight from Kafka, write it to Swift.

Runs on an executor. It opens its own Kafka consumer and Swift connection, so no record
passes through the driver or a local disk, and it holds at most one object's worth of
records in memory (`object_bytes`), however large the range. It returns only what the
manifest needs to know about the objects it wrote. No Dagster imports.
"""

from __future__ import annotations

import gc
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from matos_dagster.core.archive import native
from matos_dagster.core.archive.leaving import erased_entries, leave_out
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.objects import row_sizes
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.spark import malloc
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store, SwiftParams

CONSUME_BATCH = 5000  # messages per consume call at most
PREFETCH_BACKOFF_MS = 10  # librdkafka's fetch.queue.backoff.ms (consumer_conf says why)
QUEUED_MESSAGES = 10_000  # librdkafka's queued.min.messages: the prefetch bound in messages
READ_AHEAD = 0.25  # of object_bytes read into the next object while the previous one uploads (Uploads)

log = logging.getLogger(__name__)


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
    # The topic's typed columns (core/schemas/typed.py `Typing`), None for bytes only. Its
    # registry password, if any, is in no repr.
    typing: Any = None
    # What the topic's erasure ledger leaves out of this partition (core/erase/ledger.py `Leave`:
    # keyed hashes and offsets, the erasure key in no repr); None when it says nothing here.
    leave: Any = None
    # Each object's key index (core/erase/key_index.py `Indexer`, the key in no repr); None: no index.
    index: Any = None


_said: set[str] = set()  # why this process reads with the Python reader, once said


def archive_slice(job: SliceJob) -> list[dict]:
    """Write the records of `job.slice` as objects; return one manifest entry per object.

    Read by the native reader (matos_dagster/core/archive/native: librdkafka straight into Arrow) when it is
    built and not turned off (MATOS_NATIVE_READER=false), else by the Python loop; both write the
    same bytes. Each entry says which one read it (`reader`), and the choice is logged.
    A record above max_record_bytes, or (a typed topic with decode_strict) a record that does
    not decode, gives one entry, `refused`, saying which and why (`kind`: the exception's name):
    not raised, since Spark would only retry what cannot change, and its error would reach the
    run as a Python worker's traceback.
    """
    refused: tuple[type[Exception], ...] = (RecordTooLarge,)
    if job.typing is not None:
        from matos_dagster.core.schemas.typed import Undecodable

        refused = (RecordTooLarge, Undecodable)
    why_not = native.why_not(job.kafka_conf)
    erased: list[int] = []
    try:
        if why_not is None:
            log.info("slice %s: native reader", job.slice)
            return [{**o, "reader": "native"} for o in _archive_native(job, erased)] + erased_entries(erased)
        # Said once per worker process, not per task: the run's log names the reader of each range.
        (log.debug if why_not in _said else log.warning)("slice %s: Python reader (%s)", job.slice, why_not)
        _said.add(why_not)
        return [{**o, "reader": "python"} for o in _archive_python(job, erased)] + erased_entries(erased)
    except refused as e:
        return [{"refused": str(e), "kind": type(e).__name__}]


def consumer_conf(kafka_conf: dict[str, Any], group: str) -> dict[str, Any]:
    """The slice consumer's librdkafka settings (both readers, and the bench's read limit)."""
    return {
        **kafka_conf,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        # Offsets deleted under us must fail the task, never silently jump ahead.
        "auto.offset.reset": "error",
        # EOF events tell us the log end (or last stable offset) was reached, which is how
        # a slice that ends in transaction markers or aborted records finishes.
        "enable.partition.eof": True,
        # Prefetch is bounded so a task's memory stays near one object. 8 MiB, not 32: a task's
        # peak RSS over a 64 MiB object fell from 2.9-3.1x to 2.2x of it, at the same CPU
        # (matos_dev/bench/profile.py, 200,000 x 1 KiB).
        "queued.max.messages.kbytes": 8192,
        "fetch.max.bytes": 8 * 1024**2,
        # ...and in messages: librdkafka keeps each queued message in its own structures, a few
        # hundred bytes apiece, so 8 MiB of 100-byte records held far more than 8 MiB. With its
        # default (100,000) a W2 task (100 B records, one 64 MiB object) peaked at 219-255 MiB
        # under Spark; with 10,000 at 174-178 MiB, at the same CPU. 1 KiB records reach the
        # byte bound first, as before.
        "queued.min.messages": QUEUED_MESSAGES,
        # When the queue reaches that bound, librdkafka postpones the partition's next fetch by
        # this long (1,000 ms by default since librdkafka 2.4): a task then read at most 8 MiB a
        # second and waited the rest (W1's archive 44.8 s instead of 12.9, both readers). The
        # queue drains in about 0.1 s at a task's speed; 10 ms refills it in time, and costs the
        # fetcher thread a wake-up per 10 ms only while the queue is full (0 would spin).
        "fetch.queue.backoff.ms": PREFETCH_BACKOFF_MS,
    }


def _new_batch(job: SliceJob) -> Batch:
    # With the format, every 4 MiB chunk is encoded as it is sealed and released: the task
    # holds one chunk of rows and the encoded object, not the object's rows (memory).
    return Batch(job.slice.topic, job.slice.partition, fmt=job.format, typing=job.typing,
                 key_index=None if job.index is None else job.index.gather())


def _too_large(job: SliceJob, offset: int, size: int) -> RecordTooLarge:
    s = job.slice
    return RecordTooLarge(
        f"record {s.topic}/{s.partition}@{offset} is {size} bytes, above the topic's "
        f"max_record_bytes ({job.max_record_bytes}); raise it in the topics file to archive it"
    )


def _stuck(job: SliceJob, position: int) -> SliceStuck:
    s = job.slice
    return SliceStuck(
        f"no record of {s.topic}/{s.partition} arrived for {job.stall_timeout_s:.0f}s at "
        f"offset {max(position, s.start)} (slice ends at {s.end}): an open transaction "
        "or an unreachable broker keeps the slice from finishing"
    )


def _archive_native(job: SliceJob, erased: list[int]) -> list[dict]:
    """The slice read by the native reader: Arrow chunks, cut where the Python loop cuts them."""
    s = job.slice
    try:
        reader = native.SliceReader(consumer_conf(job.kafka_conf, job.group), s.topic, s.partition, s.start, s.end,
                                    job.max_record_bytes, job.stall_timeout_s, SCHEMA)
    except native.NativeError as e:
        raise KafkaException(KafkaError(e.err_code, str(e))) from None
    uploads = Uploads(job, Store(job.swift))
    try:
        batch = _new_batch(job)
        while True:
            try:
                code, chunk, object_end = reader.next(job.object_bytes, batch.chunk_bytes)
            except native.NativeError as e:
                raise _native_error(job, e) from None
            if chunk is not None:
                rows = leave_out(job.leave, chunk.batch, erased)
                if rows.num_rows:
                    batch.add_chunk(rows, chunk.nbytes if rows is chunk.batch else int(row_sizes(rows).sum()))
                del chunk, rows
                batch = _past_cuts(job, uploads, batch)
                uploads.pace(batch)
            if object_end and len(batch):
                _close(job, uploads, batch)
                batch = _new_batch(job)
            if code == native.SR_DONE:
                break
        if len(batch):
            _close(job, uploads, batch)
        return uploads.finish()
    finally:
        reader.close()
        uploads.close()


def _native_error(job: SliceJob, e: "native.NativeError") -> Exception:
    s = job.slice
    if e.code == native.SR_TOO_LARGE:
        return _too_large(job, e.offset, e.size)
    if e.code == native.SR_STUCK:
        return _stuck(job, e.position)
    if e.code == native.SR_KAFKA_ERROR:
        return KafkaException(KafkaError(e.err_code, str(e)))
    if e.code == native.SR_NO_MEMORY:
        return MemoryError(f"the native reader ran out of memory reading {s.topic}/{s.partition}")
    return ValueError(f"record {s.topic}/{s.partition}@{e.offset}: {e}; the archive cannot store it")


def _archive_python(job: SliceJob, erased: list[int]) -> list[dict]:
    s = job.slice
    # Else a worker keeps up to an object of freed heap from task to task (malloc.py says why).
    malloc.fix_mmap_threshold()
    consumer = Consumer(consumer_conf(job.kafka_conf, job.group))
    uploads = Uploads(job, Store(job.swift))
    # The cyclic GC is paused while the slice runs. The loop makes no reference cycles, but
    # confluent-kafka's Messages are GC-tracked: each consume() brings 5,000 that outlive young
    # collections while they are read, which keeps triggering full collections, and every full
    # one walks the batch's lists (one pointer per key, value, offset, ...). Measured: 35-45%
    # of the task's CPU with 100-byte records. Restored (if it was on) when the slice ends.
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        consumer.assign([TopicPartition(s.topic, s.partition, s.start)])
        batch = _new_batch(job)
        object_nbytes = 0  # since the last object the bytes ended (a typed cut ends one too, not this count)
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
                if job.leave is not None and job.leave.hit(key, offset):
                    erased.append(offset)  # an erased record (core/erase/ledger.py): left out, counted
                    continue
                # `_size`, inlined: this loop runs once per record. Header keys are str: their
                # UTF-8 bytes count (isascii is O(1), so ASCII keys are not encoded).
                size = (len(key) if key else 0) + (len(value) if value else 0)
                if headers:
                    for hk, hv in headers:
                        size += (len(hk) if hk.isascii() else len(hk.encode())) + (len(hv) if hv else 0)
                if size > job.max_record_bytes:
                    raise _too_large(job, offset, size)
                if object_nbytes and object_nbytes + size > job.object_bytes:
                    _close(job, uploads, batch)
                    batch, object_nbytes = _new_batch(job), 0
                object_nbytes += size
                ts_type, ts = m.timestamp()
                batch.add(offset, ts_type, ts, key, value, headers, size)
                if batch.overflow is not None:
                    batch = _past_cuts(job, uploads, batch)
            if msgs:
                last_progress = time.monotonic()
                uploads.pace(batch)
            if not done:
                position = consumer.position([TopicPartition(s.topic, s.partition)])[0].offset
                if position >= s.end:
                    done = True
                elif time.monotonic() - last_progress > job.stall_timeout_s:
                    raise _stuck(job, position)
        if len(batch):
            _close(job, uploads, batch)
        return uploads.finish()
    finally:
        if gc_enabled:
            gc.enable()
        consumer.close()
        uploads.close()


def _past_cuts(job: SliceJob, uploads: "Uploads", batch: Batch) -> Batch:
    """The batch to go on with: `batch` itself, or, where a typed cut ended its object (a record
    whose writer's type has no union with the object's: core/schemas/typed.py), a new one holding
    the records from the cut on, the objects before it put."""
    while batch.overflow is not None:
        rest, batch.overflow = batch.overflow, None
        uploads.put(batch)
        batch = _new_batch(job)
        batch.add_chunk(rest, int(row_sizes(rest).sum()))
    return batch


def _close(job: SliceJob, uploads: "Uploads", batch: Batch) -> None:
    """Put the batch's object, and the objects its last records make where typed cuts end it.

    Objects end where the records' bytes reach object_bytes, counted as both readers count them
    (from the last such end, whatever typed cuts came between), so both write the same objects."""
    batch.seal()  # its last records typed: they may end its object too
    uploads.put(_past_cuts(job, uploads, batch))


def consume_batch(remaining: int) -> int:
    """Messages to ask `consume` for: at most the offsets the slice still needs.

    `consume(n, timeout)` returns only when it has n messages or the timeout ends, so asking
    for more than the log holds past our position waits the whole timeout (1 s per slice whose
    end is near the log end, a third of a small range's run). Markers or aborted records among
    the remaining offsets can still leave it short: then it waits, as before, and ends by position.
    """
    return max(1, min(CONSUME_BATCH, remaining))


class Uploads:
    """A task's objects, each PUT from a thread while the task reads the next one.

    Why: a task otherwise waits for Swift's answer to each PUT (md5, the proxy's and the object
    server's work, the object server's fsync) with nothing to do: 6.6-9.8 of 15-19 task-seconds
    of a W1 archive. Overlapped, W1's archive ran at 85,158-108,694 records/s against
    77,998-98,199 (4 alternated runs each, load 1-3). Bounded: one object uploads at a time, in
    order, and the reading waits for it once the next object holds READ_AHEAD of `object_bytes`
    (`pace`); the object is finished (its last row group and footer encoded) by the task's own
    thread, since memory allocated in the upload thread stays in that thread's malloc arena (a
    W2 task +31 MiB so, +15 MiB otherwise). The bytes do not change: objects end at the same
    records whenever their uploads end. An upload's error reaches the task at its next `put`,
    `pace` or `finish` and fails it as a synchronous PUT would (Spark retries the task, which
    writes the same objects again under the same names).
    """

    def __init__(self, job: SliceJob, store: Store):
        self._job, self._store = job, store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="upload")
        self._pending: Future | None = None
        self._written: list[dict] = []

    def put(self, batch: Batch) -> None:
        """Once the previous upload has ended, finish this object here and PUT it from the thread."""
        self._wait()
        # Finished in this thread, not the upload thread: what that thread allocates stays in its
        # own malloc arena, and encoding grows buffers (a W2 task peaked 31 MiB higher so).
        name, data, entry = _finish(batch, self._job)
        self._pending = self._pool.submit(_upload, self._store, name, data, entry)

    def pace(self, batch: Batch) -> None:
        """Wait for the upload in flight once `batch` (the next object) holds READ_AHEAD of an object."""
        if self._pending is not None and batch.nbytes >= READ_AHEAD * self._job.object_bytes:
            self._wait()

    def finish(self) -> list[dict]:
        """Every object's manifest entry, in offset order, once the last upload has ended."""
        self._wait()
        return self._written

    def close(self) -> None:
        """Wait for an upload in flight (never left running against a closed connection), then close."""
        try:
            # Waits for the upload in flight; its error, if any, goes with the error that ended the task.
            self._pool.shutdown(wait=True)
        finally:
            self._store.close()

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._written.append(pending.result())


def _flush(batch: Batch, job: SliceJob, store: Store) -> dict:
    """Write the batch's object to Swift; its manifest entry."""
    return _upload(store, *_finish(batch, job))


def _finish(batch: Batch, job: SliceJob) -> tuple[str, bytes, dict]:
    """The batch's object: its name, bytes and manifest entry (the md5 as the writer hashed it)."""
    stats = batch.stats()
    writer = batch.writer(job.format)
    data = writer.finish()
    name = layout.object_name(job.directory, stats["first_offset"], job.format)
    typed, index = batch.typed(), batch.key_index()
    return name, data, {"name": name, "bytes": len(data), "md5": writer.md5, "record_bytes": batch.nbytes,
                        "largest_record_bytes": batch.largest, **stats, **({"typed": typed} if typed else {}),
                        **({"key_index": index} if index else {})}


def _upload(store: Store, name: str, data: bytes, entry: dict) -> dict:
    store.put(name, data, md5=entry["md5"])
    return entry


def _size(key: bytes | None, value: bytes | None, headers) -> int:
    """A record's bytes: key, value, header keys (UTF-8) and header values."""
    n = (len(key) if key else 0) + (len(value) if value else 0)
    if headers:
        for hk, hv in headers:
            n += len(hk.encode()) + (len(hv) if hv else 0)
    return n
