"""Faults on the real stack: each test breaks something in the middle of archiving, lets the
protocol recover (re-running what failed, as the sensor would), and ends with the verifier
finding nothing wrong, or exactly the loss that was induced.

The broker and Swift are session-wide: a test that stops one starts it again, on the same
port and data, in a `finally`, and waits until it answers before going on.

Each fault test proves its fault hit the range while it was being archived: the run was still
going when the fault came and when it ended, and the fault had an effect the test saw (the
archive stalled, a task attempt failed, the run failed). An outage lasts until that effect is
seen, not a fixed time; a fault that misses its window fails the test.

The kills of the run's process and the Python worker's kill run on a Spark Connect server,
which `make run` gives every run (the run is then a thin client, and the tasks, their retries
and their Python workers are the server's), and on the classic local Spark of the test session
(the kill after the manifest on the local Spark in `make test-all` only).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pytest
from confluent_kafka.admin import NewPartitions
from dagster import DagsterRunStatus, Definitions, build_sensor_context, instance_for_test
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG
from dagster._core.test_utils import create_run_for_test
from helpers import delete_records, produce, requested_ranges
from matos_dev.stack import process

from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import MONITOR_JOB, monitor_check, monitor_job
from matos_dagster.core.archive.range_run import DataLoss, archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.spark.tasks import is_connect
from matos_dagster.core.swift import layout
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import GAP, LOSS, Report, verify_topic
from matos_dagster.resources import SparkResource
from matos_dagster.sensors.lag import lag_sensor

# What each fault did, printed at the end of each test (`pytest -s` shows it): the README's
# "Reliability" numbers come from here.
OBSERVED: dict[str, object] = {}


def config(topic: str, **kw) -> TopicConfig:
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", **kw)


def verify(kafka, store, cfg: TopicConfig, sample: int | None = None) -> Report:
    return verify_topic(kafka, store, layout.join(store.params.prefix, cfg.prefix), cfg, sample)


def assert_sound(kafka, store, cfg: TopicConfig, sample: int | None = None) -> Report:
    report = verify(kafka, store, cfg, sample)
    assert report.ok, report.render()
    return report


def load(kafka, topic: str, n: int, partition: int = 0) -> None:
    produce(kafka, topic, ((f"k{i}".encode(), f"value {i} ".encode() * 8, [("i", str(i).encode())])
                           for i in range(n)), partition=partition)


def wait_until(condition, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f}s")


def spark_for(request, on: str):
    """The Spark session a fault test's runs use: "local", the session's classic local Spark;
    "connect", a client of the session's Spark Connect server, as `make run` gives the runs."""
    if on == "local":
        return request.getfixturevalue("spark")
    server = request.getfixturevalue("connect_server")
    resource = SparkResource(master=server.url)
    request.addfinalizer(lambda: resource.teardown_after_execution(None))
    return resource.spark_session


def objects_in(store, prefix: str, r: OffsetRange) -> list[str]:
    return [i["name"] for i in store.list(layout.range_dir(prefix, r) + "/") if not i["name"].endswith(layout.MANIFEST)]


def kafka_answers(kafka, topic: str, group: str) -> bool:
    try:
        kafka.committed(topic, [0], group)
        kafka.watermarks(topic, [0])
        return True
    except Exception:  # noqa: BLE001 - not ready yet
        return False


def archive_retrying(r, cfg, kafka, swift, spark, attempts: int = 4) -> tuple[object, list[str]]:
    """Run the range until it succeeds, as the sensor requests a failed range again."""
    errors = []
    for _ in range(attempts):
        try:
            with swift.store() as store:
                return archive_range(r, cfg, kafka, store, spark), errors
        except Exception as e:  # noqa: BLE001 - whatever failed, the range is run again
            errors.append(f"{type(e).__name__}: {str(e)[:200]}")
            time.sleep(2)
    raise AssertionError(f"{r} failed {attempts} times: {errors}")


