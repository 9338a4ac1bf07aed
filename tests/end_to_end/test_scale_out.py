"""Scale-out: the same code archives identically on a Spark standalone cluster as on local[*].

A module fixture starts a real standalone cluster from pyspark's own launcher
(`bin/spark-class`): one master and two workers of one core each, separate processes on
127.0.0.1, stopped by PID afterwards. The same offset ranges are archived twice, into two
containers: once in this process with the session's local Spark, once by the `dagster` CLI
in a subprocess whose `spark.master` is the cluster (one process holds one SparkContext).
The two archives must be byte for byte the same, and equal to Kafka.

An estate goes through the same cluster too: 100 partitions (25 topics of 4, one pattern of the
topics file) archived by one `archive_ranges` run, the lag sensor's batch, launched with the
`dagster` CLI whose MATOS_SPARK_MASTER is the cluster: every partition committed to its log end,
every record archived once, the tasks run by both workers' executors.

The first run authenticates to Swift as a user whose key is distinctive. Executors get
that key inside the task closure (never in Spark's conf), so it must appear in none of
what Spark shows or keeps: its UIs (driver, master, workers), its event log, the master's
and workers' logs and the executors' stdout/stderr, nor in the CLI's output and Dagster's
storage. Each of those sources is shown to hold a distinctive non-secret value (the app
name, the app id, the container), so the search is proven to read them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pyspark
import pytest
from confluent_kafka.admin import NewTopic
from dagster import AssetKey, DagsterInstance
from helpers import check_archive, manifests, new_instance, produce, read_archive, read_kafka
from matos_dev.stack import process
from matos_dev.stack.swift import SwiftServer

from matos_dagster.core.archive.incarnation import current_incarnation
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.kafka import many
from matos_dagster.core.offsets.ranges import OffsetRange, cut
from matos_dagster.core.reader import read_table
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.topics import load as load_topics
from matos_dagster.jobs.archive_ranges import ranges_config
from matos_dagster.resources import SwiftResource

# ~70-85 s for the test itself, ~10-15 s more for the cluster and its Swift (2 cores; five
# JVMs: master, two workers, a driver and two executors per CLI run). In `make test`: it is
# the proof that scale-out archives the same bytes and leaks no key. Bounded by the suite's
# timeout (PYTEST_TIMEOUT): on a machine shared with other work it took over 900 s.

CACHE = Path(os.environ.get("MATOS_DEVSTACK_DIR", PROJECT_ROOT / ".devstack")) / "cache"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
PYTHON = str(PROJECT_ROOT / ".venv" / "bin" / "python") if (PROJECT_ROOT / ".venv").is_dir() else sys.executable
DAGSTER = str(Path(sys.executable).parent / "dagster")

# One partition, one range: one `asset materialize` (one Spark app, its 3 tasks over both workers'
# executors). A second partition was a second app proving the same again (about 20 s on the 2-core
# CI); several partitions on one Spark: tests/core/archive/test_archive.py and test_daemon.py.
RECORDS = 1500
PARTITIONS = 1
SLICE_RECORDS = 500  # 3 Spark tasks a range
MAX_RANGE_RECORDS = 1500  # one range a partition: one `asset materialize` (one Spark app) each
PARTS = list(range(PARTITIONS))

# Distinctive, so a hit can only be a leak. Alphanumeric: it has no other spelling in a
# URL, JSON or a shell command line.
SECRET = "sEcReT" + uuid.uuid4().hex + "KeY"
SWIFT_USER = "scaleout:archiver"
GROUP = "matos-archiver"


def awkward_rows(n: int, partitions: int):
    """Binary, empty and null keys and values; several, repeated and non-UTF-8 headers.

    The same rows as tests/core/archive/test_archive.py's.
    """
    for i in range(n):
        key = [None, b"", bytes([i % 256, 0, 255]), f"k{i}".encode()][i % 4]
        value = [bytes(range(256)) * (i % 3), None, b"", f"v{i}".encode() * 10][i % 4]
        headers = [[], [("h", b"\xff\xfe\x00")], [("dup", b"1"), ("dup", b"2"), ("none", None)]][i % 3]
        yield key, value, headers, i % partitions


# --------------------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    root: Path
    master_port: int
    master_ui: int
    worker_uis: list[int]
    log_files: list[Path]
    work_dirs: list[Path]
    pid_files: list[Path] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def master_json(self) -> dict:
        return json.loads(get(f"http://127.0.0.1:{self.master_ui}/json/"))


def get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _processes_under(root: Path) -> list[str]:
    """Live processes whose command line or working directory is under `root` (read-only)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(d / "cwd")
        except OSError:
            continue
        if str(root) in cmdline or cwd.startswith(str(root)):
            if process.pid_alive(int(d.name)):
                found.append(f"{d.name}: {cmdline[:200]}")
    return found


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-cluster")
    (root / "conf").mkdir()  # an empty SPARK_CONF_DIR: nothing from the machine leaks in
    ports = set()
    while len(ports) < 6:
        ports.add(process.free_port())
    master_port, master_ui, *rest = sorted(ports)
    worker_ports, worker_uis = rest[:2], rest[2:]
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_CONF_DIR": str(root / "conf"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "PYSPARK_PYTHON": PYTHON,
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    }
    for name in ("PYSPARK_SUBMIT_ARGS", "SPARK_MASTER_HOST", "SPARK_WORKER_OPTS", "SPARK_MASTER_OPTS"):
        env.pop(name, None)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    cluster = Cluster(root, master_port, master_ui, worker_uis, [], [])
    argvs = [("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(master_port), "--webui-port", str(master_ui)])]
    for i, (port, ui) in enumerate(zip(worker_ports, worker_uis)):
        work = root / f"work-{i}"
        work.mkdir()
        cluster.work_dirs.append(work)
        argvs.append((f"worker-{i}", [
            spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
            "--port", str(port), "--cores", "1", "--memory", "1g", "--webui-port", str(ui),
            "--work-dir", str(work)]))
    try:
        for name, argv in argvs:
            pid_file, log_file = root / "run" / f"{name}.pid", root / "log" / f"{name}.log"
            cluster.pid_files.append(pid_file)
            cluster.log_files.append(log_file)
            process.start(argv, pid_file, log_file, env=env, cwd=root)
        deadline = time.monotonic() + 120
        while True:
            for pid_file, log_file in zip(cluster.pid_files, cluster.log_files):
                if process.read_pid(pid_file) is None:
                    raise RuntimeError(f"{pid_file.stem} exited at start:\n{_tail(log_file)}")
            try:
                alive = [w for w in cluster.master_json().get("workers", []) if w.get("state") == "ALIVE"]
            except (OSError, ValueError):
                alive = []
            if len(alive) == 2:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the cluster did not show 2 ALIVE workers within 120 s:\n"
                                   + "\n".join(_tail(f) for f in cluster.log_files))
            time.sleep(0.5)
        yield cluster
    finally:
        # Workers first (each stops its executors), then the master; each stop runs even if
        # one before it fails.
        with contextlib.ExitStack() as stops:  # its callbacks run last first
            for pid_file in cluster.pid_files:
                stops.callback(process.stop, pid_file, timeout=30)
        assert all(process.read_pid(f) is None for f in cluster.pid_files)
        deadline = time.monotonic() + 30
        while (left := _processes_under(root)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, f"processes of the Spark cluster left running: {left}"


@pytest.fixture(scope="module")
def secret_swift(tmp_path_factory):
    """A Swift of its own with a user whose key is SECRET; the session's Swift is left alone."""
    server = SwiftServer(tmp_path_factory.mktemp("swift-scaleout"), CACHE, proxy_port=process.free_port(),
                         users={SWIFT_USER: SECRET})
    server.start()
    yield server
    server.stop()


# --------------------------------------------------------------------------- the driver's UI


class UiWatcher:
    """Reads the driver's Spark UI (REST API and environment page) while a CLI run lives."""

    PAGES = ("environment", "executors", "allexecutors", "jobs", "stages")

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"
        self.pages: dict[str, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def _run(self):
        while not self._stop.is_set():
            try:
                apps = json.loads(get(self.base + "/api/v1/applications", timeout=2))
                for app in apps:
                    for page in self.PAGES:
                        self.pages[f"{app['id']}/{page}"] = get(
                            f"{self.base}/api/v1/applications/{app['id']}/{page}", timeout=2)
                    self.pages[f"{app['id']}/environment.html"] = get(self.base + "/environment/", timeout=2)
            except (OSError, ValueError, KeyError):
                pass
            self._stop.wait(0.3)


# --------------------------------------------------------------------------- what Spark kept


def event_logs_by_app(folder: Path) -> dict[str, list[dict]]:
    """Each app's event log, its events in order. Spark 4 writes each app's log as a folder of
    rolling files, eventlog_v2_<app id>/events_<n>_<app id> (plain JSON lines: eventLog.compress off)."""
    logs: dict[str, list[dict]] = {}
    for f in sorted(folder.rglob("events_*"), key=lambda f: (f.parent.name, int(f.name.split("_")[1]))):
        logs.setdefault(f.parent.name, []).extend(json.loads(line) for line in f.read_text().splitlines())
    return logs


def task_executors(events: list[dict]) -> list[str]:
    """The executor id of each task of an app's event log, each task having succeeded."""
    out = []
    for event in events:
        if event["Event"] == "SparkListenerTaskEnd":
            assert event["Task End Reason"]["Reason"] == "Success", event["Task End Reason"]
            out.append(event["Task Info"]["Executor ID"])
    return out


def app_id(events: list[dict]) -> str:
    (start,) = [e for e in events if e["Event"] == "SparkListenerApplicationStart"]
    return start["App ID"]


# --------------------------------------------------------------------------- the tests


def dagster(env, cwd, *args) -> subprocess.CompletedProcess:
    p = subprocess.run([DAGSTER, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def contents(store) -> dict[str, bytes]:
    """Every archived object and manifest, by name. The monitor's marks (`_monitor/`) are left
    out: the CLI's materialisations run the monitor check, the local `archive_range` calls do not;
    and the record of the topic's incarnations, which says when each run first saw the topic."""
    _, items = store._conn.get_container(store.container, full_listing=True)
    return {i["name"]: store.get(i["name"]) for i in items
            if "/_monitor/" not in i["name"] and "/_incarnations/" not in i["name"]}


def files_under(*roots: Path) -> dict[str, bytes]:
    out = {}
    for root in roots:
        for f in sorted(Path(root).rglob("*")):
            if f.is_file():
                out[str(f)] = f.read_bytes()
    return out


def test_a_standalone_cluster_archives_the_same_bytes_as_local_spark_and_never_shows_the_key(
    kafka, kafka_server, swift, spark, new_topic, spark_cluster, secret_swift, tmp_path
):
    t0 = time.monotonic()
    topic = new_topic(partitions=PARTITIONS)
    produce(kafka, topic, awkward_rows(RECORDS, PARTITIONS))
    per_partition = RECORDS // PARTITIONS
    assert kafka.watermarks(topic, PARTS) == {p: (0, per_partition) for p in PARTS}
    ranges = [r for p in PARTS for r in cut(topic, p, 0, per_partition, MAX_RANGE_RECORDS)]

    # 1. Local Spark, in this process.
    local_cfg = TopicConfig(name=topic, group=f"local-{uuid.uuid4().hex[:8]}",
                            slice_records=SLICE_RECORDS, max_range_records=MAX_RANGE_RECORDS)
    with swift.store() as store:
        log = current_incarnation(kafka, store, local_cfg)  # the topic's log, as a run names it in manifests
        for r in ranges:
            done = archive_range(r, local_cfg, kafka, store, spark, incarnation=log)
            assert done.slices == 3
        assert check_archive(kafka, store, topic, local_cfg.group) == {p: per_partition for p in PARTS}
        local = contents(store)
        local_manifests = sorted(manifests(store, topic), key=lambda m: (m["partition"], m["start"]))
    t_local = time.monotonic()

    # 2. The cluster, through the dagster CLI in a subprocess: add the same ranges, archive them.
    cluster_group = f"cluster-{uuid.uuid4().hex[:8]}"
    container = f"scaleout-{uuid.uuid4().hex[:10]}"
    app_name = f"matos-scaleout-{uuid.uuid4().hex[:10]}"
    event_logs = tmp_path / "event-logs"
    event_logs.mkdir()
    ui_port = process.free_port()
    (tmp_path / "topics.yaml").write_text(
        f"topics:\n  - name: {topic}\n    group: {cluster_group}\n    slice_records: {SLICE_RECORDS}\n"
        f"    max_range_records: {MAX_RANGE_RECORDS}\n")
    home = new_instance(tmp_path / "dagster_home")
    spark_conf = ";".join([
        f"spark.app.name={app_name}",
        "spark.eventLog.enabled=true",
        f"spark.eventLog.dir=file://{event_logs}",
        "spark.eventLog.compress=false",  # plain JSON lines, so the search reads what Spark wrote
        "spark.ui.enabled=true",
        f"spark.ui.port={ui_port}",
        "spark.executor.memory=512m",
        # Wait for both executors before the first job, so its tasks spread over both workers.
        "spark.cores.max=2",
        "spark.scheduler.minRegisteredResourcesRatio=1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime=60s",
    ])
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml"),
        "MATOS_KAFKA_BOOTSTRAP_SERVERS": kafka_server.bootstrap_servers,
        "MATOS_SWIFT_AUTH_URL": secret_swift.auth_url,
        "MATOS_SWIFT_USER": SWIFT_USER,
        "MATOS_SWIFT_KEY": SECRET,
        "MATOS_SWIFT_CONTAINER": container,
        "MATOS_SPARK_MASTER": spark_cluster.master_url,
        "MATOS_SPARK_CONF": spark_conf,
        "PYSPARK_PYTHON": PYTHON,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    outputs: list[str] = []
    (tmp_path / "ranges.yaml").write_text(json.dumps(
        {"ops": {"add_range_keys": {"config": {"topic": topic, "start": 0, "end": per_partition}}}}))
    p = dagster(env, tmp_path, "job", "execute", "-m", "matos_dagster.definitions", "-j", "add_ranges",
                "-c", "ranges.yaml")
    outputs += [p.stdout, p.stderr]
    with DagsterInstance.from_config(str(home)) as instance:
        keys = sorted(instance.get_dynamic_partitions(local_cfg.partitions_name))
    assert keys == sorted(r.key for r in ranges)
    with UiWatcher(ui_port) as ui:
        for key in keys:
            p = dagster(env, tmp_path, "asset", "materialize", "-m", "matos_dagster.definitions",
                        "--select", local_cfg.asset_name, "--partition", key)
            outputs += [p.stdout, p.stderr]
    t_cluster = time.monotonic()

    # 3. The same archive, byte for byte, and equal to Kafka.
    cluster_swift = SwiftResource(auth_url=secret_swift.auth_url, user=SWIFT_USER, key=SECRET,
                                  container=container, prefix="kafka", retries=2)
    with cluster_swift.store() as store:
        remote = contents(store)
        remote_manifests = sorted(manifests(store, topic), key=lambda m: (m["partition"], m["start"]))
        assert check_archive(kafka, store, topic, cluster_group) == {p: per_partition for p in PARTS}
        for p_ in PARTS:
            rows = [r for m in remote_manifests if m["partition"] == p_ for r in read_archive(store, m)]
            assert rows == read_kafka(kafka, topic, p_)
    assert sorted(remote) == sorted(local)
    assert len([n for n in local if n.endswith(".parquet")]) == 3 * len(ranges)  # one object a slice
    for name in local:
        assert remote[name] == local[name], f"{name} differs between the local and the cluster run"
    assert remote_manifests == local_manifests and len(local_manifests) == len(ranges)

    # 4. The tasks ran on the cluster's executors, spread over both workers.
    master = spark_cluster.master_json()
    apps = [a for a in master.get("completedapps", []) + master.get("activeapps", []) if a["name"] == app_name]
    assert len(apps) == len(keys), master
    app_ids = sorted(a["id"] for a in apps)
    logs = event_logs_by_app(event_logs)
    assert len(logs) == len(keys), sorted(logs)
    tasks = {name: task_executors(events) for name, events in logs.items()}
    assert all(tasks.values()), tasks
    for name, executors in tasks.items():
        assert len(executors) == 3 and "driver" not in executors, (name, executors)
        assert len(set(executors)) == 2, (name, executors)  # both workers' executors
    for work in spark_cluster.work_dirs:
        stderr = [f for f in work.rglob("stderr")]
        assert stderr and any("Running task" in f.read_text(errors="replace") for f in stderr), work

    # 5. The key is nowhere Spark shows or keeps, nor in the CLI's output or Dagster's storage.
    sources: dict[str, dict[str, bytes]] = {
        "event log": files_under(event_logs),
        "master and worker logs": files_under(spark_cluster.root / "log"),
        "executor stdout/stderr": files_under(*spark_cluster.work_dirs),
        "master and worker UIs": {},
        "driver UI": dict(ui.pages),
        "dagster CLI output": {f"output {i}": o.encode() for i, o in enumerate(outputs)},
        "dagster storage": files_under(home),
    }
    uis = sources["master and worker UIs"]
    uis["master /json/"] = get(f"http://127.0.0.1:{spark_cluster.master_ui}/json/")
    uis["master /"] = get(f"http://127.0.0.1:{spark_cluster.master_ui}/")
    for app_id in app_ids:
        uis[f"master app {app_id}"] = get(f"http://127.0.0.1:{spark_cluster.master_ui}/app/?appId={app_id}")
    for ui_port_ in spark_cluster.worker_uis:
        for page in ("/json/", "/"):
            uis[f"worker {ui_port_} {page}"] = get(f"http://127.0.0.1:{ui_port_}{page}")
    leaks = [f"{source}: {name}" for source, blobs in sources.items() for name, blob in blobs.items()
             if SECRET.encode() in blob]
    assert not leaks, f"the Swift key appears in {leaks}"

    # Controls: each source holds something distinctive of this run, so the search reads it.
    def holds(source: str, value: str) -> bool:
        return any(value.encode() in blob for blob in sources[source].values())

    assert all(holds("event log", a) for a in [app_name, *app_ids])
    assert all(holds("master and worker logs", a) for a in app_ids)
    assert all(holds("executor stdout/stderr", a) for a in app_ids)
    assert all(holds("master and worker UIs", a) for a in [app_name, *app_ids])
    assert all(holds("driver UI", a) for a in [app_name, *app_ids]), sorted(ui.pages)
    assert holds("dagster storage", container)
    assert holds("dagster CLI output", topic)

    print(f"\ntimings: local {t_local - t0:.1f}s, cluster CLI {t_cluster - t_local:.1f}s, "
          f"total {time.monotonic() - t0:.1f}s; tasks by event log {tasks}")


# An estate: one pattern of the topics file over 25 topics of 4 partitions, a few records each.
ESTATE_TOPICS, ESTATE_PARTITIONS = 25, 4


@pytest.mark.slow  # 2-4 minutes on the shared 2 cores: a CLI run's driver, two executors, 100 slices
def test_an_estate_of_a_hundred_partitions_is_archived_by_one_batch_run_over_both_workers_of_the_cluster(
    kafka, kafka_server, swift_server, spark_cluster, tmp_path
):
    t0 = time.monotonic()
    prefix = f"estate-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i:02d}" for i in range(ESTATE_TOPICS)]
    admin = kafka.admin()  # must outlive the futures
    for f in admin.create_topics([NewTopic(n, num_partitions=ESTATE_PARTITIONS, replication_factor=1)
                                  for n in names]).values():
        f.result(timeout=60)
    # 1 to 4 records a partition, each record naming its place, so a record archived twice, lost or
    # moved shows; one producer, so each partition's offsets follow the order below.
    sent = {(n, p): [f"{n}/{p}/{i}".encode() for i in range(1 + (t + p) % 4)]
            for t, n in enumerate(names) for p in range(ESTATE_PARTITIONS)}
    _produce_estate(kafka, sent)
    ends = {tp: len(vs) for tp, vs in sent.items()}
    assert sum(ends.values()) == 250

    (tmp_path / "topics.yaml").write_text(f'topics:\n  - pattern: "{prefix}-.*"\n')
    topic_set = load_topics(tmp_path / "topics.yaml", default_group=GROUP)
    ranges = [OffsetRange(n, p, 0, end) for (n, p), end in ends.items()]
    home = new_instance(tmp_path / "dagster_home")
    with DagsterInstance.from_config(str(home)) as instance:
        for n in names:  # what the lag sensor does before it requests the batch
            instance.add_dynamic_partitions(topic_set.get(n).partitions_name,
                                            [r.key for r in ranges if r.topic == n])
    (tmp_path / "batch.json").write_text(json.dumps(ranges_config(ranges)))

    event_logs = tmp_path / "event-logs"
    event_logs.mkdir()
    container = f"estate-{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml"),
        "MATOS_KAFKA_BOOTSTRAP_SERVERS": kafka_server.bootstrap_servers,
        "MATOS_KAFKA_GROUP": GROUP,
        "MATOS_SWIFT_AUTH_URL": swift_server.auth_url,
        "MATOS_SWIFT_USER": swift_server.user,
        "MATOS_SWIFT_KEY": swift_server.key,
        "MATOS_SWIFT_CONTAINER": container,
        "MATOS_SPARK_MASTER": spark_cluster.master_url,
        "MATOS_SPARK_CONF": ";".join([
            "spark.eventLog.enabled=true",
            f"spark.eventLog.dir=file://{event_logs}",
            "spark.eventLog.compress=false",
            "spark.executor.memory=512m",
            # Both executors registered before the batch's Spark job, so its tasks can go to either.
            "spark.cores.max=2",
            "spark.scheduler.minRegisteredResourcesRatio=1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime=60s",
        ]),
        "PYSPARK_PYTHON": PYTHON,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    t_ready = time.monotonic()
    dagster(env, tmp_path, "job", "execute", "-m", "matos_dagster.definitions", "-j", "archive_ranges",
            "-c", "batch.json")
    t_run = time.monotonic()

    # One run, successful, that materialised every range of every topic.
    with DagsterInstance.from_config(str(home)) as instance:
        (run,) = instance.get_runs()
        assert run.job_name == "archive_ranges" and run.is_success, run.status
        for n in names:
            assert instance.get_materialized_partitions(AssetKey(topic_set.get(n).asset_name)) == \
                {r.key for r in ranges if r.topic == n}
    # Every partition committed to its log end, every record in exactly one manifest, as it was sent.
    tps = list(ends)
    assert many.committed(kafka, GROUP, tps) == ends
    assert {tp: high for tp, (_, high) in many.watermarks(kafka, tps).items()} == ends
    swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key=swift_server.key,
                          container=container, prefix="kafka", retries=2)
    with swift.store() as store:
        _, items = store._conn.get_container(container, full_listing=True)
        docs = [json.loads(store.get(i["name"])) for i in items if i["name"].endswith("/_manifest.json")]
        assert sorted((d["topic"], d["partition"], d["start"], d["end"]) for d in docs) == \
            sorted((r.topic, r.partition, r.start, r.end) for r in ranges), "one manifest a range, none else"
        for d in docs:  # each offset once, with the record sent to it
            rows = read_archive(store, d)
            assert [(r["offset"], r["value"]) for r in rows] == list(enumerate(sent[d["topic"], d["partition"]]))
        for n in names:  # and as the project's reader gives a topic back
            table = read_table(store, "kafka", n)
            assert list(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), table["value"].to_pylist())) \
                == [(p, i, v) for p in range(ESTATE_PARTITIONS) for i, v in enumerate(sent[n, p])]
        # and the objects as their manifests say (size, md5, records), checked for one topic: the check
        # lists and reads every manifest of the container for each topic it is given
        assert check_archive(kafka, store, names[0], GROUP) == {p: ends[names[0], p] for p in range(ESTATE_PARTITIONS)}

    # The batch's Spark job ran its tasks on both workers: two executors in the event log, and
    # each worker's own folder holds its executor of the app, which ran tasks.
    ((_, events),) = event_logs_by_app(event_logs).items()
    executors = task_executors(events)
    assert len(executors) >= 2 and "driver" not in executors, executors
    assert len(set(executors)) == 2, executors
    # Each executor's logs are served by the worker that started it: one executor a worker.
    served_by = {e["Executor ID"]: urlsplit(e["Executor Info"]["Log Urls"]["stderr"]).port
                 for e in events if e["Event"] == "SparkListenerExecutorAdded"}
    assert sorted(served_by[x] for x in set(executors)) == sorted(spark_cluster.worker_uis), served_by
    app = app_id(events)
    for work in spark_cluster.work_dirs:
        stderr = list((work / app).glob("*/stderr"))
        assert stderr and any("Running task" in f.read_text(errors="replace") for f in stderr), \
            f"worker {work.name} ran no task of {app}"
    print(f"\ntimings: topics and instance {t_ready - t0:.1f}s, batch run {t_run - t_ready:.1f}s, "
          f"total {time.monotonic() - t0:.1f}s; tasks by executor {Counter(executors)}")


def _produce_estate(kafka, sent: dict[tuple[str, int], list[bytes]]) -> None:
    p = kafka.producer()
    for (topic, partition), values in sent.items():
        for v in values:
            p.produce(topic, key=b"k", value=v, partition=partition)
            p.poll(0)
    assert p.flush(30) == 0, "records left unsent"
