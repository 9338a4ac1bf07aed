"""Dagster's `dg` CLI on the project's own layout, from the project folder, with no `-m` flags.

pyproject.toml's `[tool.dg]` names `matos_dagster.definitions` as the code location, so `dg`
works on matos_dagster/ (assets/, resources/, sensors/, definitions.py) as it is. CI validates
the definitions with `dg check defs` (this file, in `make test`). The `dagster` commands still
work (tests/cli/test_cli.py runs `dagster definitions validate`), with Dagster's SupersessionWarning.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from helpers import check_archive, new_instance, produce, read_kafka, user_env

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.resources import SwiftResource

BIN = Path(sys.executable).parent
DG = str(BIN / "dg")


def offline_env(tmp_path, topics_yaml: str = "topics:\n  - name: demo\n") -> dict:
    """A user's environment for commands that only load the definitions (no server is reached)."""
    (tmp_path / "topics.yaml").write_text(topics_yaml)
    home = new_instance(tmp_path / "dagster_home")
    return {**os.environ, "DAGSTER_HOME": str(home), "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml")}


def run(env, *args, ok=True) -> subprocess.CompletedProcess:
    # From the project folder, as the README says: dg finds pyproject.toml's [tool.dg] there.
    p = subprocess.run(list(args), env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    if ok:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "SupersessionWarning" not in p.stdout + p.stderr
    assert "Traceback" not in p.stderr or not ok
    return p


def test_dg_check_defs_validates_the_definitions_from_the_project_folder(tmp_path):
    p = run(offline_env(tmp_path), DG, "check", "defs")
    assert "All definitions loaded successfully." in p.stdout + p.stderr


def test_dg_check_defs_fails_on_a_broken_definition_and_names_it(tmp_path):
    # A topics file the definitions refuse: the code location does not load, so CI fails.
    env = offline_env(tmp_path, "topics:\n  - name: demo\n    format: csv\n")
    p = run(env, DG, "check", "defs", ok=False)
    assert p.returncode != 0
    assert "All definitions loaded successfully." not in p.stdout + p.stderr
    assert "format" in p.stdout + p.stderr and "csv" in p.stdout + p.stderr


def test_dg_list_defs_lists_the_archive_asset_jobs_sensors_and_schedules_and_a_summary_only_where_asked(tmp_path):
    p = run(offline_env(tmp_path, "topics:\n  - name: demo\n  - name: orders\n    windows_summary: true\n"),
            DG, "list", "defs", "--json")
    out = p.stdout
    for name in ("archive_demo", "add_ranges", "backfill", "archive_ranges", "lag", "monitor", "monitor_checks",
                 "restore", "verify", "days_demo", "days", "event_time_automation", "summary_orders"):
        assert f'"{name}"' in out, (name, out[-3000:])
    assert '"summary_demo"' not in out  # the example asset on a day is deployed only for a topic that asks


def test_dg_launch_archives_one_range_from_the_project_folder(tmp_path, kafka, kafka_server, swift_server,
                                                              connect_server):
    topic = f"dg-{uuid.uuid4().hex[:8]}"
    container = f"dg-{uuid.uuid4().hex[:8]}"
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {topic}\n", container=container,
                   MATOS_SPARK_MASTER=connect_server.url)
    kafka.create_topic(topic, 1)
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(30)])
    run(env, sys.executable, "-m", "matos_dagster", "add-ranges", topic)
    key = OffsetRange(topic, 0, 0, 30).key
    jobs_before = connect_server.log_file.read_text().count("INFO DAGScheduler: Got job")
    run(env, DG, "launch", "--assets", "archive_" + topic.replace("-", "_"), "--partition", key)
    # The materialisation's tasks ran on the Spark Connect server (a Dagster CLI run is its thin
    # client), whose log shows neither the Kafka nor the Swift settings the tasks' closures carry.
    server_log = connect_server.log_file.read_text()
    assert server_log.count("INFO DAGScheduler: Got job") > jobs_before
    assert swift_server.auth_url not in server_log and kafka_server.bootstrap_servers not in server_log
    swift = SwiftResource(auth_url=swift_server.auth_url, user="test:tester", key="testing", container=container)
    with swift.store() as store:
        assert check_archive(kafka, store, topic, "matos-archiver") == {0: 30}
    assert len(read_kafka(kafka, topic, 0)) == 30
