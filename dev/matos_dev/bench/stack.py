"""The bench's own Kafka broker and Swift, on free ports in a temporary folder, and its workloads.

Only the download cache (Kafka's jars, Swift's venv) is shared with `make run` and the tests.
Both servers are stopped by the PIDs recorded at start, whatever happens in between.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import NewTopic

from matos_dagster.core import settings
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift.store import Store, SwiftParams
from matos_dagster.resources import KafkaResource
from matos_dev.stack.kafka import KafkaServer
from matos_dev.stack.process import free_port
from matos_dev.stack.swift import SwiftServer

# Records of the two workloads: full, and --quick.
SETTINGS = {
    "full": {"W1": 1_000_000, "W2": 5_000_000},
    "quick": {"W1": 100_000, "W2": 200_000},
}

def cache_dir() -> Path:
    devstack = Path(os.environ.get("MATOS_DEVSTACK_DIR", settings.PROJECT_ROOT / ".devstack"))
    return Path(os.environ.get("MATOS_DEVSTACK_CACHE") or devstack / "cache")


@dataclass(frozen=True)
class Workload:
    """Records shaped as the load job makes them: 16-byte keys, one header, random values.

    The values are not the load job's, though: it slices every value out of one small random
    block, which Parquet's zstd compresses about 300 times, so the archive would write almost
    nothing to Swift. Here each value is a different window of a large random pool, as
    incompressible as encrypted or already-compressed payloads: the worst case for the writes.
    """

    name: str
    records: int
    value_bytes: int
    partitions: int = 4
    key_pattern: str = "k{i:015d}"  # 16 bytes for i < 10**15
    headers: dict = field(default_factory=lambda: {"source": "bench"})

    @property
    def record_bytes(self) -> int:
        """Bytes of one record as the archive counts them (key + value + headers)."""
        return (len(self.key_pattern.format(i=0, p=0)) + self.value_bytes
                + sum(len(k) + len(v) for k, v in self.headers.items()))

    def load_config(self, topic: str) -> dict:
        return {
            "topic": topic,
            "count": self.records,
            "value_bytes": self.value_bytes,
            "key_pattern": self.key_pattern,
            "headers": dict(self.headers),
            "partitions": list(range(self.partitions)),
        }


POOL_BYTES = 64 * 1024**2  # far beyond zstd's window: no value repeats within an object's page


def produce_records(kafka: KafkaResource, topic: str, records: Iterable[tuple[bytes, bytes, list, int]]) -> float:
    """Produce (key, value, headers, partition) records with the load job's producer settings, all
    delivered or an error; the seconds it took."""
    producer = kafka.producer(**{"linger.ms": 20, "batch.size": 1_000_000, "compression.type": "lz4"})
    failures: list = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    t0 = time.monotonic()
    for i, (key, value, headers, partition) in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers, partition=partition,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left or failures:
        raise RuntimeError(f"{len(failures)} records failed, {left} undelivered: {failures[:1]}")
    return time.monotonic() - t0


def produce_workload(kafka: KafkaResource, topic: str, w: Workload) -> dict:
    """Produce `w` with the load job's producer settings; records/s and seconds."""
    pool = os.urandom(POOL_BYTES + w.value_bytes)
    headers = [(k, v.encode()) for k, v in w.headers.items()]
    stride = w.value_bytes + 7  # windows overlap by no value's length
    seconds = produce_records(kafka, topic, (
        (w.key_pattern.format(i=i).encode(), pool[(i * stride) % POOL_BYTES:(i * stride) % POOL_BYTES + w.value_bytes],
         headers, i % w.partitions) for i in range(w.records)))
    return {"records": w.records, "seconds": seconds, "records_per_s": w.records / seconds}


@dataclass
class Stack:
    kafka_server: KafkaServer
    swift_server: SwiftServer

    @property
    def bootstrap(self) -> str:
        return self.kafka_server.bootstrap_servers

    def kafka(self) -> KafkaResource:
        return KafkaResource(bootstrap_servers=self.bootstrap, timeout_s=30)

    def swift_params(self, container: str) -> SwiftParams:
        return SwiftParams(
            auth_url=self.swift_server.auth_url, container=container, user=self.swift_server.user,
            key=self.swift_server.key, prefix="kafka", retries=3, timeout_s=120,
        )

    def create_topic(self, name: str, partitions: int) -> None:
        admin = self.kafka().admin()  # must outlive the future
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
        futures[name].result(timeout=60)

    def ranges(self, topic: str) -> list[OffsetRange]:
        """One range per partition, from the log start to the log end offset."""
        kafka = self.kafka()
        parts = kafka.partitions(topic)
        return [OffsetRange(topic, p, lo, hi) for p, (lo, hi) in kafka.watermarks(topic, parts).items() if hi > lo]

    def drop_container(self, container: str) -> None:
        """Delete a container and its objects (not timed: only keeps the disk from filling)."""
        with contextlib.closing(Store(self.swift_params(container))) as store:
            for item in list(store.list("")):
                store.delete(item["name"])
            with contextlib.suppress(Exception):
                store._conn.delete_container(container)


@contextlib.contextmanager
def running_stack(keep: bool = False):
    """Kafka (1 GiB heap) and Swift on free ports in a temporary folder, stopped by PID at the end."""
    tmp = Path(tempfile.mkdtemp(prefix="matos-bench-"))
    cache = cache_dir()
    kafka = KafkaServer(tmp / "kafka", cache, port=free_port(), heap="1g")
    swift = SwiftServer(tmp / "swift", cache, proxy_port=free_port())
    try:
        t = time.monotonic()
        kafka.start()
        swift.start()
        print(f"bench: Kafka on {kafka.bootstrap_servers}, Swift on {swift.auth_url} "
              f"({time.monotonic() - t:.0f}s; data in {tmp})", flush=True)
        yield Stack(kafka, swift)
    finally:
        for server in (swift, kafka):
            with contextlib.suppress(Exception):
                server.stop()
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
