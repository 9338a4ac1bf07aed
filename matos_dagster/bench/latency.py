"""Latency from a record produced to its range's manifest in Swift, with the product running.

`dagster dev` (webserver, daemon, code server, run workers) starts in a session of its own, on a
free port with its own DAGSTER_HOME, pointed at the bench's Kafka and Swift and at a Spark
Connect server of its own (as `make run` uses the local stack's), with the lag sensor every
30 s and the topic's default batch policy. Records are produced at
a steady rate; Swift is listed every second, and each record's latency is the time its
range's manifest was first seen minus the time the record was produced. The whole process
group is stopped at the end (SIGTERM, SIGKILL after a grace period).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from matos_dagster import layout
from matos_dagster.devstack.process import free_port
from matos_dagster.devstack.spark import SparkConnectServer
from matos_dagster.settings import PROJECT_ROOT
from matos_dagster.store import Store


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def _stop_group(proc: subprocess.Popen, grace: float = 60) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (proc.poll() is None or _group_alive(proc.pid)):
        time.sleep(0.5)
    if proc.poll() is None or _group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


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
    (tmp / "topics.yaml").write_text(f"topics:\n  - name: {topic}\n")  # the default batch policy
    (tmp / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: matos_dagster.definitions\n"
        "      location_name: matos_dagster\n")
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text())
    env = {
        **os.environ, "PYTHONUNBUFFERED": "1", "DAGSTER_HOME": str(home),
        "MATOS_TOPICS_FILE": str(tmp / "topics.yaml"), "MATOS_SENSOR_INTERVAL_S": str(interval_s),
        "MATOS_KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap, "MATOS_SWIFT_AUTH_URL": stack.swift_server.auth_url,
        "MATOS_SWIFT_USER": stack.swift_server.user, "MATOS_SWIFT_KEY": stack.swift_server.key,
        "MATOS_SWIFT_CONTAINER": container, "MATOS_SWIFT_PREFIX": "kafka", "MATOS_SPARK_MASTER": spark.url,
    }
    # The instance's storage exists before dagster dev starts, so no two processes race to make it.
    from dagster import DagsterInstance

    DagsterInstance.from_config(str(home)).dispose()
    port = free_port()
    dagster = str(Path(sys.executable).parent / "dagster")
    log = tmp / "dagster-dev.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([dagster, "dev", "-w", str(tmp / "workspace.yaml"), "-h", "127.0.0.1",
                                 "-p", str(port)], cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    produced: dict[tuple[int, int], float] = {}
    seen: dict[tuple[int, int, int], float] = {}  # (partition, start, end) -> first seen
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited {proc.returncode}; see {log}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"dagster dev did not answer within 180 s; see {log}")
            time.sleep(1)

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
            if proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited {proc.returncode}; see {log}")
            _list_manifests(store, topic, seen)
            if all(any(sp == p and s <= o < e for sp, s, e in seen) for p, o in last.items()):
                break
            time.sleep(1.0)
        store.close()
    finally:
        _stop_group(proc)
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
        "max_s": max(latencies) if latencies else None, "log": str(log), "runs": run_phases(home),
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
            if not record.dagster_run.job_name.startswith("__ASSET_JOB"):
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
        monitor_runs = sum(1 for r in records if not r.dagster_run.job_name.startswith("__ASSET_JOB"))
    return {"archive_runs": len(phases["total_s"]), "monitor_runs": monitor_runs,
            **{k: round(statistics.median(v), 1) if v else None for k, v in phases.items()}}


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