class Background:
    """archive_range in a thread (with its own Swift connection), watched from the test.

    Used as a context manager: whatever happens in the test, the run is over when the block
    is left (its Spark jobs cancelled if it still runs), so it never goes on writing to the
    shared Spark session and Swift under the next test.
    """

    def __init__(self, r, cfg, kafka, swift, spark):
        self.spark = spark
        self.pool = ThreadPoolExecutor(1)

        def run():
            with swift.store() as store:
                return archive_range(r, cfg, kafka, store, spark)

        self.future = self.pool.submit(run)

    def running(self) -> bool:
        return not self.future.done()

    def outcome(self, timeout: float) -> tuple[object | None, str | None]:
        try:
            return self.future.result(timeout=timeout), None
        except FutureTimeout:
            self.stop()
            raise AssertionError(f"the run did not end within {timeout:.0f}s (its Spark jobs were cancelled)")
        except Exception as e:  # noqa: BLE001 - a failed run is one allowed outcome
            return None, f"{type(e).__name__}: {str(e)[:300]}"

    def stop(self) -> None:
        """End the run: cancel its Spark jobs if it still runs, and wait for its thread."""
        if not self.future.done():
            if is_connect(self.spark):  # a Connect client has no SparkContext; its server cancels
                self.spark.interruptAll()
            else:
                self.spark.sparkContext.cancelAllJobs()
        try:
            self.future.exception(timeout=120)
        finally:
            self.pool.shutdown(wait=self.future.done())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class StageWatch:
    """Task attempts of the Spark stages that run while it watches (statusTracker)."""

    def __init__(self, spark):
        self.tracker = spark.sparkContext.statusTracker()
        self.stages: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.stop.is_set():
            self.stages.update(self.tracker.getActiveStageIds())
            time.sleep(0.1)

    def tasks(self) -> tuple[int, int, int]:
        """(active, completed, failed) task attempts of the stages seen so far."""
        infos = [i for i in (self.tracker.getStageInfo(s) for s in list(self.stages)) if i is not None]
        return (sum(i.numActiveTasks for i in infos), sum(i.numCompletedTasks for i in infos),
                sum(i.numFailedTasks for i in infos))

    def failed_tasks(self) -> int:
        self.stop.set()
        self.thread.join(5)
        return self.tasks()[2]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)


class ServerLogWatch:
    """Task attempts that failed on a Spark Connect server while it watches. A Connect client
    has no statusTracker; the server logs each failed attempt as `TaskSetManager: Lost task`."""

    def __init__(self, server):
        self.log = server.log_file
        self.start = self.log.stat().st_size

    def failed_tasks(self) -> int:
        with open(self.log, "rb") as log:
            log.seek(self.start)
            return log.read().count(b"TaskSetManager: Lost task")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def task_watch(request, spark):
    """What sees the failed task attempts of `spark`'s runs (see ServerLogWatch)."""
    return ServerLogWatch(request.getfixturevalue("connect_server")) if is_connect(spark) else StageWatch(spark)


def stalled(watch: StageWatch, run: Background, quiet_polls: int = 5):
    """A condition: the run's tasks stopped finishing (tasks active, none completed over the
    last `quiet_polls` polls), a task attempt failed, or the run ended. What it saw, or None."""
    history: list[tuple[int, int, int]] = []

    def seen():
        active, completed, failed = watch.tasks()
        history.append((active, completed, failed))
        if failed:
            return f"{failed} task attempt(s) failed"
        if not run.running():
            return "the run ended"
        last = history[-quiet_polls:]
        if len(last) == quiet_polls and all(a > 0 for a, _, _ in last) and len({c for _, c, _ in last}) == 1:
            return f"{active} task(s) active, none completed over {quiet_polls} polls"
        return None

    return seen


def task_failed(watch: StageWatch, run: Background):
    """A condition: a task attempt failed, or the run ended (it failed: the fault was fatal)."""

    def seen():
        failed = watch.tasks()[2]
        if failed:
            return f"{failed} task attempt(s) failed"
        if not run.running():
            return "the run ended"
        return None

    return seen


def record(name: str, **numbers) -> None:
    OBSERVED[name] = numbers
    print(f"\nOBSERVED {name}: {json.dumps(numbers, default=str)}")


# -- (a) the broker stopped in the middle of a range -------------------------------------------


