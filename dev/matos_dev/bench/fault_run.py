"""What both fault comparisons use (the Iceberg sink's, peer.py, and the archive's,
archive_faults.py): a producer at a steady rate, the source topic read back, and the comparison
of what a run wrote with it (lost, duplicated, mismatched records)."""

from __future__ import annotations

import time
import uuid


def compare(source: dict[tuple[int, int], bytes], written: list[tuple[int, int, bytes]], examples: int = 5) -> dict:
    """Every source record against the rows written: lost, duplicated (extra copies), mismatched.

    `source`: (partition, offset) -> value as Kafka holds it; `written`: (partition, offset, value)
    per row of the table. A row whose (partition, offset) is not in the source counts as mismatched.
    """
    seen: dict[tuple[int, int], int] = {}
    mismatched, dup_examples, bad_examples = 0, [], []
    for p, o, v in written:
        k = (p, o)
        seen[k] = seen.get(k, 0) + 1
        if seen[k] == 2 and len(dup_examples) < examples:
            dup_examples.append({"partition": p, "offset": o})
        if source.get(k) != v:
            mismatched += 1
            if len(bad_examples) < examples:
                bad_examples.append({"partition": p, "offset": o, "in_source": k in source})
    lost = [k for k in source if k not in seen]
    return {
        "source": len(source), "rows": len(written), "lost": len(lost),
        "duplicated": sum(n - 1 for n in seen.values() if n > 1), "mismatched": mismatched,
        "lost_examples": [{"partition": p, "offset": o} for p, o in sorted(lost)[:examples]],
        "duplicated_examples": dup_examples, "mismatched_examples": bad_examples,
    }


def read_source(stack, topic: str) -> dict[tuple[int, int], bytes]:
    """Every record of `topic` as the broker holds it now: (partition, offset) -> value."""
    from confluent_kafka import Consumer, TopicPartition

    out: dict[tuple[int, int], bytes] = {}
    for r in stack.ranges(topic):
        c = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"peer-read-{uuid.uuid4().hex[:6]}",
                      "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            c.assign([TopicPartition(topic, r.partition, r.start)])
            while True:
                msgs = c.consume(5000, 5.0)
                for m in msgs:
                    if m.error() is None:
                        out[(m.partition(), m.offset())] = m.value()
                if c.position([TopicPartition(topic, r.partition)])[0].offset >= r.end:
                    break
        finally:
            c.close()
    return out


class SteadyProducer:
    """Records at `rate` per second into `topic` from a thread of its own, round-robin over the
    partitions, until stopped; a broker stop only delays them (the producer retries)."""

    def __init__(self, stack, topic: str, rate: float, value_bytes: int = 100, partitions: int = 4):
        import os
        import threading

        self._stack, self._topic, self._rate = stack, topic, rate
        self._value_bytes, self._partitions = value_bytes, partitions
        self._pool = os.urandom(value_bytes + 4096)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)
        self.sent = 0
        self.started = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        self.started = time.monotonic()  # producing time counts from here (`elapsed`, `seconds`)
        self._thread.start()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def stop(self) -> int:
        """Stop producing and wait until every record is delivered; the number sent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        return self.sent

    def _run(self) -> None:
        producer = self._stack.kafka().producer(**{"linger.ms": 5})
        t0 = self.started
        i = 0
        while not self._stop.is_set():
            while i < int((time.monotonic() - t0) * self._rate):
                try:
                    producer.produce(self._topic, value=self._pool[i % 4096: i % 4096 + self._value_bytes],
                                     partition=i % self._partitions)
                    i += 1
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            time.sleep(0.01)
        self.seconds = time.monotonic() - t0
        while producer.flush(10):
            pass  # the broker may be down for a while: the producer retries
        self.sent = i
