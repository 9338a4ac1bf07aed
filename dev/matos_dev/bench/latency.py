"""Latency from a record produced to its range's manifest in Swift, with the product running.

`dagster dev` (dagster_dev.py: a session of its own, its own DAGSTER_HOME, the bench's Kafka and
Swift) runs with a Spark Connect server of its own (as `make run` uses the local stack's), the
lag sensor every 30 s and the topic's default batch policy. Records are produced at
a steady rate; Swift is listed every second, and each record's latency is the time its
range's manifest was first seen minus the time the record was produced.
"""

from __future__ import annotations

import functools
import os
import statistics
import time
import uuid
from pathlib import Path

from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store
from matos_dev.bench import dagster_dev
from matos_dev.stack.process import free_port
from matos_dev.stack.spark import SparkConnectServer


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def measure(stack, log_dir: Path, rate: float, seconds: float, interval_s: int = 30,
            value_bytes: int = 1024, partitions: int = 4, drain_s: float = 420) -> dict:
    tmp = log_dir / f"latency-{uuid.uuid4().hex[:6]}"
    tmp.mkdir(parents=True)
    spark = SparkConnectServer(tmp / "spark", port=free_port())
    spark.start()
    try:
        return _measure(stack, spark, tmp, rate, seconds, interval_s, value_bytes, partitions, drain_s)
    finally:
        spark.stop()


def _measure(stack, spark, tmp: Path, rate: float, seconds: float, interval_s: int, value_bytes: int,
             partitions: int, drain_s: float) -> dict:
    topic = f"bench-latency-{uuid.uuid4().hex[:6]}"
    stack.create_topic(topic, partitions)
    container = f"bench-latency-{uuid.uuid4().hex[:6]}"
    settings = dagster_dev.stack_settings(stack, container, spark.url, interval_s)
    produced: dict[tuple[int, int], float] = {}
    seen: dict[tuple[int, int, int], float] = {}  # (partition, start, end) -> first seen
    # The default batch policy: the topics file names the topic only.
    with dagster_dev.running(tmp, f"topics:\n  - name: {topic}\n", settings) as dev:
        time.sleep(interval_s)  # the daemon's first tick, so the first records wait no longer than the rest
        producer = stack.kafka().producer(**{"linger.ms": 5})
        store = Store(stack.swift_params(container))
        block = os.urandom(value_bytes + 256)
        t0 = time.monotonic()
        next_list = t0
        i = 0
        while time.monotonic() - t0 < seconds:
            while i < int((time.monotonic() - t0) * rate):
                producer.produce(topic, key=f"k{i:015d}".encode(), value=block[i % 256: i % 256 + value_bytes],
                                 headers=[("source", b"bench")], partition=i % partitions,
                                 on_delivery=functools.partial(_delivered, produced, time.time()))
                i += 1
            producer.poll(0)
            if time.monotonic() >= next_list:
                _list_manifests(store, topic, seen)
                next_list += 1.0
            time.sleep(0.01)
        if producer.flush(60):
            raise RuntimeError("records left unsent")
        last = {}
        for p, o in produced:
            last[p] = max(last.get(p, -1), o)
        drain_deadline = time.monotonic() + drain_s
        while time.monotonic() < drain_deadline:
            dev.check()
            _list_manifests(store, topic, seen)
            if all(any(sp == p and s <= o < e for sp, s, e in seen) for p, o in last.items()):
                break
            time.sleep(1.0)
        store.close()
    latencies = []
    missing = 0
    for (p, o), t in produced.items():
        when = [ts for (sp, s, e), ts in seen.items() if sp == p and s <= o < e]
        if when:
            latencies.append(min(when) - t)
        else:
            missing += 1
    return {
        "records": len(produced), "archived": len(latencies), "not_archived": missing,
        "rate_per_s": rate, "seconds": seconds, "sensor_interval_s": interval_s, "ranges": len(seen),
        "median_s": statistics.median(latencies) if latencies else None,
        "p95_s": _percentile(latencies, 0.95) if latencies else None,
        "max_s": max(latencies) if latencies else None, "log": str(dev.log), "runs": run_phases(dev.home),
    }


def run_phases(home: Path) -> dict:
    """Where the archive runs' time went: median seconds in the queue, starting, and in the step."""
    from dagster import DagsterEventType, DagsterInstance

    phases: dict[str, list[float]] = {"queued_s": [], "starting_s": [], "step_s": [], "total_s": []}
    kinds = {DagsterEventType.RUN_ENQUEUED: "enqueued", DagsterEventType.RUN_STARTING: "starting",
             DagsterEventType.STEP_START: "step", DagsterEventType.STEP_SUCCESS: "done"}
    with DagsterInstance.from_config(str(home)) as instance:
        records = instance.get_run_records()
        for record in records:
            if not _is_archive(record.dagster_run.job_name):
                continue  # the monitor's runs
            at: dict[str, float] = {}
            for event in instance.all_logs(record.dagster_run.run_id):
                kind = kinds.get(event.dagster_event.event_type) if event.is_dagster_event else None
                if kind:
                    at.setdefault(kind, event.timestamp)
            if len(at) == 4:
                phases["queued_s"].append(at["starting"] - at["enqueued"])
                phases["starting_s"].append(at["step"] - at["starting"])
                phases["step_s"].append(at["done"] - at["step"])
                phases["total_s"].append(at["done"] - at["enqueued"])
        monitor_runs = sum(1 for r in records if not _is_archive(r.dagster_run.job_name))
    return {"archive_runs": len(phases["total_s"]), "monitor_runs": monitor_runs,
            **{k: round(statistics.median(v), 1) if v else None for k, v in phases.items()}}


def _is_archive(job: str) -> bool:
    """The lag sensor's runs (archive_ranges), or a run of an archive asset itself."""
    return job == "archive_ranges" or job.startswith("__ASSET_JOB")


def _delivered(produced: dict, sent: float, err, msg) -> None:
    if err is None:
        produced[(msg.partition(), msg.offset())] = sent


def _list_manifests(store: Store, topic: str, seen: dict) -> None:
    now = time.time()
    for item in store.list(layout.topic_dir("kafka", topic) + "/"):
        name = item.get("name", "")
        if not name.endswith("/" + layout.MANIFEST):
            continue
        d = name[: -len(layout.MANIFEST) - 1]
        span = layout.parse_range_dir(d)
        part = int(d.rsplit("/", 2)[-2].split("=", 1)[1])
        if span and (part, *span) not in seen:
            seen[(part, *span)] = now