def test_the_broker_stopped_in_the_middle_of_a_range(kafka, kafka_server, swift, spark, new_topic):
    topic = new_topic()
    load(kafka, topic, 20_000)
    cfg = config(topic, slice_records=500)
    r = OffsetRange(topic, 0, 0, 20_000)
    with swift.store() as store, StageWatch(spark) as watch, Background(r, cfg, kafka, swift, spark) as run:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        try:
            wait_until(lambda: len(objects_in(store, prefix, r)) >= 4, 180, "the first objects")
            kafka_server.stop()
            t0 = time.monotonic()
            written_before = len(objects_in(store, prefix, r))
            # The fault hit the range: it was being archived when the broker went.
            assert run.running() and written_before < 40, f"the run was over: {written_before} objects"
            # Down until the archive shows it: its tasks stop finishing (or one fails).
            effect = wait_until(stalled(watch, run), 120, "the archive to feel the broker's absence", 1)
            assert run.running(), f"the run ended while the broker was down ({effect})"
        finally:
            kafka_server.start()
        down_s = time.monotonic() - t0
        wait_until(lambda: kafka_answers(kafka, topic, cfg.group), 60, "Kafka answering after its restart", 1)
        done, error = run.outcome(timeout=400)
        failed_tasks = watch.failed_tasks()
        retries: list[str] = []
        if done is None:
            done, retries = archive_retrying(r, cfg, kafka, swift, spark)
        assert done.manifest["records"] == 20_000 and done.committed_after == 20_000
        report = assert_sound(kafka, store, cfg)
        assert report.compared == 20_000
        assert len(objects_in(store, prefix, r)) == len(done.manifest["objects"])  # no stray, no duplicate
    record("broker", objects_before_stop=written_before, broker_down_s=round(down_s, 1), effect_seen=effect,
           first_run_error=error, failed_task_attempts=failed_tasks, reruns=len(retries) + (error is not None),
           compared=report.compared)


# -- (b) the Swift proxy stopped in the middle of the uploads ----------------------------------


def stop_swift_proxy(swift_server) -> None:
    """Stop only the proxy, by the PID (and start time) recorded when it was started."""
    assert process.stop(swift_server.pid_files["proxy"], timeout=15), "the Swift proxy was not running"


def test_the_swift_proxy_stopped_in_the_middle_of_the_uploads(kafka, swift_server, swift, spark, new_topic):
    topic = new_topic()
    load(kafka, topic, 20_000)
    cfg = config(topic, slice_records=500)
    r = OffsetRange(topic, 0, 0, 20_000)
    with swift.store() as store, StageWatch(spark) as watch, Background(r, cfg, kafka, swift, spark) as run:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        try:
            wait_until(lambda: len(objects_in(store, prefix, r)) >= 4, 180, "the first objects")
            written_before = len(objects_in(store, prefix, r))
            stop_swift_proxy(swift_server)
            t0 = time.monotonic()
            assert run.running() and written_before < 40, f"the run was over: {written_before} objects"
            # Down until an upload was refused: a task attempt failed (or the whole run did).
            effect = wait_until(task_failed(watch, run), 120, "an upload refused while the proxy is down", 0.5)
        finally:
            swift_server.start()  # starts what is not running: the proxy
        down_s = time.monotonic() - t0
        done, error = run.outcome(timeout=400)
        failed_tasks = watch.failed_tasks()
        assert failed_tasks or error, "no task attempt failed and the run did not: the proxy's stop missed it"
        retries: list[str] = []
        if done is None:
            done, retries = archive_retrying(r, cfg, kafka, swift, spark)
        assert done.manifest["records"] == 20_000 and done.committed_after == 20_000
        report = assert_sound(kafka, store, cfg)
        assert len(objects_in(store, prefix, r)) == len(done.manifest["objects"])
    record("swift-proxy", objects_before_stop=written_before, proxy_down_s=round(down_s, 1), effect_seen=effect,
           first_run_error=error, failed_task_attempts=failed_tasks,
           reruns=len(retries) + (error is not None), compared=report.compared)


# -- (c) a Spark Python worker killed in the middle of a slice ---------------------------------


def _proc_table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (parent pid, CPU ticks used, start time, command line) of each live process."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            out[int(stat.parent.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]), cmd)
    return out


def descendants(pid: int, table: dict[int, tuple[int, int, int, str]]) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [p for p, row in table.items() if row[0] == parent]
        found += kids
        todo += kids
    return found


def python_workers(root: int) -> list[int]:
    """The Python workers forked by the pyspark.daemon of a JVM under `root`."""
    table = _proc_table()
    daemons = {p for p in descendants(root, table) if "pyspark.daemon" in table[p][3]}
    return [p for p in daemons if table[p][0] in daemons]


