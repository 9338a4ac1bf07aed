"""A crashed archive run does not stall its partition for an hour (issue 18.2), under the real daemon.

`dagster dev` (lag sensor every 10 s, Spark `local[1]`, the default heartbeat settings) archives
a one-partition topic. Twice a sensor-launched archive run is killed in the middle of its range:

1. its run worker process alone, with SIGKILL (the code server that started it survives): the
   code server sees its child end and fails the run (Dagster's own check);
2. the whole `dagster dev` with SIGKILL, as a lost machine or a killed container would be, then
   `dagster dev` started again on the same instance: nobody saw the run die, it stays STARTED,
   and only its heartbeat (dead_runs.py) tells it is dead.

Each time the range must be archived again (a later run of the same key succeeds, the group's
committed offset reaches the log end) and the verifier must find nothing wrong. The seconds from
the kill to the run failed and to the range archived are printed and written to
test-output/test_crashed_run/crashed_run-<storage>.json (the README's figures); they are not asserted.

It runs on the local instance (sqlite) and on the production one (dagster.postgres.yaml, a
PostgreSQL server of its own): the heartbeat is a run tag, the dead-run rule a sensor tick that
reads run records and writes a RUN_FAILURE, all through the instance's storage.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid

import pytest
from confluent_kafka.admin import NewTopic
from dagster import DagsterEventType, DagsterRunStatus, RunsFilter
from helpers import produce
from pg_server import new_database, running_postgres
from test_daemon import Dev, _group_members, dev_project, shows_log, start_dev, stop_dev, wait_answers, wait_for

from matos_dagster.core.runs.heartbeat import TAG as HEARTBEAT_TAG
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic
from matos_dagster.resources import SwiftResource

LOGS = PROJECT_ROOT / "test-output" / "test_crashed_run"
GROUP = "matos-archiver"
RECORDS = 2000  # per range: one batch, a run of some seconds with a Spark driver of its own
PARTITION_TAG = "dagster/partition"


def _worker_pid(dev: Dev, run_id: str) -> int | None:
    """The PID of the run's worker process, as the run's own event log says (`LOGS_CAPTURED`)."""
    for e in dev.instance.all_logs(run_id, of_type=DagsterEventType.LOGS_CAPTURED):
        if m := re.search(r"pid: (\d+)", e.message or ""):
            return int(m.group(1))
    return None


def _archiving_run(dev: Dev, after: set[str]):
    """A sensor-launched run not in `after`, started and beating: inside its archive body."""
    for run in dev.lag_runs():
        if run.run_id not in after and run.status == DagsterRunStatus.STARTED and HEARTBEAT_TAG in run.tags:
            return run
    return None


def _rearchived(dev: Dev, dead, kafka, topic: str, high: int):
    """The range of the dead run archived by a later run, and the group committed to the log end."""
    runs = dev.instance.get_runs(filters=RunsFilter(tags={PARTITION_TAG: dead.tags[PARTITION_TAG]},
                                                    statuses=[DagsterRunStatus.SUCCESS]))
    again = [r for r in runs if r.run_id != dead.run_id]
    return again and kafka.committed(topic, [0], GROUP)[0] == high and again[0]


@pytest.fixture(params=["sqlite", "postgres"])
def instance_env(request):
    """Nothing on sqlite (dagster.yaml); on postgres the DAGSTER_PG_* of a server of its own."""
    if request.param == "sqlite":
        yield {}
        return
    with running_postgres() as server:  # stopped after the test's dagster dev (the test's finally)
        yield server.instance_env(new_database(server, "crashed"))


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_a_killed_archive_run_is_failed_and_its_range_archived_again_within_minutes(
        tmp_path_factory, kafka, kafka_server, swift_server, instance_env):
    storage = "postgres" if instance_env else "sqlite"
    tmp = tmp_path_factory.mktemp(f"crashed-{storage}")
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    admin = kafka.admin()
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    del admin
    env = dev_project(
        tmp, f"topics:\n  - name: {topic}\n    group: {GROUP}\n    batch: {{records: {RECORDS}, age_s: 3600}}\n",
        f"crash-{uuid.uuid4().hex[:8]}", instance_env,
        MATOS_SENSOR_INTERVAL_S="10",
        MATOS_KAFKA_BOOTSTRAP_SERVERS=kafka_server.bootstrap_servers,
        MATOS_SWIFT_AUTH_URL=swift_server.auth_url,
        MATOS_SPARK_MASTER="local[1]",
        MATOS_SPARK_CONF="spark.ui.enabled=false;spark.sql.shuffle.partitions=1",
    )
    container = env["MATOS_SWIFT_CONTAINER"]
    for name in ("MATOS_HEARTBEAT_S", "MATOS_DEAD_RUN_AFTER_S"):  # the defaults are measured
        env.pop(name, None)
    figures: dict[str, object] = {"storage": storage, "sensor_interval_s": 10, "heartbeat_s": 15,
                                  "dead_run_after_s": 90}
    value = b"x" * 200
    dev = start_dev(env, topic, LOGS / f"dagster-dev-{storage}-1.log", instance_env)
    try:
        wait_answers(dev)
        with shows_log(dev):
            # 1. The run worker alone killed: Dagster's code server sees its child end.
            produce(kafka, topic, ((b"k", value, []) for _ in range(RECORDS)))
            run = wait_for("a sensor-launched archive run inside its range", lambda: _archiving_run(dev, set()),
                           600, dev, every=0.5)
            pid = wait_for("the run worker's PID in the run's events", lambda: _worker_pid(dev, run.run_id), 60, dev)
            os.kill(pid, signal.SIGKILL)  # a descendant of our dagster dev, named by its run's own events
            killed = time.monotonic()
            wait_for("the killed run failed", lambda: dev.instance.get_run_by_id(run.run_id).status
                     == DagsterRunStatus.FAILURE, 600, dev, every=0.5)
            figures["worker_killed_failed_after_s"] = round(time.monotonic() - killed, 1)
            again = wait_for("the range archived again", lambda: _rearchived(dev, run, kafka, topic, RECORDS),
                             900, dev, every=1)
            figures["worker_killed_rearchived_after_s"] = round(time.monotonic() - killed, 1)
            failure = dev.instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)
            figures["worker_killed_seen_by"] = next(
                (e.message[:160] for e in failure if "SIGKILL" in (e.message or "")), "(no engine event)")
            seen = {r.run_id for r in dev.lag_runs()}

            # 2. The whole dagster dev killed (a lost machine), then started again on the same instance.
            produce(kafka, topic, ((b"k", value, []) for _ in range(RECORDS)))
            run = wait_for("the next archive run inside its range", lambda: _archiving_run(dev, seen),
                           600, dev, every=0.5)
        os.killpg(dev.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        dev.proc.wait(60)
        wait_for_gone = time.monotonic() + 60
        while _group_members(dev.proc.pid) and time.monotonic() < wait_for_gone:
            time.sleep(0.5)
        assert not _group_members(dev.proc.pid), "processes of the killed dagster dev live on"
        dev.instance.dispose()
        dev = start_dev(env, topic, LOGS / f"dagster-dev-{storage}-2.log", instance_env)
        wait_answers(dev)
        with shows_log(dev):
            figures["restarted_after_s"] = round(time.monotonic() - killed, 1)
            wait_for("the dead run failed", lambda: dev.instance.get_run_by_id(run.run_id).status
                     == DagsterRunStatus.FAILURE, 900, dev, every=1)
            figures["lost_machine_failed_after_s"] = round(time.monotonic() - killed, 1)
            events = dev.instance.all_logs(run.run_id, of_type=DagsterEventType.RUN_FAILURE)
            assert events and "has not written its heartbeat" in events[-1].message, events
            wait_for("the range archived again", lambda: _rearchived(dev, run, kafka, topic, 2 * RECORDS),
                     900, dev, every=1)
            figures["lost_machine_rearchived_after_s"] = round(time.monotonic() - killed, 1)

        swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key=swift_server.key,
                              container=container)
        cfg = TopicConfig(name=topic, group=GROUP)
        with swift.store() as store:
            report = verify_topic(kafka, store, layout.join(store.params.prefix, cfg.prefix), cfg, sample=None)
        figures["verify_compared"] = report.compared
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / f"crashed_run-{storage}.json").write_text(json.dumps(figures, indent=2))
        print("CRASHED RUN " + json.dumps(figures, indent=2))
        assert report.ok, report.render()
        assert report.compared == 2 * RECORDS, report.render()
        assert again.run_id != run.run_id
    finally:
        stop_dev(dev)
