"""The bench's paths: what limits the archive (plain reads, plain writes), what it is compared
with (Spark's Kafka source, ProducerPerformance), and the archive itself (in `worker.py`).

Every path gets the same offset ranges cut into the same slices and the same parallelism
(the cores Spark gets), and is timed from its first piece of work to its last: process and
session start-up are measured apart.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import active_children, get_context
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition

from matos_dagster.core.archive.slice_task import consumer_conf
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift.store import SwiftParams
from matos_dev.bench.cpu import cpu_sample, cpu_used
from matos_dev.bench.memory import PeakSampler
from matos_dev.stack.kafka import _java
from matos_dev.stack.process import read_pid

# ---------------------------------------------------------------------- CPU accounting
# CPU-seconds of given processes only (bench/cpu.py), not of the whole machine: the path's own
# processes ("client") and the stack's servers, so other load does not count.


def server_pids(stack) -> dict[str, list[int]]:
    """The PIDs of the Kafka broker and of each Swift server ("swift/proxy", ...) of a running bench stack."""
    swift = {f"swift/{server}": [read_pid(f)] for server, f in stack.swift_server.pid_files.items()}
    groups = {"kafka": [read_pid(stack.kafka_server.pid_file)], **swift}
    return {g: [p for p in pids if p] for g, pids in groups.items()}


# ------------------------------------------------------------------------ 1: read limit


def _read_slice(args: tuple[str, str, int, int, int]) -> int:
    """Read [start, end) of one partition and throw it away; the records read."""
    bootstrap, topic, partition, start, end = args
    # The archive's consumer settings (slice_task.py), so only the work on records differs. Its
    # prefetch bound and backoff too: librdkafka otherwise waits 1 s whenever the queue is full,
    # which slices longer than the queue made the read limit do (W2's 7 s became 18 s).
    consumer = Consumer(consumer_conf({"bootstrap.servers": bootstrap}, "bench-read"))
    n = 0
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        while True:
            msgs = consumer.consume(num_messages=5000, timeout=1.0)
            if not msgs:
                continue
            last = msgs[-1]
            if last.error() is None and last.offset() < end:
                n += len(msgs)  # the common case: no per-record Python at all
                if last.offset() + 1 >= end:
                    # Done, as the archive's task knows from its position: asking for more would
                    # wait out consume's 1 s timeout at the end of a partition.
                    return n
                continue
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and m.offset() >= end:
                        return n
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(err.str())
                    continue
                if m.offset() >= end:
                    return n
                n += 1
            if consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                return n
    finally:
        consumer.close()


def _warm(_: int) -> int:
    time.sleep(0.3)  # long enough for the pool to start every worker
    return os.getpid()


def _pool_pids() -> list[int]:
    # The pool's workers: every process multiprocessing started here (the pool spawns them all
    # on the warm-up's `cores` submits, even if one worker ran two of them).
    return [p.pid for p in active_children()]


def read_limit(bootstrap: str, slices: list[OffsetRange], cores: int, servers: dict | None = None) -> dict:
    with ProcessPoolExecutor(cores, mp_context=get_context("spawn")) as pool:
        list(pool.map(_warm, range(cores)))
        pids = _pool_pids()
        cpu0 = cpu_sample({"client": pids, **(servers or {})})
        t0 = time.monotonic()
        n = sum(pool.map(_read_slice, [(bootstrap, s.topic, s.partition, s.start, s.end) for s in slices]))
        seconds = time.monotonic() - t0
        return {"seconds": seconds, "records": n,
                "cpu": cpu_used(cpu0, cpu_sample({"client": pids, **(servers or {})}))}


# ----------------------------------------------------------------------- 2: write limit

_writer: dict = {}


def _init_writer(params: dict, largest: int) -> None:
    _writer["conn"] = SwiftParams(**params).connect()
    _writer["container"] = params["container"]
    _writer["data"] = os.urandom(largest)  # incompressible, like the archive's Parquet


def _put(args: tuple[str, int]) -> int:
    name, size = args
    _writer["conn"].put_object(_writer["container"], name, contents=_writer["data"][:size])
    return size


def write_limit(params: SwiftParams, sizes: list[int], cores: int, servers: dict | None = None) -> dict:
    """Upload objects of `sizes` bytes, `cores` at a time, with plain python-swiftclient."""
    doc = {k: getattr(params, k) for k in params.__dataclass_fields__}
    conn = params.connect()
    conn.put_container(params.container)
    conn.close()
    names = [(f"bench/write-{i:06d}", s) for i, s in enumerate(sizes)]
    with ProcessPoolExecutor(cores, mp_context=get_context("spawn"), initializer=_init_writer,
                             initargs=(doc, max(sizes))) as pool:
        list(pool.map(_warm, range(cores)))
        pids = _pool_pids()
        cpu0 = cpu_sample({"client": pids, **(servers or {})})
        t0 = time.monotonic()
        n = sum(pool.map(_put, names))
        seconds = time.monotonic() - t0
        return {"seconds": seconds, "bytes": n, "objects": len(sizes),
                "cpu": cpu_used(cpu0, cpu_sample({"client": pids, **(servers or {})}))}


# ------------------------------------------------------- 3 and 4: Spark, in its own process


def spark_run(kind: str, spec: dict, log_dir: Path) -> dict:
    """Run `worker.py` for one Spark path; times, sizes, CPU-seconds and the peak RSS of its process tree."""
    log_dir.mkdir(parents=True, exist_ok=True)
    tag = f"{kind}-{uuid.uuid4().hex[:6]}"
    result_file = log_dir / f"{tag}.result.json"
    spec_file = log_dir / f"{tag}.spec.json"
    spec_file.write_text(json.dumps({**spec, "kind": kind, "result": str(result_file)}))
    # Spark hands Python naive local datetimes; UTC keeps the worker's clock arithmetic simple.
    env = {**os.environ, "TZ": "UTC", "PYTHONUNBUFFERED": "1"}
    with open(log_dir / f"{tag}.log", "wb") as log:
        spawned = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "matos_dev.bench.worker", str(spec_file)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            with PeakSampler(proc.pid) as mem:
                rc = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    if rc != 0 or not result_file.exists():
        tail = (log_dir / f"{tag}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"bench worker {kind} failed (exit {rc}); log {log_dir / (tag + '.log')}:\n{tail}")
    r = json.loads(result_file.read_text())
    return {
        **{k: r[k] for k in ("records", "record_bytes", "bytes", "objects", "object_sizes")},
        "seconds": r["done"] - r["work_started"],  # the path's work alone
        "seconds_with_startup": r["done"] - spawned,  # + process, imports, JVM and session start
        "startup_s": r["work_started"] - spawned,
        "memory": mem.peaks,
        # Each Python worker's peak above its RSS when the timed work started: one task's memory.
        "task_memory": mem.workers.task_peaks(r["work_started"]),
        "cpu": r.get("cpu"),  # of the timed part: the worker's process tree and the servers
        "reader": r.get("reader"),  # archive: the slice reader its tasks used
        "log": str(log_dir / f"{tag}.log"),
    }


# ------------------------------------------------------------------- 5: producing records


def load_job(bootstrap: str, config: dict) -> dict:
    """The project's load job, in process, as `dagster job execute` would run it."""
    from dagster import DagsterInstance

    from matos_dagster.jobs.load import load
    from matos_dagster.resources import KafkaResource

    t0 = time.monotonic()
    with DagsterInstance.ephemeral() as instance:
        result = load.execute_in_process(
            run_config={"ops": {"produce": {"config": config}}},
            resources={"kafka": KafkaResource(bootstrap_servers=bootstrap, timeout_s=60)},
            instance=instance,
        )
    wall = time.monotonic() - t0
    (out,) = [e for e in result.events_for_node("produce") if e.is_successful_output]
    meta = out.step_output_data.metadata
    return {"seconds": meta["duration_s"].value, "seconds_with_startup": wall, "records": config["count"],
            "records_per_s": meta["records_per_s"].value}


