"""Kafka's side of the audit: its committed records, read on the driver, and the comparison.

An audit that could not compare what it set out to compare is not an audit that passed:
`Comparison.stopped` becomes an `uncompared` problem in the report (see objects.py).
No Dagster imports.
"""

from __future__ import annotations

import bisect
import time
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from matos_dagster.core.kafka.log import LIBRDKAFKA_LOG
from matos_dagster.core.records.schema import TIMESTAMP_TYPES
from matos_dagster.core.records.unify import raw
from matos_dagster.core.verify.coverage import differences, sample_positions


class Unreadable(RuntimeError):
    """Kafka cannot show these records now (deleted meanwhile, open transaction, no answer)."""


class KafkaRecords:
    """Kafka's committed records of one partition, as archive rows (read_committed)."""

    def __init__(self, conf: dict[str, Any], timeout_s: float = 15.0):
        self.timeout_s = timeout_s
        self.consumer = Consumer({
            **conf,
            "group.id": "matos-verify",  # assign() only, never commits: the group stays empty
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "error",  # records deleted under us must not be skipped silently
            "enable.partition.eof": True,
            # Each sample is a new fetch position: answer it now, not after the default 500 ms
            # the broker waits for more data at the end of a log.
            "fetch.wait.max.ms": 20,
            "logger": LIBRDKAFKA_LOG,
        })
        self.conf = conf
        self._uncommitted: Consumer | None = None  # made when needed: the log's true end (_hidden)

    def close(self) -> None:
        self.consumer.close()
        if self._uncommitted is not None:
            self._uncommitted.close()

    def rows(self, topic: str, partition: int, start: int, end: int) -> Iterator[dict]:
        """Every readable record of `[start, end)`, in offset order."""
        self.consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self.timeout_s
        position = start  # the next offset this read is waiting for
        while True:
            # poll returns with the first record; consume(timeout=0) then takes what is
            # already fetched (consume alone would wait for all 1000, or the timeout).
            first = self.consumer.poll(1.0)
            msgs = [first, *self.consumer.consume(num_messages=999, timeout=0)] if first is not None else []
            if msgs:
                deadline = time.monotonic() + self.timeout_s
            else:
                # A read_committed fetch from past the last stable offset gets nothing, not even an
                # end-of-partition event: without this question it would wait out the timeout and
                # blame Kafka's silence for what an open transaction hides.
                stable = self._last_stable(topic, partition)
                if stable is not None and position >= stable:
                    raise self._hidden(topic, partition, stable, end)
                if time.monotonic() > deadline:
                    raise Unreadable(f"Kafka sent no record of {topic}/{partition} within {self.timeout_s:.0f}s")
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise Unreadable(f"Kafka could not read {topic}/{partition}: {err.str()}")
                    if m.offset() >= end:
                        return
                    if m.offset() < start:
                        continue  # the end of an earlier assignment's fetch
                    # read_committed readers end at the last stable offset, and it is below `end`.
                    raise self._hidden(topic, partition, m.offset(), end)
                if m.offset() < start:
                    continue  # fetched for an earlier assignment
                if m.offset() >= end:
                    return
                position = m.offset() + 1
                yield kafka_row(m)

    def _last_stable(self, topic: str, partition: int) -> int | None:
        """The partition's last stable offset (a read_committed consumer's high watermark), None
        if Kafka does not say now."""
        try:
            # Asked at each empty poll: briefly, so a silent broker still ends the read near the timeout.
            return self.consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=min(5.0, self.timeout_s), cached=False)[1]
        except KafkaException:
            return None

    def _hidden(self, topic: str, partition: int, stable: int, end: int) -> Unreadable:
        """Why read_committed readers see nothing of `[stable, end)`: a transaction still open at
        `stable` (records follow it in the log), or a log that simply ends there."""
        try:
            if self._uncommitted is None:
                self._uncommitted = Consumer({**self.conf, "group.id": "matos-verify",
                                              "isolation.level": "read_uncommitted"})
            log_end = self._uncommitted.get_watermark_offsets(TopicPartition(topic, partition),
                                                              timeout=self.timeout_s, cached=False)[1]
        except KafkaException:
            log_end = None
        if log_end is not None and log_end <= stable:
            return Unreadable(f"{topic}/{partition}: Kafka's log ends at offset {log_end}, before {end}")
        return Unreadable(f"{topic}/{partition}: a transaction open at offset {stable} hides the records up to {end}")

    def first_at(self, topic: str, partition: int, offset: int, end: int) -> dict | None:
        """Kafka's first readable record at or after `offset`, None if none before `end`."""
        return next(self.rows(topic, partition, offset, end), None)


