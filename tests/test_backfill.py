"""Everything pending of a topic in one command (and one launch in the UI), as ONE Dagster backfill.

A `dagster-daemon` (what `make run` / `dg dev` run besides the UI) runs the backfills here: the
feature is the daemon's. The topic's batch thresholds are never reached, so its lag sensor
requests nothing and every range is archived by the backfill alone. Those daemon tests take
minutes (the daemon's backfill iterations, a run per range): `slow`, in `make test-all`. What the
command submits, and its refusals, are checked without a daemon in `make test`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from helpers import check_archive, manifests, produce, read_archive, read_kafka, user_env
from matos_dagster.jobs import backfill as bf
from matos_dagster.ranges import OffsetRange
from matos_dagster.resources import SwiftResource
from matos_dagster.settings import PROJECT_ROOT
from test_daemon import _stop_group

BIN = Path(sys.executable).parent
LOGS = PROJECT_ROOT / "test-output" / "test_backfill"
GROUP = "matos-archiver"
MATOS = [sys.executable, "-m", "matos_dagster"]


@dataclass
class Daemon:
    env: dict
    topic: str
    asset: str
    container: str
    instance: DagsterInstance
    log: Path
    proc: subprocess.Popen

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"


def wait_for(what: str, predicate, timeout: float, d: Daemon, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert d.proc.poll() is None, f"dagster-daemon exited {d.proc.returncode}:\n{d.tail()}"
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s; daemon log:\n{d.tail()}"
        time.sleep(every)
    return value


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, kafka, kafka_server, swift_server, connect_server):
    tmp = tmp_path_factory.mktemp("backfill")
    topic = f"bf-{uuid.uuid4().hex[:8]}"
    container = f"bf-{uuid.uuid4().hex[:8]}"
    # Ranges of at most 50 offsets; batch thresholds never reached: the lag sensor stays out of it.
    (tmp / "topics.yaml").write_text(
        f"topics:\n  - name: {topic}\n    group: {GROUP}\n"
        "    batch: {records: 100000000, age_s: 100000000, max_range_records: 50}\n")
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text())
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DAGSTER_HOME": str(home),
           "MATOS_TOPICS_FILE": str(tmp / "topics.yaml"),
           "MATOS_MONITOR_CRON": "0 0 1 1 *",  # the monitor's schedule stays out of the run queue
           "MATOS_KAFKA_BOOTSTRAP_SERVERS": kafka_server.bootstrap_servers,
           "MATOS_SWIFT_AUTH_URL": swift_server.auth_url, "MATOS_SWIFT_CONTAINER": container,
           "MATOS_SPARK_MASTER": connect_server.url}
    instance = DagsterInstance.from_config(str(home))  # storage created before the daemon races for it
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / "dagster-daemon.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-m", "matos_dagster.definitions"],
                                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    d = Daemon(env, topic, "archive_" + topic.replace("-", "_"), container, instance, log, proc)
    try:
        wait_for("the backfill daemon heartbeats", lambda: bf.daemon_running(instance), 300, d, every=2)
        yield d
    finally:
        try:
            left = _stop_group(proc)
        finally:
            instance.dispose()
        assert not left, "processes of dagster-daemon's group survived:\n" + "\n".join(left)


def matos(d: Daemon, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*MATOS, *args], env=d.env, cwd=cwd or PROJECT_ROOT, capture_output=True, text=True,
                          timeout=1200)


def backfills_of(d: Daemon, topic: str):
    return [b for b in d.instance.get_backfills() if b.tags.get(bf.TOPIC_TAG) == topic]


def archived_exactly_once(d: Daemon, kafka, partitions: int) -> None:
    """Every record of the topic in exactly one range, the committed offsets at the log end."""
    swift = SwiftResource(auth_url=d.env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                          container=d.container)
    with swift.store() as store:
        committed = check_archive(kafka, store, d.topic, GROUP)
        assert committed == {p: h for p, (_, h) in kafka.watermarks(d.topic, list(range(partitions))).items()}
        for p in range(partitions):
            rows = [r for m in sorted(manifests(store, d.topic), key=lambda m: m["start"]) if m["partition"] == p
                    for r in read_archive(store, m)]
            assert rows == read_kafka(kafka, d.topic, p)


@pytest.mark.slow  # the daemon's backfill iterations (every 30 s) and a run per range: minutes
def test_one_command_archives_everything_pending_as_one_backfill_the_daemon_runs(daemon, kafka):
    d = daemon
    kafka.create_topic(d.topic, 2)
    produce(kafka, d.topic, [(b"k", f"v{i}".encode(), [], 0) for i in range(80)]
            + [(b"k", f"w{i}".encode(), [], 1) for i in range(30)])
    p = matos(d, "backfill", d.topic, "--wait")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:] + d.tail()
    # Two ranges of partition 0 (at most 50 offsets each), one of partition 1.
    keys = [OffsetRange(d.topic, 0, 0, 50).key, OffsetRange(d.topic, 0, 50, 80).key, OffsetRange(d.topic, 1, 0, 30).key]
    (one,) = backfills_of(d, d.topic)
    lines = p.stdout.splitlines()
    assert lines[0] == f"backfill {one.backfill_id}: 3 range(s) of {d.topic}, {keys[0]} .. {keys[-1]}"
    assert [line for line in lines if line.startswith("archived ")] == [
        f"archived {k}: {n} records (run {r.run_id})" for k, n, r in zip(keys, (50, 30, 30), sorted(
            d.instance.get_runs(filters=RunsFilter(tags={bf.BACKFILL_TAG: one.backfill_id})),
            key=lambda r: r.tags["dagster/partition"]))]
    assert lines[-1] == f"backfill {one.backfill_id}: COMPLETED_SUCCESS"
    # One run per range, each its own partition, all in this one backfill (its page in the UI).
    runs = d.instance.get_runs(filters=RunsFilter(tags={bf.BACKFILL_TAG: one.backfill_id}))
    assert sorted(r.tags["dagster/partition"] for r in runs) == keys
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs)
    assert one.status.value == "COMPLETED_SUCCESS" and one.title == f"{d.topic}: 3 pending ranges"
    archived_exactly_once(d, kafka, 2)

    # Nothing pending now: no second backfill, nothing launched.
    again = matos(d, "backfill", d.topic)
    assert again.returncode == 0 and again.stdout.strip() == f"nothing pending in {d.topic}: no backfill"
    assert len(backfills_of(d, d.topic)) == 1


def test_the_command_records_one_backfill_of_exactly_the_pending_ranges(tmp_path, kafka, kafka_server, swift_server):
    """No daemon here (make test): what the command submits; the daemon's part is the slow test above."""
    topic = f"bfs-{uuid.uuid4().hex[:8]}"
    env = user_env(tmp_path, kafka_server, swift_server,
                   f"topics:\n  - name: {topic}\n    batch: {{max_range_records: 50}}\n",
                   container=f"bfs-{uuid.uuid4().hex[:8]}")
    kafka.create_topic(topic, 1)
    produce(kafka, topic, [(b"k", f"v{i}".encode(), [], 0) for i in range(80)])
    p = subprocess.run([*MATOS, "backfill", topic], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    keys = [OffsetRange(topic, 0, 0, 50).key, OffsetRange(topic, 0, 50, 80).key]
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        (one,) = instance.get_backfills()
        assert p.stdout.splitlines() == [
            f"backfill {one.backfill_id}: 2 range(s) of {topic}, {keys[0]} .. {keys[1]}",
            f"  progress in the UI: Runs -> Backfills -> {one.backfill_id}",
            f"  no Dagster daemon runs for {env['DAGSTER_HOME']} now: the backfill starts when one does "
            "(make run, or dg dev)"]
        assert one.status.value == "REQUESTED" and one.title == f"{topic}: 2 pending ranges"
        assert one.tags[bf.TOPIC_TAG] == topic
        asset = "archive_" + topic.replace("-", "_")
        assert instance.get_dynamic_partitions(f"{asset}_ranges") == keys
        target = one.asset_backfill_data.target_subset
        assert [k.to_user_string() for k in target.asset_keys] == [asset]
        assert sorted(target.get_partitions_subset(AssetKey(asset)).get_partition_keys()) == keys
        # Only the command's own run (the backfill job), no archive run: the daemon launches those.
        assert [r.job_name for r in instance.get_runs()] == [bf.JOB]


@pytest.mark.slow  # a second backfill through the daemon: minutes on a loaded 2-core machine
def test_the_ui_launch_of_the_backfill_job_archives_what_came_since(daemon, kafka):
    """The Launchpad's `backfill` job (here by `dg launch`, as the UI's Launch does): the same backfill."""
    d = daemon
    if not backfills_of(d, d.topic):
        kafka.create_topic(d.topic, 2)
    produce(kafka, d.topic, [(b"k", f"x{i}".encode(), [], 1) for i in range(40)])
    config = d.log.parent / "backfill.yaml"
    config.write_text(f"ops: {{add_range_keys: {{config: {{topic: {d.topic}}}}}}}\n")
    before = {b.backfill_id for b in backfills_of(d, d.topic)}
    p = subprocess.run([str(BIN / "dg"), "launch", "--job", "backfill", "-c", str(config)], env=d.env,
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (new,) = [b for b in backfills_of(d, d.topic) if b.backfill_id not in before]
    ended = wait_for("the backfill ends", lambda: bf.backfill_status(d.instance, new.backfill_id)[1] or None,
                     900, d, every=2)
    assert ended
    assert d.instance.get_backfill(new.backfill_id).status.value == "COMPLETED_SUCCESS"
    archived_exactly_once(d, kafka, 2)


def test_an_unknown_topic_or_waiting_without_a_daemon_is_refused_in_one_line_and_nothing_is_recorded(tmp_path):
    (tmp_path / "topics.yaml").write_text("topics:\n  - name: demo\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text())
    env = {**os.environ, "DAGSTER_HOME": str(home), "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml")}
    p = subprocess.run([*MATOS, "backfill", "nosuch"], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stdout == ""
    assert p.stderr.strip() == (f"python -m matos_dagster backfill: topic 'nosuch' is not in the topics file "
                                f"({tmp_path / 'topics.yaml'}); it has ['demo']")
    # --wait with no daemon for the instance: the backfill would never start, so none is made.
    p = subprocess.run([*MATOS, "backfill", "demo", "--wait"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.strip() == (f"python -m matos_dagster backfill: no Dagster daemon runs for the instance in {home}, "
                                "so the backfill would never start; start one (make run, or dg dev) and run this again")
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == [] and instance.get_backfills() == []
