"""The files a deployment starts from (docs/operations/deployment.md) are what Dagster and systemd
take: the instance files load as Dagster loads them, the workspace is a Dagster workspace naming the
code server's port, each systemd unit's command exists with the options it gives, and the Helm
values (on paper: no Kubernetes here) keep the instance files' queue limits."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from matos_dagster import instance
from matos_dagster.core import settings
from matos_dagster.core.settings import PROJECT_ROOT

DEPLOY = PROJECT_ROOT / "deploy"
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
BIN = Path(sys.executable).parent
PG = {"DAGSTER_PG_HOST": "db.example", "DAGSTER_PG_PORT": "5432", "DAGSTER_PG_USERNAME": "dagster",
      "DAGSTER_PG_PASSWORD": "secret", "DAGSTER_PG_DB": "dagster"}


def exec_start(unit: Path) -> list[str]:
    (line,) = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_the_shipped_dagster_yaml_opens_as_an_instance_with_the_locked_storage_and_the_queue(tmp_path):
    from dagster import DagsterInstance

    home = tmp_path / "home"  # opened by its path: DAGSTER_HOME names another folder, or none
    home.mkdir()
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text())
    with DagsterInstance.from_config(str(home)) as opened:
        assert type(opened).__name__ == "MatosInstance"
        assert type(opened.get_ref().storage).__name__ == "LockedSqliteStorage"
        assert opened.run_coordinator.get_run_queue_config().max_concurrent_runs == 2
        assert (home / "history" / "runs.db").is_file()


def test_the_production_instance_file_is_a_valid_instance_config_on_postgres(tmp_path):
    from dagster._core.instance.config import dagster_instance_config

    (tmp_path / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.postgres.yaml").read_text())
    config, _ = dagster_instance_config(str(tmp_path))  # validated against Dagster's schema; nothing connected
    db = config["storage"]["postgres"]["postgres_db"]
    assert {k: v for k, v in db.items() if isinstance(v, dict)} == {
        "hostname": {"env": "DAGSTER_PG_HOST"}, "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USERNAME"}, "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"}}


def test_the_workspace_is_a_dagster_workspace_naming_the_code_server_the_unit_starts():
    from dagster._core.workspace.config_schema import process_workspace_config

    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    assert process_workspace_config(workspace).success
    (location,) = workspace["load_from"]
    server = exec_start(DEPLOY / "systemd" / "matos-code-server.service")
    assert server[server.index("-p") + 1] == str(location["grpc_server"]["port"])
    assert server[server.index("-h") + 1] == location["grpc_server"]["host"]
    assert server[server.index("-m") + 1] == "matos_dagster.definitions"


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_each_unit_starts_a_command_of_the_virtualenv_with_options_it_takes(unit):
    command = exec_start(unit)
    assert command[0].startswith("/opt/matos/venv/bin/"), command  # docs/operations/deployment.md's virtualenv
    program = BIN / Path(command[0]).name
    assert program.is_file(), program
    # Click parses every option before it acts on --help: an option the command lacks fails here.
    p = subprocess.run([str(program), *command[1:], "--help"], capture_output=True, text=True, timeout=120,
                       cwd=PROJECT_ROOT)
    assert p.returncode == 0 and "usage:" in p.stdout.lower(), p.stdout + p.stderr  # click, or argparse (matos)
    text = unit.read_text()
    assert "EnvironmentFile=/etc/matos/matos.env" in text and "Restart=always" in text


def test_the_environment_file_sets_only_settings_the_product_knows():
    names = re.findall(r"^(\w+)=", (DEPLOY / "matos.env.example").read_text(), flags=re.M)
    matos = {n for n in names if n.startswith("MATOS_")}
    assert matos <= set(settings.BY_NAME), matos - set(settings.BY_NAME)
    assert {n for n in names if n.startswith("DAGSTER_PG_")} == set(PG)
    assert "DAGSTER_HOME" in names


def test_the_helm_values_keep_the_instance_files_queue_limits():
    values = yaml.safe_load((DEPLOY / "helm-values.yaml").read_text())
    queue = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    for name in ("dagster.yaml", "dagster.postgres.yaml"):
        config = yaml.safe_load((PROJECT_ROOT / name).read_text())["run_coordinator"]["config"]
        assert queue["maxConcurrentRuns"] == config["max_concurrent_runs"], name
        assert [(t["key"], t["limit"]) for t in queue["tagConcurrencyLimits"]] == [
            (t["key"], t["limit"]) for t in config["tag_concurrency_limits"]], name
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["--module-name", "matos_dagster.definitions"]
    assert os.path.basename(PROJECT_ROOT / "deploy" / "helm-values.yaml") in (
        PROJECT_ROOT / "docs" / "operations" / "deployment.md").read_text()