def busiest_python_worker(root: int | None = None) -> int | None:
    """A worker forked by our JVM's pyspark.daemon (or that of a JVM under `root`), the one
    using most CPU right now."""
    before = _proc_table()
    workers = python_workers(os.getpid() if root is None else root)
    if not workers:
        return None
    time.sleep(0.3)
    after = _proc_table()
    alive = [p for p in workers if p in after]
    return max(alive, key=lambda p: after[p][1] - before[p][1], default=None)


# On Connect, cheaper: 4 slices of about 12 objects each (about 100 bytes a record), so the
# killed attempts have put objects already: their retries must write them again under the same
# names, or strays show (a mutation that made names unique per attempt was caught so).
@pytest.mark.parametrize("on, n, slice_records, object_bytes", [("local", 20_000, 500, 64 * 1024**2),
                                                                ("connect", 8_000, 2_000, 16 * 1024)])
def test_a_spark_python_worker_killed_in_the_middle_of_a_slice(on, n, slice_records, object_bytes, kafka, swift,
                                                             new_topic, request):
    spark = spark_for(request, on)
    topic = new_topic()
    load(kafka, topic, n)
    cfg = config(topic, slice_records=slice_records, object_bytes=object_bytes)
    r = OffsetRange(topic, 0, 0, n)
    with swift.store() as store, task_watch(request, spark) as watch, Background(r, cfg, kafka, swift, spark) as run:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        wait_until(lambda: len(objects_in(store, prefix, r)) >= 4, 180, "the first objects")
        if on == "local":  # the busiest worker of our JVM (this process's child): ours
            victim = wait_until(busiest_python_worker, 60, "a Python worker of our Spark")
            os.kill(victim, signal.SIGKILL)
        else:
            # The Connect server's slices take about a second, and a worker that has just finished
            # one still looks busy: a victim chosen by its CPU was an idle one, which Spark only
            # discards. So every worker of the server (this session's) is killed, again until the
            # server reports a failed task attempt (or the run ends).
            jvm = process.read_pid(request.getfixturevalue("connect_server").pid_file)

            def killed_a_slice():
                for victim in python_workers(jvm):
                    os.kill(victim, signal.SIGKILL)
                try:
                    return wait_until(lambda: watch.failed_tasks() or not run.running(), 2, "a failed attempt")
                except TimeoutError:
                    return None

            wait_until(killed_a_slice, 60, "a slice's worker killed", every=0)
        written_before = len(objects_in(store, prefix, r))
        assert run.running(), f"the run was over: {written_before} objects"
        done, error = run.outcome(timeout=400)
        failed_tasks = watch.failed_tasks()
        # The worker was running a slice: its task attempt failed and was run again (or the run failed).
        assert failed_tasks or error, "no task attempt failed and the run did not: the kill missed every slice"
        retries: list[str] = []
        if done is None:
            done, retries = archive_retrying(r, cfg, kafka, swift, spark)
        assert done.manifest["records"] == n and done.committed_after == n
        report = assert_sound(kafka, store, cfg)
        assert len(objects_in(store, prefix, r)) == len(done.manifest["objects"])
    record(f"python-worker-{on}", objects_before_kill=written_before, first_run_error=error,
           failed_task_attempts=failed_tasks,
           reruns=len(retries) + (error is not None), compared=report.compared)


# -- (d) the run's process killed between objects, manifest and commit -------------------------

_RUN = """
import json, os, sys, time
from pathlib import Path
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource
from matos_dagster.core.topics import TopicConfig

a = json.loads(sys.argv[1])
kafka = KafkaResource(bootstrap_servers=a["bootstrap"], timeout_s=10)
swift = SwiftResource(auth_url=a["auth_url"], user=a["user"], key=os.environ["MATOS_SWIFT_KEY"],
                      container=a["container"], prefix="kafka", retries=2)
spark = SparkResource(master=a["master"], conf=a["conf"]).spark_session
barrier = a.get("barrier")
if barrier:  # start archiving only when every process has its Spark session
    Path(barrier, str(os.getpid())).touch()
    while len(list(Path(barrier).iterdir())) < a["parties"]:
        time.sleep(0.05)
t0 = time.time()
with swift.store() as store:
    done = archive_range(OffsetRange(**a["range"]), TopicConfig(**a["topic"]), kafka, store, spark)
print(json.dumps({"records": done.manifest["records"], "committed_after": done.committed_after,
                  "t0": t0, "t1": time.time()}))
spark.stop()
"""