def kafka_row(m) -> dict:
    ts_type, ts = m.timestamp()
    return {
        "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
        "timestamp": ts if ts_type else None,
        "timestamp_type": TIMESTAMP_TYPES.get(ts_type, "NotAvailable"),
        "key": m.key(), "value": m.value(),
        "headers": [{"key": k, "value": v} for k, v in (m.headers() or [])],
    }


def archive_rows(table, lo: int = 0, hi: int | None = None) -> list[dict]:
    """Rows `[lo, hi)` of a decoded object (its raw columns: Kafka's), timestamps as Kafka's epoch milliseconds."""
    part = raw(table).slice(lo, (hi if hi is not None else table.num_rows) - lo)
    # Integers straight from Arrow's milliseconds: a float of seconds would lose the last one.
    i = part.schema.get_field_index("timestamp")
    return part.set_column(i, "timestamp", pc.cast(part["timestamp"], pa.int64())).to_pylist()


class Comparison:
    """Archived records of one range against Kafka's, fed one decoded object at a time.

    Sampling: for each sample position, Kafka's first readable record at or after it must be
    the archive's first record at or after it (so a record missing from either side shows).
    Full: both sides merged by offset.
    """

    def __init__(self, reader: KafkaRecords, topic: str, partition: int, lo: int, end: int, sample: int | None,
                 erased: Iterable[int] = ()):
        self.reader, self.topic, self.partition, self.lo, self.end = reader, topic, partition, lo, end
        # Offsets an erasure removed (the manifest's `erased`): in Kafka, deliberately not in the
        # archive. Kafka's records there are skipped, neither compared nor missing.
        self.erased = frozenset(erased)
        self.skipped = 0
        self.full = sample is None
        self.pending = [] if self.full else sample_positions(lo, end, sample)
        self.stream = self._kafka_stream() if self.full else None
        self.next_k: dict | None = None
        self.started = False  # the first Kafka record has been asked for
        self.compared = 0
        self.diffs: list[str] = []
        self.stopped: str | None = None  # why comparing stopped early

    def _kafka_stream(self, lo: int | None = None) -> Iterator[dict]:
        for k in self.reader.rows(self.topic, self.partition, self.lo if lo is None else lo, self.end):
            if k["offset"] in self.erased:
                self.skipped += 1
                continue
            yield k

    def _first_at(self, offset: int) -> dict | None:
        """Kafka's first readable record at or after `offset` that no erasure removed, None if none before the end."""
        if not self.erased:
            return self.reader.first_at(self.topic, self.partition, offset, self.end)
        return next(self._kafka_stream(offset), None)

    def _next_kafka(self) -> dict | None:
        self.started = True
        return next(self.stream, None)

    def feed(self, name: str, table, offsets: list[int]) -> None:
        if self.stopped or not offsets:
            return
        try:
            if self.full:
                self._merge(name, table, offsets)
            else:
                while self.pending and self.pending[0] <= offsets[-1]:
                    p = self.pending.pop(0)
                    i = bisect.bisect_left(offsets, p)
                    a = archive_rows(table, i, i + 1)[0] if offsets[i] < self.end else None
                    self._one(name, a, self._first_at(p))
        except Unreadable as e:
            self.stopped = str(e)

    def finish(self) -> None:
        try:
            if self.full:
                if not self.started:
                    self.next_k = self._next_kafka()
                while self.next_k is not None and not self.stopped:
                    self._one(None, None, self.next_k)
                    self.next_k = self._next_kafka()
            else:
                for p in self.pending:
                    self._one(None, None, self._first_at(p))
        except Unreadable as e:
            self.stopped = self.stopped or str(e)

    def _merge(self, name: str, table, offsets: list[int]) -> None:
        first = bisect.bisect_left(offsets, self.lo)
        if first >= len(offsets):
            return
        if not self.started:
            self.next_k = self._next_kafka()
        for a in archive_rows(table, first):
            while self.next_k is not None and self.next_k["offset"] < a["offset"]:
                self._one(name, None, self.next_k)
                self.next_k = self._next_kafka()
            if self.next_k is not None and self.next_k["offset"] == a["offset"]:
                self._one(name, a, self.next_k)
                self.next_k = self._next_kafka()
            else:
                self._one(name, a, None)

    def _one(self, name: str | None, a: dict | None, k: dict | None) -> None:
        if a is None and k is None:
            return
        self.compared += 1
        where = f" (object {name})" if name else ""
        if a is None:
            self.diffs.append(f"Kafka's record at offset {k['offset']} is not in the archive{where}")
        elif k is None or k["offset"] != a["offset"]:
            self.diffs.append(f"archived record at offset {a['offset']} is not in Kafka{where}")
        else:
            bad = differences(a, k)
            if bad:
                self.diffs.append(f"record at offset {a['offset']} differs in {', '.join(bad)}{where}")
