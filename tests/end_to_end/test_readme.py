"""The README's "Working with it" commands, run exactly as written, on a stack as `make run` leaves it.

The fenced blocks of that section are run one after another in bash, in a folder laid out like
the project (`.venv` and the project files), after the headless demo has done what `make run`
does (20,000 demo records, archived). Kafka is a broker of this test's own, started just before:
the demo loader meets a fresh broker, as `make run` does (issue 12.8). Spark is the session's
Spark Connect server, as `make run`'s runs use the stack's (the default MATOS_SPARK_MASTER).

The demo step also proves what tests/cli/test_cli.py's headless demo test claims (slow there,
for `make test`'s time budget): `matos_dev.stack demo` loads, archives and says where each range
went, the monitor says OK for each partition, and a second `demo-data` loads nothing more.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

import pytest
from conftest import CACHE
from helpers import check_archive, user_env
from matos_dev.stack.kafka import KafkaServer
from matos_dev.stack.process import free_port

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.resources import KafkaResource, SwiftResource

README = PROJECT_ROOT / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    return text[start:text.index("\n## ", start + 1)]


def fenced_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def test_the_working_with_it_blocks_are_those_this_test_runs():
    blocks = fenced_blocks(section("Working with it"))
    assert blocks[0].strip() == "export MATOS_DEV=true DAGSTER_HOME=$PWD/.devstack/dagster"
    assert any("add-ranges demo" in b for b in blocks) and any(" archive demo:p" in b for b in blocks)
    assert not any(re.search(r"(^|\s)(dagster|dg|python) ", b) for b in blocks), "every command by its .venv path"


def test_make_up_creates_the_dagster_home_the_readme_exports(tmp_path):
    # A dry run prints the recipe and runs nothing: `up` makes the instance folder first.
    env = {**os.environ, "MATOS_DEVSTACK_DIR": str(tmp_path / ".devstack")}
    p = subprocess.run(["make", "--dry-run", "--always-make", "up"], cwd=PROJECT_ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    home = tmp_path / ".devstack" / "dagster"
    assert f"mkdir -p {home}" in p.stdout and f"cp dagster.yaml {home}/dagster.yaml" in p.stdout
    assert p.stdout.index(f"mkdir -p {home}") < p.stdout.index("matos_dev.stack up")


@pytest.fixture
def fresh_kafka(tmp_path_factory):
    server = KafkaServer(tmp_path_factory.mktemp("readme-kafka"), CACHE, port=free_port())
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_the_readme_commands_run_as_written_after_make_run(tmp_path, fresh_kafka, swift_server, connect_server):
    # The project's layout: its .venv and files, but a .devstack of this test's own.
    project = tmp_path / "project"
    project.mkdir()
    (project / ".venv").symlink_to(PROJECT_ROOT / ".venv")
    for name in ("dagster.yaml", "workspace.yaml", "topics.yaml", "pyproject.toml"):  # [tool.dg]: dg without -m
        (project / name).symlink_to(PROJECT_ROOT / name)
    container = f"readme-{uuid.uuid4().hex[:8]}"
    env = user_env(tmp_path, fresh_kafka, swift_server, (PROJECT_ROOT / "topics.yaml").read_text(), container,
                   MATOS_SPARK_MASTER=connect_server.url)
    home = project / ".devstack" / "dagster"
    home.mkdir(parents=True)  # what `make up` does
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text())
    env = {**env, "DAGSTER_HOME": str(home), "MATOS_DEVSTACK_DIR": str(project / ".devstack")}

    # `make run` up to the UI: demo records into a fresh broker, then everything archived.
    demo = subprocess.run([sys.executable, "-m", "matos_dev.stack", "demo"], env=env, cwd=project,
                          capture_output=True, text=True, timeout=900)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    for p in range(4):  # the keys the README names
        assert f"archived demo:p0000{p}:00000000000000000000-00000000000000005000: 5000 records" in demo.stdout
    # The headless demo says where each range went, and the monitor says OK for each partition.
    archived = [line for line in demo.stdout.splitlines() if line.startswith("archived demo:p0000")]
    assert len(archived) == 4, demo.stdout
    assert all(f"/{container}/kafka/topic=demo/partition=" in line for line in archived), archived
    assert demo.stdout.count("monitor: OK") == 4, demo.stdout
    kafka = KafkaResource(bootstrap_servers=fresh_kafka.bootstrap_servers, timeout_s=10)
    swift = SwiftResource(auth_url=swift_server.auth_url, user="test:tester", key="testing", container=container)
    marks = kafka.watermarks("demo", list(range(4)))
    with swift.store() as store:
        assert check_archive(kafka, store, "demo", "matos-archiver") == {p: h for p, (_, h) in marks.items()}
    # A second `make run` loads no more demo records into the topic.
    again = subprocess.run([sys.executable, "-m", "matos_dev.stack", "demo-data"], env=env, cwd=project,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "topic 'demo' has 20000 records already: no demo records loaded" in again.stdout
    assert kafka.watermarks("demo", list(range(4))) == marks

    env.pop("DAGSTER_HOME")  # the README's first block sets them
    env.pop("MATOS_DEV")
    script = "set -euo pipefail\n" + "\n".join(fenced_blocks(section("Working with it")))
    run = subprocess.run(["bash", "-c", script], env=env, cwd=project, capture_output=True, text=True, timeout=1800)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]
    assert "added demo:p00000:00000000000000005000-00000000000000015000" in run.stdout
    assert "archived demo:p00000:00000000000000005000-00000000000000015000: 10000 records" in run.stdout
    assert "archived demo:p00003:00000000000000000000-00000000000000005000: 5000 records" in run.stdout
    assert "monitor: OK" in run.stdout
    assert "Traceback" not in out and "SupersessionWarning" not in out and "will not be used" not in out

    with swift.store() as store:
        committed = check_archive(kafka, store, "demo", "matos-archiver")
    assert committed == {0: 15000, 1: 5000, 2: 5000, 3: 5000}  # partition 1's new records wait for the sensor
