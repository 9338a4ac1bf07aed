"""The operator's commands, run as a user would: load, add ranges, archive, monitor, and their refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance
from helpers import check_archive, dagster, delete_records, manifests, produce, read_archive, read_kafka, run, user_env

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import KEY_EXAMPLE, KEY_FORM, OffsetRange
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.topics import TopicConfig
from matos_dagster.resources import SwiftResource

BIN = Path(sys.executable).parent

DG = str(BIN / "dg")
MATOS = [sys.executable, "-m", "matos_dagster"]


@pytest.fixture
def project(tmp_path, kafka_server, swift_server):
    """Environment of a user whose MATOS_ settings point at the test stack."""
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {topic}\n    max_range_records: 400\n",
                   container=f"cli-{uuid.uuid4().hex[:8]}")
    return topic, env, tmp_path


@pytest.fixture
def spark_project(project, connect_server):
    """`project` with its runs on the session's Spark Connect server, as the default
    MATOS_SPARK_MASTER is the local stack's: no command starts a Spark driver of its own (a
    driver per run, `local[2]`, is what the CLI runs of test_keystone and test_security use)."""
    topic, env, tmp = project
    return topic, {**env, "MATOS_SPARK_MASTER": connect_server.url}, tmp


def matos(env, cwd, *args, ok=True) -> subprocess.CompletedProcess:
    return run(env, cwd, *MATOS, *args, ok=ok)


def keys_of(env, asset) -> list[str]:
    with instance_of(env) as instance:
        return instance.get_dynamic_partitions(f"{asset}_ranges")


@contextmanager
def instance_of(env):
    os.environ["DAGSTER_HOME"], saved = env["DAGSTER_HOME"], os.environ.get("DAGSTER_HOME")
    try:
        with DagsterInstance.get() as instance:
            yield instance
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME")
        else:
            os.environ["DAGSTER_HOME"] = saved


def refusal(p: subprocess.CompletedProcess, command: str) -> str:
    """A refusal is exit status 2 and one line: the project's message, nothing of Dagster's."""
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert lines[0].startswith(f"python -m matos_dagster {command}: "), p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "Dagster" not in p.stderr and p.stdout == "", p.stderr[-3000:]
    return p.stderr.strip()


def test_load_then_archive_everything_pending_then_monitor_from_the_cli(spark_project, kafka):
    topic, env, tmp = spark_project
    asset = "archive_" + topic.replace("-", "_")
    (tmp / "load.yaml").write_text(json.dumps({"ops": {"produce": {"config": {
        "topic": topic, "count": 1000, "value_bytes": 64, "create_partitions": 2,
        "headers": {"source": "cli-test"}}}}}))
    load = run(env, tmp, DG, "launch", "-m", "matos_dagster.definitions", "--job", "load", "-c", "load.yaml")
    assert "SupersessionWarning" not in load.stdout + load.stderr
    assert sum(h for _, h in kafka.watermarks(topic, [0, 1]).values()) == 1000

    added = matos(env, tmp, "add-ranges", topic)
    keys = keys_of(env, asset)
    # 1000 records over 2 partitions, ranges of at most 400 offsets.
    assert len(keys) >= 4 and all(k.startswith(f"{topic}:p0000") for k in keys)
    assert [line.removeprefix("added ") for line in added.stdout.splitlines() if line.startswith("added ")] == keys
    # The printed command runs as printed, from any folder, and archives the keys in offset order.
    (printed,) = [line.strip() for line in added.stdout.splitlines() if " -m matos_dagster archive " in line]
    assert printed == " ".join([sys.executable, "-m", "matos_dagster", "archive", *keys])
    archived = run(env, "/", "bash", "-c", printed)
    assert [line.removeprefix("archived ").split(":", 3)[:3] for line in archived.stdout.splitlines()
            if line.startswith("archived ")] == [
        k.split(":") for k in sorted(keys)]
    # (Dagster's own CLI archiving a key: tests/end_to_end/test_dg.py's `dg launch --assets`.)
    monitor = run(env, tmp, DG, "launch", "-m", "matos_dagster.definitions", "--job", "monitor_checks")
    assert "SupersessionWarning" not in monitor.stdout + monitor.stderr
    with instance_of(env) as instance:
        check = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [AssetCheckKey(AssetKey(asset), "monitor")])[AssetCheckKey(AssetKey(asset), "monitor")]
        evaluation = check.event.asset_check_evaluation
        assert evaluation.passed and evaluation.metadata["status"].value == "OK"
        assert evaluation.metadata["total_lag_records"].value == 0

    swift = SwiftResource(auth_url=env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                          container=env["MATOS_SWIFT_CONTAINER"])
    with swift.store() as store:
        committed = check_archive(kafka, store, topic, "matos-archiver")
        assert committed == {p: h for p, (_, h) in kafka.watermarks(topic, [0, 1]).items()}
        for p in (0, 1):
            rows = [r for m in sorted(manifests(store, topic), key=lambda m: m["start"]) if m["partition"] == p
                    for r in read_archive(store, m)]
            assert rows == read_kafka(kafka, topic, p)
            assert all(r["headers"] == [{"key": "source", "value": b"cli-test"}] for r in rows)


def test_a_malformed_key_is_refused_by_the_cli_showing_the_form_alone(project):
    topic, env, tmp = project
    message = refusal(matos(env, tmp, "archive", "not-a-key", ok=False), "archive")
    assert message == (
        "python -m matos_dagster archive: malformed archive partition key 'not-a-key': expected "
        f"{KEY_FORM}, e.g. {KEY_EXAMPLE}")


def test_a_key_not_added_yet_is_refused_with_the_command_that_adds_it(project, kafka, new_topic):
    topic, env, tmp = project
    kafka.create_topic(topic, 1)
    produce(kafka, topic, [(b"k", b"v", [])] * 10)
    key = OffsetRange(topic, 0, 0, 10).key
    message = refusal(matos(env, tmp, "archive", key, ok=False), "archive")
    assert message.splitlines()[0].endswith(f"{key} is not a range of archive_{topic.replace('-', '_')} yet; add it first with:")
    printed = message.splitlines()[1].strip()
    assert printed == f"{sys.executable} -m matos_dagster add-ranges {topic} --partition 0 --start 0 --end 10"
    run(env, "/", "bash", "-c", printed)
    # The key is a range of the asset now, which `archive` takes (archiving an added key: the tests above).
    assert keys_of(env, "archive_" + topic.replace("-", "_")) == [key]


def test_add_ranges_with_end_below_start_prints_the_message_alone_and_adds_nothing(project, kafka):
    topic, env, tmp = project
    kafka.create_topic(topic, 1)
    produce(kafka, topic, [(b"k", b"v", [])] * 60)
    message = refusal(matos(env, tmp, "add-ranges", topic, "--partition", "0", "--start", "50", "--end", "10",
                            ok=False), "add-ranges")
    assert message == "python -m matos_dagster add-ranges: --end (10) must be greater than --start (50): a range is [start, end)"
    assert keys_of(env, "archive_" + topic.replace("-", "_")) == []


def test_a_malformed_key_added_in_the_ui_is_removed_with_one_command(project):
    topic, env, tmp = project
    asset = "archive_" + topic.replace("-", "_")
    with instance_of(env) as instance:
        instance.add_dynamic_partitions(f"{asset}_ranges", ["oops typo"])  # what the UI's "Add partition" does
    removed = matos(env, tmp, "remove-key", "oops typo")
    assert removed.stdout.strip() == f"removed 'oops typo' from {asset} (what is archived in Swift stays as it is)"
    assert keys_of(env, asset) == []
    assert "nothing removed" in refusal(matos(env, tmp, "remove-key", "oops typo", ok=False), "remove-key")


# Slow (make test-all): `dg check defs` validates the same definitions in make test
# (tests/end_to_end/test_dg.py), and test_make_run's `dg dev -w workspace.yaml` loads them from this
# workspace file and runs them.
@pytest.mark.slow
def test_the_definitions_load(project):
    _, env, tmp = project
    dagster(env, PROJECT_ROOT, "definitions", "validate", "-w", "workspace.yaml")


# Slow (make test-all): test_readme's demo step runs the same `demo` (on a fresh broker), then
# `demo-data`, and asserts all of this in `make test`.
@pytest.mark.slow
def test_the_headless_demo_loads_archives_and_says_where(spark_project, kafka):
    _, env, tmp = spark_project
    (tmp / "topics.yaml").write_text("topics:\n  - name: demo\n")
    p = subprocess.run([sys.executable, "-m", "matos_dev.stack", "demo"], env=env, cwd=tmp,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    archived = [line for line in p.stdout.splitlines() if line.startswith("archived demo:p0000")]
    assert len(archived) == 4, p.stdout
    assert all(f"/{env['MATOS_SWIFT_CONTAINER']}/kafka/topic=demo/partition=" in line for line in archived)
    assert p.stdout.count("monitor: OK") == 4
    # A second `make run` loads no more demo records into the topic.
    marks = kafka.watermarks("demo", list(range(4)))
    again = subprocess.run([sys.executable, "-m", "matos_dev.stack", "demo-data"], env=env, cwd=tmp,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "topic 'demo' has 20000 records already: no demo records loaded" in again.stdout
    assert kafka.watermarks("demo", list(range(4))) == marks
    swift = SwiftResource(auth_url=env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                          container=env["MATOS_SWIFT_CONTAINER"])
    with swift.store() as store:
        committed = check_archive(kafka, store, "demo", "matos-archiver")
    assert committed == {p: h for p, (_, h) in kafka.watermarks("demo", list(range(4))).items()}


def test_after_a_loss_the_cli_acknowledges_it_and_archiving_goes_on(spark_project, kafka, spark):
    topic, env, tmp = spark_project
    kafka.create_topic(topic, 1)
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(20)])
    # [0, 5) archived (in this process: `matos archive` is the other tests'), then retention ran
    # before [5, 12) was archived.
    swift = SwiftResource(auth_url=env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                          container=env["MATOS_SWIFT_CONTAINER"], prefix="kafka")
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 5), TopicConfig(topic), kafka, store, spark)
    delete_records(kafka, topic, 0, 12)
    refused = matos(env, tmp, "add-ranges", topic, "--partition", "0", ok=False)
    assert "[5, 12) of" in refusal(refused, "add-ranges") and "were deleted from Kafka" in refused.stderr
    done = matos(env, tmp, "acknowledge-loss", topic, "--partition", "0", "--reason", "retention during an outage")
    assert done.stdout.strip() == f"{topic}/0: 7 lost offsets acknowledged and recorded in the archive"
    added = matos(env, tmp, "add-ranges", topic, "--partition", "0")
    assert f"added {OffsetRange(topic, 0, 12, 20).key}" in added.stdout
    assert "reason" in refusal(matos(env, tmp, "acknowledge-loss", topic, "--partition", "0", "--reason", " ",
                                     ok=False), "acknowledge-loss")


def test_archive_one_run_archives_every_key_given_in_one_run_of_archive_ranges(spark_project, kafka):
    topic, env, tmp = spark_project
    asset = "archive_" + topic.replace("-", "_")
    kafka.create_topic(topic, 2)
    produce(kafka, topic, [(f"k{i}".encode(), b"v", [], i % 2) for i in range(40)])
    matos(env, tmp, "add-ranges", topic)
    keys = keys_of(env, asset)
    archived = matos(env, tmp, "archive", "--one-run", *keys)
    lines = [line for line in archived.stdout.splitlines() if line.startswith("archived ")]
    assert sorted(line.split()[1].rstrip(":") for line in lines) == sorted(keys)
    assert len({line.rsplit("(run ", 1)[1] for line in lines}) == 1, "one run for them all"
    with instance_of(env) as instance:
        assert [r.job_name for r in instance.get_runs()] == ["archive_ranges", "add_ranges"]
