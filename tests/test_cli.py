"""The README's `dagster` commands, run as a user would: load, add ranges, archive, monitor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance

from helpers import check_archive, manifests, read_archive, read_kafka, user_env
from matos_dagster.resources import SwiftResource
from matos_dagster.settings import PROJECT_ROOT

DAGSTER = str(Path(sys.executable).parent / "dagster")


@pytest.fixture
def project(tmp_path, kafka_server, swift_server):
    """Environment of a user whose MATOS_ settings point at the test stack."""
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {topic}\n    max_range_records: 400\n",
                   container=f"cli-{uuid.uuid4().hex[:8]}")
    return topic, env, tmp_path


def dagster(env, cwd, *args, ok=True) -> subprocess.CompletedProcess:
    p = subprocess.run([DAGSTER, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    if ok:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def test_load_then_archive_everything_pending_then_monitor_from_the_cli(project, kafka):
    topic, env, tmp = project
    asset = "archive_" + topic.replace("-", "_")
    (tmp / "load.yaml").write_text(json.dumps({"ops": {"produce": {"config": {
        "topic": topic, "count": 1000, "value_bytes": 64, "create_partitions": 2,
        "headers": {"source": "cli-test"}}}}}))
    dagster(env, tmp, "job", "execute", "-m", "matos_dagster.definitions", "-j", "load", "-c", "load.yaml")
    assert sum(h for _, h in kafka.watermarks(topic, [0, 1]).values()) == 1000

    (tmp / "ranges.yaml").write_text(json.dumps({"ops": {"add_range_keys": {"config": {"topic": topic}}}}))
    dagster(env, tmp, "job", "execute", "-m", "matos_dagster.definitions", "-j", "add_ranges", "-c", "ranges.yaml")
    os.environ["DAGSTER_HOME"], saved = env["DAGSTER_HOME"], os.environ.get("DAGSTER_HOME")
    try:
        with DagsterInstance.get() as instance:
            keys = instance.get_dynamic_partitions(f"{asset}_ranges")
            # 1000 records over 2 partitions, ranges of at most 400 offsets.
            assert len(keys) >= 4 and all(k.startswith(f"{topic}:p0000") for k in keys)
            for key in sorted(keys):
                dagster(env, tmp, "asset", "materialize", "-m", "matos_dagster.definitions",
                        "--select", asset, "--partition", key)
            dagster(env, tmp, "job", "execute", "-m", "matos_dagster.definitions", "-j", f"monitor_{asset}")
            check = instance.event_log_storage.get_latest_asset_check_execution_by_key(
                [AssetCheckKey(AssetKey(asset), "monitor")])[AssetCheckKey(AssetKey(asset), "monitor")]
            evaluation = check.event.asset_check_evaluation
            assert evaluation.passed and evaluation.metadata["status"].value == "OK"
            assert evaluation.metadata["total_lag_records"].value == 0
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME")
        else:
            os.environ["DAGSTER_HOME"] = saved

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


def test_a_malformed_key_is_refused_by_the_cli_showing_the_form(project):
    topic, env, tmp = project
    p = dagster(env, tmp, "asset", "materialize", "-m", "matos_dagster.definitions",
                "--select", "archive_" + topic.replace("-", "_"), "--partition", "not-a-key", ok=False)
    assert p.returncode != 0 and "not-a-key" in p.stdout + p.stderr


def test_the_definitions_load(project):
    _, env, tmp = project
    dagster(env, PROJECT_ROOT, "definitions", "validate", "-w", "workspace.yaml")


def test_the_headless_demo_loads_archives_and_says_where(project, kafka):
    _, env, tmp = project
    (tmp / "topics.yaml").write_text("topics:\n  - name: demo\n")
    p = subprocess.run([sys.executable, "-m", "matos_dagster.devstack", "demo"], env=env, cwd=tmp,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    archived = [line for line in p.stdout.splitlines() if line.startswith("archived demo:p0000")]
    assert len(archived) == 4, p.stdout
    assert all(f"/{env['MATOS_SWIFT_CONTAINER']}/kafka/topic=demo/partition=" in line for line in archived)
    assert p.stdout.count("monitor: OK") == 4
    swift = SwiftResource(auth_url=env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                          container=env["MATOS_SWIFT_CONTAINER"])
    with swift.store() as store:
        committed = check_archive(kafka, store, "demo", "matos-archiver")
    assert committed == {p: h for p, (_, h) in kafka.watermarks("demo", list(range(4))).items()}
