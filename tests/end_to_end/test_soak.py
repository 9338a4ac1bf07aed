"""Soak: the real daemon archives a topic that never stops growing, while faults come and go.

`dagster dev` (webserver + daemon, the lag sensor every 10 s, Spark `local[1]`) archives a
4-partition topic that a producer thread feeds at ~200 records/s for MATOS_SOAK_S seconds
(default 1200). Every few minutes a fault is injected, in turn: the Kafka broker stopped
~10 s and restarted, the Swift proxy stopped ~10 s and restarted, a Spark Python worker of a
running archive run killed. (A SIGKILL of a run's whole process, and of the whole `dagster dev`,
is tests/end_to_end/test_crashed_run.py's: the heartbeat rule fails such a run within about 95 s.)

Then producing stops, the group must reach the log end of every partition, and the verifier
compares every archived record with Kafka. Numbers go to test-output/<test>/soak.json.

On both storages of the Dagster instance (test ids [sqlite] and [postgres]): the local one and
the production one on a real PostgreSQL server, as tests/end_to_end/test_daemon.py's ON_POSTGRES cases.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka.admin import NewTopic
from dagster import DagsterRunStatus
from helpers import manifests, read_archive
from pg_server import new_database, running_postgres
from test_daemon import Dev, dev_project, shows_log, start_dev, stop_dev, wait_answers
from test_faults import busiest_python_worker, kafka_answers, stop_swift_proxy

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic
from matos_dagster.resources import SwiftResource

SOAK_S = float(os.environ.get("MATOS_SOAK_S", "1200"))
PARTITIONS = 4
RATE = 200  # records/s
SAMPLE_S = 15
DOWN_S = 10
FAULT_EVERY_S = min(180.0, max(30.0, SOAK_S / 4))
WORKER_WAIT_S = 240  # within the 300 s the fault thread gets to end after the soak
DRAIN_S = 600
GROUP = "matos-archiver"
LOGS = PROJECT_ROOT / "test-output" / "test_soak"


class Producer(threading.Thread):
    """Idempotent producer at ~RATE records/s; delivery reports say what Kafka has."""

    def __init__(self, kafka, topic: str):
        super().__init__(daemon=True)
        self.p = kafka.producer(**{"linger.ms": 20})
        self.topic = topic
        self.stop = threading.Event()
        self.sent = 0
        self.delivered = 0
        self.failed: Counter = Counter()
        self.lock = threading.Lock()
        # partition -> (offsets, produce times) of delivered records, in delivery order
        self.times: dict[int, tuple[list[int], list[float]]] = {p: ([], []) for p in range(PARTITIONS)}

    def _report(self, err, msg, t):
        if err is not None:
            self.failed[str(err.name())] += 1
            return
        with self.lock:
            self.delivered += 1
            offs, ts = self.times[msg.partition()]
            offs.append(msg.offset())
            ts.append(t)

    def run(self):
        t0 = time.monotonic()
        i = 0
        while not self.stop.is_set():
            due = t0 + i / RATE
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            key = None if i % 17 == 0 else f"key-{i % 1000}".encode()
            value = (f"v{i}:" + "x" * (i % 300)).encode() if i % 23 else b""
            headers = [("n", str(i).encode())] + ([("h2", os.urandom(i % 8))] if i % 3 == 0 else [])
            now = time.time()
            while True:
                try:
                    self.p.produce(self.topic, key=key, value=value, headers=headers,
                                   on_delivery=lambda err, msg, t=now: self._report(err, msg, t))
                    break
                except BufferError:  # the local queue is full while the broker is away
                    self.p.poll(0.5)
            self.sent += 1
            self.p.poll(0)
            i += 1
        assert self.p.flush(300) == 0, "records left unsent"

    def produce_time(self, partition: int, offset: int) -> float | None:
        with self.lock:
            offs, ts = self.times[partition]
            offs, ts = list(offs), list(ts)
        order = sorted(range(len(offs)), key=offs.__getitem__)
        sorted_offs = [offs[j] for j in order]
        k = bisect.bisect_left(sorted_offs, offset)
        return ts[order[k]] if k < len(order) else None


@pytest.fixture(params=["sqlite", "postgres"])
def instance_env(request):
    """The Dagster instance's storage: the local one (dagster.yaml: sqlite, {}), or the production
    one (dagster.postgres.yaml) on a real PostgreSQL server (tests/pg_server.py), stopped after the
    test's `dagster dev`. As tests/end_to_end/test_daemon.py's ON_POSTGRES cases."""
    if request.param == "sqlite":
        yield {}
        return
    with running_postgres() as server:
        yield server.instance_env(new_database(server, "soak"))


def _start_dev(tmp, kafka_server, swift_server, topic: str, instance_env: dict[str, str]) -> Dev:
    env = dev_project(
        tmp, f"topics:\n  - name: {topic}\n    group: {GROUP}\n    batch: {{records: 500, age_s: 10}}\n",
        f"soak-{uuid.uuid4().hex[:8]}", instance_env,
        MATOS_SENSOR_INTERVAL_S="10",
        MATOS_KAFKA_BOOTSTRAP_SERVERS=kafka_server.bootstrap_servers,
        MATOS_SWIFT_AUTH_URL=swift_server.auth_url,
        MATOS_SPARK_MASTER="local[1]",
        MATOS_SPARK_CONF="spark.ui.enabled=false;spark.sql.shuffle.partitions=1",
    )
    log = LOGS / ("dagster-dev.log" if not instance_env else "dagster-dev-postgres.log")
    return start_dev(env, topic, log, instance_env)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_soak_under_faults(tmp_path_factory, kafka, kafka_server, swift_server, output_dir, instance_env):
    tmp = tmp_path_factory.mktemp("soak")
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    admin = kafka.admin()
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    del admin
    parts = list(range(PARTITIONS))
    dev = _start_dev(tmp, kafka_server, swift_server, topic, instance_env)
    faults: list[dict] = []
    samples: list[dict] = []
    producer = Producer(kafka, topic)
    fault_stop = threading.Event()
    faulter: threading.Thread | None = None
    try:
        wait_answers(dev)

        def inject(kind: str) -> dict:
            t0 = time.monotonic()
            f = {"kind": kind, "at_s": None}
            if kind == "kafka-broker":
                try:
                    kafka_server.stop()
                    f["at_s"] = round(time.monotonic() - started, 1)
                    time.sleep(DOWN_S)
                finally:
                    kafka_server.start()
                deadline = time.monotonic() + 120
                while not kafka_answers(kafka, topic, GROUP) and time.monotonic() < deadline:
                    time.sleep(1)
            elif kind == "swift-proxy":
                try:
                    stop_swift_proxy(swift_server)
                    f["at_s"] = round(time.monotonic() - started, 1)
                    time.sleep(DOWN_S)
                finally:
                    swift_server.start()
            elif kind == "python-worker":
                # Workers exist only while a run's Spark tasks go; on a loaded machine a run
                # spent about 2.5 minutes starting (a 90 s wait found none once, on PostgreSQL).
                victim, deadline = None, time.monotonic() + WORKER_WAIT_S
                while victim is None and time.monotonic() < deadline:
                    victim = busiest_python_worker()
                    if victim is None:
                        time.sleep(0.5)
                if victim is None:
                    f["skipped"] = f"no Spark Python worker running within {WORKER_WAIT_S} s"
                else:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(victim, signal.SIGKILL)  # a descendant of our dagster dev
                    f["at_s"] = round(time.monotonic() - started, 1)
                    f["pid"] = victim
            f["took_s"] = round(time.monotonic() - t0, 1)
            print(f"FAULT {json.dumps(f)}", flush=True)
            return f

        def fault_loop():
            kinds = ["kafka-broker", "swift-proxy", "python-worker"]
            n = 0
            while not fault_stop.wait(max(0.0, started + FAULT_EVERY_S * (n + 1) - time.monotonic())):
                if time.monotonic() - started > SOAK_S - 20:
                    return
                try:
                    faults.append(inject(kinds[n % len(kinds)]))
                except Exception as e:  # noqa: BLE001 - recorded, the soak goes on, and fails at its end
                    faults.append({"kind": kinds[n % len(kinds)], "error": f"{type(e).__name__}: {e}"[:300]})
                n += 1

        def sample() -> dict | None:
            try:
                committed = kafka.committed(topic, parts, GROUP)
                marks = kafka.watermarks(topic, parts)
            except Exception as e:  # noqa: BLE001 - e.g. the broker is down right now
                return {"t_s": round(time.monotonic() - started, 1), "error": type(e).__name__}
            now = time.time()
            lag, lag_s = 0, 0.0
            for p in parts:
                c = committed[p] or 0
                end = marks[p][1]
                lag += max(0, end - c)
                if end > c and (t := producer.produce_time(p, c)) is not None:
                    lag_s = max(lag_s, now - t)
            return {"t_s": round(time.monotonic() - started, 1), "lag": lag, "lag_s": round(lag_s, 1)}

        started = time.monotonic()
        producer.start()
        faulter = threading.Thread(target=fault_loop, daemon=True)
        faulter.start()
        with shows_log(dev):
            while time.monotonic() - started < SOAK_S:
                time.sleep(SAMPLE_S)
                dev.alive()
                if (s := sample()) is not None:
                    samples.append(s)
                    print(f"SAMPLE {json.dumps(s)} sent={producer.sent} delivered={producer.delivered}", flush=True)
        fault_stop.set()
        producer.stop.set()
        producer.join(320)
        faulter.join(300)
        assert not faulter.is_alive(), "the fault thread is still injecting a fault 300 s after the soak"
        produce_s = time.monotonic() - started
        marks = kafka.watermarks(topic, parts)
        high = {p: h for p, (_, h) in marks.items()}

        drain_t0 = time.monotonic()
        with shows_log(dev):
            while kafka.committed(topic, parts, GROUP) != high:
                dev.alive()
                if (s := sample()) is not None:
                    samples.append(s)
                assert time.monotonic() - drain_t0 < DRAIN_S, (
                    f"committed {kafka.committed(topic, parts, GROUP)} != log end {high} after {DRAIN_S}s")
                time.sleep(5)
        drain_s = time.monotonic() - drain_t0
        # Let the runs still going (e.g. a range requested again) end before counting.
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and any(
                r.status not in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
                for r in dev.lag_runs()):
            time.sleep(3)
        runs = Counter(r.status.value for r in dev.lag_runs())

        swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key=swift_server.key,
                              container=dev.container)
        cfg = TopicConfig(name=topic, group=GROUP)
        with swift.store() as store:
            v0 = time.monotonic()
            report = verify_topic(kafka, store, layout.join(store.params.prefix, cfg.prefix), cfg, sample=None)
            verify_s = time.monotonic() - v0
            docs = manifests(store, topic)
            archived = sum(d["records"] for d in docs)
            offsets_in_manifests: Counter = Counter()
            rows: Counter = Counter()
            for d in docs:
                for o in range(d["start"], d["end"]):
                    offsets_in_manifests[(d["partition"], o)] += 1
                for r in read_archive(store, d):
                    rows[(r["partition"], r["offset"])] += 1
        dup_manifest = sum(n - 1 for n in offsets_in_manifests.values() if n > 1)
        dup_rows = sum(n - 1 for n in rows.values() if n > 1)
        log_end_total = sum(high.values())
        missing_rows = sum(1 for p in parts for o in range(marks[p][0], high[p]) if (p, o) not in rows)
        good = [s for s in samples if "lag" in s]
        numbers = {
            "topic": topic,
            "duration_s": round(produce_s),
            "partitions": PARTITIONS,
            "rate_target_per_s": RATE,
            "produced_sent": producer.sent,
            "produced_delivered": producer.delivered,
            "delivery_failures": dict(producer.failed),
            "log_end_total": log_end_total,
            "archived": archived,
            "archived_rows_read": sum(rows.values()),
            "lost": report.lost_offsets + missing_rows,
            "duplicated": dup_manifest + dup_rows,
            "duplicated_offsets_in_manifests": dup_manifest,
            "duplicated_rows": dup_rows,
            "manifests": len(docs),
            "verify_ok": report.ok,
            "verify_compared": report.compared,
            "verify_problems": [str(p) for p in report.problems][:20],
            "verify_s": round(verify_s, 1),
            "faults": faults,
            "faults_injected": sum(1 for f in faults if f.get("at_s") is not None),
            "max_lag_records": max((s["lag"] for s in good), default=None),
            "max_lag_s": max((s["lag_s"] for s in good), default=None),
            "lag_samples": len(good),
            "lag_samples_failed": len(samples) - len(good),
            "drain_s": round(drain_s, 1),
            "runs": dict(runs),
        }
        (output_dir / "soak.json").write_text(json.dumps({**numbers, "samples": samples}, indent=2))
        print("SOAK " + json.dumps(numbers, indent=2))
        print(report.render()[:3000])

        # Every fault due was injected, while the soak ran: none failed or found nothing to break.
        due = int((SOAK_S - 20) // FAULT_EVERY_S)
        assert [f for f in faults if f.get("at_s") is None] == [], f"faults not injected: {faults}"
        assert numbers["faults_injected"] == due, f"{numbers['faults_injected']} faults injected, {due} due: {faults}"
        assert numbers["lost"] == 0, report.render()
        assert numbers["duplicated"] == 0, numbers
        assert report.ok, report.render()
        assert archived == producer.delivered == log_end_total, numbers
    finally:
        # The fault thread first: left running, it would go on stopping the session's broker
        # and Swift proxy under later tests. An injection under way restarts what it stopped.
        fault_stop.set()
        producer.stop.set()
        if faulter is not None:
            faulter.join(300)
        fault_alive = faulter is not None and faulter.is_alive()
        stop_dev(dev)  # dagster dev before the instance it uses
        assert not fault_alive, "the fault thread did not stop"