_PERF = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def producer_performance(classpath: str, bootstrap: str, topic: str, records: int, record_size: int,
                         producer_props: dict) -> dict:
    """Kafka's own org.apache.kafka.tools.ProducerPerformance, same records and settings."""
    props = {"bootstrap.servers": bootstrap, **producer_props}
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write('<Configuration status="WARN"><Appenders><Console name="e" target="SYSTEM_ERR">'
                '<PatternLayout pattern="%p %m%n"/></Console></Appenders><Loggers><Root level="WARN">'
                '<AppenderRef ref="e"/></Root></Loggers></Configuration>')
    argv = [_java(), "-Xmx1g", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={Path(f.name).as_uri()}",
            "-cp", classpath, "org.apache.kafka.tools.ProducerPerformance",
            "--topic", topic, "--num-records", str(records), "--record-size", str(record_size),
            "--throughput", "-1", "--producer-props", *(f"{k}={v}" for k, v in props.items())]
    t0 = time.monotonic()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    finally:
        os.unlink(f.name)
    wall = time.monotonic() - t0
    m = None
    for line in r.stdout.splitlines():
        m = _PERF.search(line) or m  # the last summary line is the total
    if r.returncode != 0 or m is None:
        raise RuntimeError(f"ProducerPerformance failed (exit {r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    rate = float(m.group(2))
    return {"seconds": records / rate if rate else 0.0, "seconds_with_startup": wall, "records": int(m.group(1)),
            "records_per_s": rate}