def run_archive_process(r: OffsetRange, cfg: TopicConfig, kafka_server, swift, fault: str | None = None,
                        barrier: Path | None = None, parties: int = 1, master: str = "local[2]") -> subprocess.Popen:
    """The archive of `r` in a process of its own, on its own local Spark or on a Connect server (`master`)."""
    local = not master.startswith("sc://")
    args = {"bootstrap": kafka_server.bootstrap_servers, "auth_url": swift.auth_url, "user": swift.user,
            "master": master, "conf": "spark.ui.showConsoleProgress=false" if local else "",
            "container": swift.container, "range": dict(vars(r)), "barrier": str(barrier) if barrier else None,
            "parties": parties, "topic": {"name": cfg.name, "group": cfg.group, "slice_records": cfg.slice_records}}
    env = {**os.environ, "MATOS_SWIFT_KEY": swift.key}
    env.pop("MATOS_FAULT", None)
    if fault:
        env["MATOS_FAULT"] = fault
    # Files, not pipes: nobody reads a pipe while the run goes on, and Spark logs a lot.
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    proc = subprocess.Popen([sys.executable, "-c", _RUN, json.dumps(args)], env=env, cwd=PROJECT_ROOT,
                            stdout=out, stderr=err, text=True, start_new_session=True)
    proc.files = (out, err)
    proc.started = time.monotonic()
    return proc


def wait_with_descendants(proc: subprocess.Popen, timeout: float) -> tuple[int, str, str, list[str]]:
    """Wait for the process; then for every process it started (its Spark JVM) to be gone too.

    Returns the exit code, its output, and the command lines of descendants still alive 30 s
    after it died (which are then killed by PID, since this test started them).
    """
    seen: dict[int, tuple[int, str]] = {}  # pid -> (start time, command line)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        table = _proc_table()
        for p in descendants(proc.pid, table):
            seen.setdefault(p, (table[p][2], table[p][3]))
        time.sleep(0.5)
    if proc.poll() is None:  # over time: end it (ours, by its PID) and fail below
        proc.kill()
        proc.wait(30)
    proc.exited = time.monotonic()
    out, err = (f.seek(0) or f.read() for f in proc.files)
    for f in proc.files:
        f.close()

    def survivors():
        table = _proc_table()
        return [p for p, (start, _) in seen.items() if p in table and table[p][2] == start]

    try:
        wait_until(lambda: not survivors(), 30, "the run's JVM to exit after it", 0.5)
        left = []
        proc.jvm_gone_s = time.monotonic() - proc.exited
    except TimeoutError:
        left = [seen[p][1][:120] for p in survivors()]
        for p in survivors():
            os.kill(p, signal.SIGKILL)
    return proc.returncode, out, err, left


# The kill after the manifest on Connect in `make test`: a run process on the local Spark starts
# its own JVM (about 11 s more on the 2-core CI), and after-objects-local proves already that the
# killed run's JVM goes with it. On the local Spark too in `make test-all` (slow).
@pytest.mark.parametrize("point, on", [("after-objects", "local"), ("after-objects", "connect"),
                                       ("after-manifest", "connect"),
                                       pytest.param("after-manifest", "local", marks=pytest.mark.slow)])
def test_the_run_killed_between_objects_manifest_and_commit(point, on, kafka, kafka_server, swift, new_topic, request):
    spark = spark_for(request, on)
    # On Connect the killed run is a client only: the objects were written by the server's tasks,
    # and the server, which outlives the run, serves the run that follows.
    master = request.getfixturevalue("connect_server").url if on == "connect" else "local[2]"
    topic = new_topic()
    load(kafka, topic, 2_000)
    cfg = config(topic, slice_records=300)
    first, second = OffsetRange(topic, 0, 0, 1_000), OffsetRange(topic, 0, 1_000, 2_000)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        archive_range(first, cfg, kafka, store, spark)

        proc = run_archive_process(second, cfg, kafka_server, swift, point, master=master)
        code, out, err, left = wait_with_descendants(proc, 300)
        assert code == -signal.SIGKILL, out + err[-3000:]
        assert not left, f"processes of the killed run outlived it: {left}"
        assert kafka.committed(topic, [0], cfg.group) == {0: 1_000}  # never committed past the archive
        written = objects_in(store, prefix, second)
        assert len(written) == 4  # 1000 offsets in slices of 300
        before = verify(kafka, store, cfg)  # the crash left nothing wrong, only an unfinished range
        assert before.ok, before.render()
        has_manifest = store.get(layout.manifest_name(prefix, second)) is not None
        assert has_manifest == (point == "after-manifest")

        again = archive_range(second, cfg, kafka, store, spark)
        assert again.committed_after == 2_000 and again.manifest["records"] == 1_000
        assert sorted(objects_in(store, prefix, second)) == sorted(written)  # rewritten in place, no duplicate
        report = assert_sound(kafka, store, cfg)
        assert report.compared == 2_000
    record(f"kill-{point}-{on}", run_s=round(proc.exited - proc.started, 1), jvm_gone_s=round(proc.jvm_gone_s, 1),
           objects_left=len(written), manifest_left=has_manifest,
           notes_before_rerun=before.notes, committed_before=1_000, committed_after=again.committed_after)


