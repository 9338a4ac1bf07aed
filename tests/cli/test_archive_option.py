"""`matos --archive NAME`: the commands on an archive of a user's project, found from its folder or
named by module, refused in one line when there is no such archive or topic. In process, no network:
the archives here have named topics only. (The user's-project test, tests/test_install.py, runs
them on a real stack from a `create-dagster` project.)"""

from __future__ import annotations

import sys

import pytest
from helpers import new_instance

from matos_dagster import library
from matos_dagster.cli import archive, main

DEFS = '''
from matos_dagster import archive_definitions
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

defs = archive_definitions({"topics": [{"name": "orders"}]}, KafkaResource(bootstrap_servers="kafka.invalid:9092"),
                           SwiftResource(auth_url="https://swift.invalid/auth/v1.0"), SparkResource(), name="eu")
'''


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with a module of definitions holding the archive `eu`, and an instance; not the
    development setup, whose MATOS_ connections the archive does not use."""
    module = f"shop_defs_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(DEFS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MATOS_DEV")
    monkeypatch.setattr(sys, "argv", ["matos"])  # the command as typed: `matos`
    monkeypatch.setenv("DAGSTER_HOME", str(new_instance(tmp_path / "home")))
    yield module
    sys.modules.pop(module, None)
    archive.choose(None)
    library.BUILT.clear()


def refusal(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def test_an_archive_of_a_module_is_found_by_its_name_and_its_topics_are_its_own(project, capsys):
    assert refusal(capsys, "--archive", "eu", "--module", project, "add-ranges", "payments") == (
        f"matos add-ranges: topic 'payments' is not in the archive 'eu' of {project}: no name or pattern "
        "matches it; it has orders")
    chosen = archive.current()
    assert chosen.job("archive_ranges").name == "eu_archive_ranges" and chosen.op("archive_batch") == "eu_archive_batch"
    assert set(chosen.resources) == {"eu_kafka", "eu_swift", "eu_spark"}
    assert archive.arguments() == ["--archive=eu", f"--module={project}"]


def test_no_such_archive_is_one_line_naming_those_there(project, capsys):
    assert refusal(capsys, "--archive", "us", "--module", project, "verify", "orders") == (
        f"matos verify: no archive named 'us' in {project} (archives there: 'eu'): give --archive the `name` "
        "of its KafkaArchive component")


def test_outside_a_dg_project_without_a_module_is_one_line_saying_where_to_run_it(project, tmp_path, capsys):
    line = refusal(capsys, "--archive", "eu", "monitor", "orders")
    assert line.startswith(f"matos monitor: no dg project in {tmp_path} or above"), line


def test_without_archive_the_repositorys_own_archive_needs_its_connections_outside_the_development_setup(
        project, capsys, monkeypatch):
    for name in ("MATOS_KAFKA_BOOTSTRAP_SERVERS", "MATOS_SWIFT_AUTH_URL", "MATOS_SWIFT_USER", "MATOS_SWIFT_KEY",
                 "MATOS_SPARK_MASTER", "MATOS_TOPICS_FILE"):
        monkeypatch.delenv(name, raising=False)
    sys.modules.pop("matos_dagster.definitions", None)  # loaded by the command, with these settings
    assert main(["add-ranges", "orders"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == "matos add-ranges: MATOS_KAFKA_BOOTSTRAP_SERVERS is not set: set it to your Kafka brokers, " \
                       "`host:port[,host:port]`"
    assert len(lines) == 6 and all(" is not set: set it to " in line for line in lines), lines