# -- (e) records deleted by retention before they were archived --------------------------------


def test_records_deleted_by_retention_before_archiving_are_reported_as_loss_loudly(
        kafka, swift, spark, spark_resource, new_topic):
    topic = new_topic()
    load(kafka, topic, 100)
    cfg = config(topic)
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 20), cfg, kafka, store, spark)
        delete_records(kafka, topic, 0, 60)  # what retention does to [20, 60) before its turn

        with pytest.raises(DataLoss, match=r"offsets \[20, 60\) of .* were deleted from Kafka .* lost") as run_error:
            archive_range(OffsetRange(topic, 0, 20, 100), cfg, kafka, store, spark)
        report = verify(kafka, store, cfg)
        assert not report.problems and [(p.kind, p.start, p.end) for p in report.loss] == [(LOSS, 20, 60)]
        assert not report.ok and "DATA LOSS (40 offsets)" in report.render()

        check = monitor_check(cfg)
        defs = Definitions(assets=[archive_asset(cfg)], asset_checks=[check], jobs=[monitor_job([check])],
                           resources={"kafka": kafka, "swift": swift, "spark": spark_resource})
        with instance_for_test() as instance:
            result = defs.resolve_job_def(MONITOR_JOB).execute_in_process(instance=instance)
        (evaluation,) = result.get_asset_check_evaluations()
        assert not evaluation.passed and evaluation.metadata["status"].value == "ERROR"
        assert "records deleted before they were archived: [20, 60)" in evaluation.description

        # The operator goes on from the log start: the loss stays on the record, nothing else appears.
        kafka.commit(topic, {0: 60}, cfg.group)
        archive_range(OffsetRange(topic, 0, 60, 100), cfg, kafka, store, spark)
        after = verify(kafka, store, cfg)
        assert not after.problems and [(p.start, p.end) for p in after.loss] == [(20, 60)], after.render()
        assert after.compared == 40
    record("retention", run_error=str(run_error.value)[:160], verifier_loss=[(20, 60)],
           monitor=evaluation.metadata["status"].value)


# -- (f), (g): the sensor's logic, with offsets moved and partitions added ---------------------


class Sensor:
    """Ticks of a topic's lag sensor; each requested range is archived, its run recorded."""

    def __init__(self, topic: TopicConfig, kafka, swift, spark, instance):
        self.topic, self.kafka, self.swift, self.spark, self.instance = topic, kafka, swift, spark, instance
        self.definition = lag_sensor(TopicSet([topic]), 30)
        self.cursor: str | None = None
        self.archived: list[OffsetRange] = []

    def tick(self):
        context = build_sensor_context(instance=self.instance, cursor=self.cursor,
                                       sensor_name=self.definition.name, resources={"kafka": self.kafka})
        result = self.definition(context)
        self.cursor = result.cursor
        return result

    def requested(self, result) -> list[tuple[OffsetRange, str]]:
        return requested_ranges(result)

    def run(self, r: OffsetRange, run_key: str) -> None:
        """What the run the daemon launches does, and its record in the instance."""
        self.archive(r)
        self.succeeded(r, run_key)

    def archive(self, r: OffsetRange) -> None:
        with self.swift.store() as store:
            archive_range(r, self.topic, self.kafka, store, self.spark)

    def succeeded(self, r: OffsetRange, run_key: str) -> None:
        self.archived.append(r)
        create_run_for_test(self.instance, status=DagsterRunStatus.SUCCESS,
                            tags={RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: self.definition.name})

    def drain(self, ticks: int = 20) -> None:
        """Tick and run what is requested until nothing is."""
        for _ in range(ticks):
            requests = self.requested(self.tick())
            if not requests:
                return
            for r, key in requests:
                self.run(r, key)
        raise AssertionError(f"still requesting ranges after {ticks} ticks")


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def test_the_committed_offset_moved_back_and_forward_by_an_administrator(kafka, swift, spark, new_topic, instance):
    topic = new_topic()
    load(kafka, topic, 400)
    cfg = config(topic, batch_records=50, batch_age_s=3600, max_range_records=100)
    sensor = Sensor(cfg, kafka, swift, spark, instance)
    (r, key), = sensor.requested(sensor.tick())
    sensor.run(r, key)
    assert kafka.committed(topic, [0], cfg.group) == {0: 100}

    kafka.commit(topic, {0: 40}, cfg.group)  # back: [40, 100) would be archived twice if followed
    (r, key), = sensor.requested(sensor.tick())
    assert (r.start, r.end) == (100, 200)
    sensor.run(r, key)
    assert kafka.committed(topic, [0], cfg.group) == {0: 200}  # the archive's prefix, not 40 + 100
    with swift.store() as store:
        assert_sound(kafka, store, cfg)

    kafka.commit(topic, {0: 250}, cfg.group)  # forward: [200, 250) will never be archived
    sensor.drain()
    assert [(x.start, x.end) for x in sensor.archived] == [(0, 100), (100, 200), (250, 350), (350, 400)]
    assert kafka.committed(topic, [0], cfg.group) == {0: 400}
    with swift.store() as store:
        report = verify(kafka, store, cfg)
    assert not report.loss and [(p.kind, p.start, p.end) for p in report.problems] == [(GAP, 200, 250)], report.render()
    assert report.compared == 350
    record("offset-moved", ranges=[(x.start, x.end) for x in sensor.archived],
           verifier=[p.message for p in report.problems])


def test_partitions_added_while_the_sensor_runs(kafka, swift, spark, new_topic, instance):
    topic = new_topic(partitions=1)
    load(kafka, topic, 150)
    cfg = config(topic, batch_records=1, batch_age_s=3600, max_range_records=100, slice_records=40)
    sensor = Sensor(cfg, kafka, swift, spark, instance)
    (r, key), = sensor.requested(sensor.tick())
    assert (r.partition, r.start, r.end) == (0, 0, 100)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sensor.archive, r)
        admin = kafka.admin()
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)  # while the range is archived
        load(kafka, topic, 120, partition=1)
        load(kafka, topic, 80, partition=2)
        running.result(timeout=300)
    sensor.succeeded(r, key)
    sensor.drain()
    marks = kafka.watermarks(topic, [0, 1, 2])
    assert kafka.committed(topic, [0, 1, 2], cfg.group) == {p: high for p, (_, high) in marks.items()}
    assert {x.partition for x in sensor.archived} == {0, 1, 2}
    with swift.store() as store:
        report = assert_sound(kafka, store, cfg)
    assert report.compared == 350 and [s.partition for s in report.partitions] == [0, 1, 2]
    record("partitions-added", ranges=[str(x) for x in sensor.archived], compared=report.compared)


# -- (h) two runs of the same range at the same moment -----------------------------------------


def test_two_processes_archiving_the_same_range_at_once(kafka, kafka_server, swift, spark, new_topic, tmp_path):
    topic = new_topic()
    load(kafka, topic, 6_000)
    cfg = config(topic, slice_records=500)
    r = OffsetRange(topic, 0, 0, 6_000)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [run_archive_process(r, cfg, kafka_server, swift, barrier=barrier, parties=2) for _ in range(2)]
    results = [wait_with_descendants(p, 400) for p in procs]
    for code, out, err, left in results:
        assert code == 0, out + err[-3000:]
        assert not left
    a, b = (json.loads(out.strip().splitlines()[-1]) for _, out, _, _ in results)
    overlap_s = min(a["t1"], b["t1"]) - max(a["t0"], b["t0"])
    assert overlap_s > 0, "the two runs did not overlap"
    assert a["records"] == b["records"] == 6_000
    assert kafka.committed(topic, [0], cfg.group) == {0: 6_000}
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        report = assert_sound(kafka, store, cfg)
        assert len(objects_in(store, prefix, r)) == 12
    assert report.compared == 6_000
    record("two-runs", overlap_s=round(overlap_s, 1), committed_after=[a["committed_after"], b["committed_after"]],
           compared=report.compared)
