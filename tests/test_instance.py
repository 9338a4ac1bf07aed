"""The Dagster instance no two commands can break: its storage is created once, under a lock.

Dagster creates a sqlite instance's storage on first open, unlocked: commands started at once on a
fresh DAGSTER_HOME can stamp `history/runs.db` twice, after which every command fails with
"more than one head" (Dagster issue 27390). No servers are needed: the commands fail on a
missing partition key after they opened the instance, as in the issue's reproduction.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from matos_dev.stack.process import free_port

from matos_dagster import instance
from matos_dagster.core.settings import PROJECT_ROOT

MATOS = [sys.executable, "-m", "matos_dagster"]
KEY = "demo:p00000:00000000000000000000-00000000000000000001"
PRODUCTION_INSTANCE = PROJECT_ROOT / "dagster.postgres.yaml"
# The instance file a user copies into their DAGSTER_HOME (docs/operations/deployment.md).
SHIPPED_INSTANCE = PROJECT_ROOT / "dagster.yaml"
BIN = Path(sys.executable).parent


def stamps(home) -> dict[str, list[str]]:
    out = {}
    for db in instance.SQLITE_DBS:
        with sqlite3.connect(home / db) as conn:
            out[db] = [r[0] for r in conn.execute("select version_num from alembic_version")]
    return out


def start(home, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    return subprocess.Popen([*MATOS, *args], env={**clean, "DAGSTER_HOME": str(home), **env}, cwd=home.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run(home, *args, **env) -> subprocess.CompletedProcess:
    p = start(home, *args, **env)
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_commands_started_at_once_on_fresh_instances_leave_each_usable(tmp_path):
    """Rounds of three commands at once on a new, empty DAGSTER_HOME: each answers with its own
    refusal alone, and the instance is stamped once, usable by the next command. Without the
    lock, about half the rounds leave two stamps."""
    homes = []
    for round_ in range(6):
        home = tmp_path / f"home{round_}"
        home.mkdir()  # a user's own empty DAGSTER_HOME
        procs = [start(home, "remove-key", KEY) for _ in range(3)]
        outcomes = [(p.wait(300), p.stdout.read(), p.stderr.read()) for p in procs]
        for code, out, err in outcomes:
            lines = [line for line in err.splitlines() if "had no dagster.yaml" not in line]
            assert code == 2 and lines == [
                f"python -m matos_dagster remove-key: no archive asset has the partition key {KEY!r}; nothing removed"
            ], err
        assert all(len(revisions) == 1 for revisions in stamps(home).values()), (round_, stamps(home))
        # The project's dagster.yaml, said once: by one of the three, never again.
        assert sum("had no dagster.yaml" in err for _, _, err in outcomes) == 1
        homes.append(home)
    # What the next command does first on each instance, after its round (in this process: six more
    # commands cost a busy 2-core machine about 15 s): the instance is ready, its dagster.yaml is not
    # said again, and Dagster opens it.
    from dagster import DagsterInstance

    for round_, home in enumerate(homes):
        said = []
        assert instance.prepare(home, say=said.append) == home and said == [], (round_, said)
        with DagsterInstance.from_config(str(home)) as ready:
            assert ready.get_runs_count() == 0, round_


def test_an_instance_the_race_broke_is_named_in_one_line_and_repaired_by_one_command(tmp_path):
    home = instance.prepare(tmp_path / "home", say=lambda line: None)
    with sqlite3.connect(home / "history" / "runs.db") as conn:  # what the race leaves
        conn.execute("insert into alembic_version values (?)", (instance.OLD_STAMP,))

    broken = run(home, "remove-key", KEY)
    assert broken.returncode == 2 and len(broken.stderr.splitlines()) == 1, broken.stderr
    assert "history/runs.db has 2 alembic revisions" in broken.stderr and "27390" in broken.stderr
    assert "instance --repair" in broken.stderr and "Traceback" not in broken.stderr

    repaired = run(home, "instance", "--repair")
    assert repaired.returncode == 0 and "repaired history/runs.db" in repaired.stdout, repaired.stderr
    assert all(len(revisions) == 1 for revisions in stamps(home).values())
    after = run(home, "remove-key", KEY)
    assert after.returncode == 2 and "nothing removed" in after.stderr, after.stderr


def test_a_repair_of_stamps_the_race_cannot_leave_changes_nothing(tmp_path):
    home = instance.prepare(tmp_path / "home", say=lambda line: None)
    with sqlite3.connect(home / "history" / "runs.db") as conn:
        conn.execute("insert into alembic_version values ('0123456789ab')")
    with pytest.raises(instance.InstanceError, match="not the two this race leaves"):
        instance.repair(home)
    assert len(stamps(home)["history/runs.db"]) == 2


def test_the_postgres_instance_without_its_variables_is_one_line_naming_them(tmp_path):
    home = tmp_path / "dagster-pg"
    home.mkdir()
    (home / "dagster.yaml").write_text(PRODUCTION_INSTANCE.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PG_")}
    p = subprocess.run([*MATOS, "remove-key", KEY], env={**env, "DAGSTER_HOME": str(home)}, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr.splitlines() == [
        f"python -m matos_dagster remove-key: the Dagster instance in {home} reads DAGSTER_PG_DB, DAGSTER_PG_HOST, "
        "DAGSTER_PG_PASSWORD, DAGSTER_PG_PORT, DAGSTER_PG_USERNAME from the environment, which are not set: "
        "`make up` with MATOS_DEVSTACK_DAGSTER_STORAGE=postgres prints them for the local PostgreSQL, and "
        "`make run-postgres` sets them"
    ]


def test_make_up_and_make_run_postgres_create_the_instance_before_anything_opens_it(tmp_path):
    env = {**os.environ, "MATOS_DEVSTACK_DIR": str(tmp_path / ".devstack")}
    for target, before in (("up", "matos_dev.stack up"), ("run-postgres", "matos_dev.stack demo-data")):
        p = subprocess.run(["make", "--dry-run", "--always-make", target], cwd=PROJECT_ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert "-m matos_dagster.instance" in p.stdout, p.stdout
        assert p.stdout.index("-m matos_dagster.instance") < p.stdout.index(before)


def test_the_command_make_up_runs_creates_a_fresh_instance_and_returns(tmp_path):
    """`python -m matos_dagster.instance HOME`, as `make up` runs it: the lock it takes while Dagster
    opens the storage is the one the storage takes, so it does not wait for itself."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((PROJECT_ROOT / "dagster.yaml").read_text())
    p = subprocess.run([sys.executable, "-m", "matos_dagster.instance", str(home)], cwd=PROJECT_ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "Dagster instance ready" in p.stdout, p.stdout + p.stderr


# Dagster's own commands, as a user or their service manager starts them. The one-shot runs are
# given a run config Dagster refuses after it opened the instance (no Kafka is reached); the
# services are stopped once they say they have opened it.
BAD_CONFIG = "ops:\n  produce:\n    config:\n      count: not-a-number\n"
SERVING = {"dagster-daemon": "Instance is configured with the following daemons",
           "dagster-webserver": "Serving dagster-webserver on"}
AT_ONCE = [
    # Dagster's own CLI, four at once (make test: they load no code location).
    pytest.param(["dagster instance info", "dagster run list"] * 2, id="cli"),
    # Two runs launched from a shell or a scheduler at the same moment, each pair (slow: each loads
    # the code location, and four of them take a busy 2-core machine 20 s a round).
    pytest.param(["dagster job execute", "dagster job execute", "dg launch", "dg launch"], id="runs",
                 marks=pytest.mark.slow),
    # A service manager starting the services together, and runs beside them (slow: the services
    # load the code location before they say they are up).
    pytest.param(["dagster-daemon", "dagster-webserver", "dagster job execute", "dg launch"], id="services",
                 marks=pytest.mark.slow),
]
REFUSED = ("dagster job execute", "dg launch")  # they end on the bad run config
ROUNDS = 5


def dagster_command(name: str, config: Path) -> list[str]:
    workspace = str(PROJECT_ROOT / "workspace.yaml")
    return {
        "dagster instance info": [str(BIN / "dagster"), "instance", "info"],
        "dagster run list": [str(BIN / "dagster"), "run", "list"],
        "dagster job execute": [str(BIN / "dagster"), "job", "execute", "-m", "matos_dagster.definitions",
                                "-j", "load", "-c", str(config)],
        "dg launch": [str(BIN / "dg"), "launch", "--job", "load", "--config", str(config)],
        "dagster-daemon": [str(BIN / "dagster-daemon"), "run", "-w", workspace],
        "dagster-webserver": [str(BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1",
                              "-p", str(free_port())],
    }[name]


@pytest.mark.parametrize("commands", AT_ONCE)
def test_dagster_s_own_commands_started_at_once_on_fresh_instances_leave_each_usable(tmp_path, commands):
    """Rounds of Dagster's own commands started at once on a new DAGSTER_HOME holding the project's
    dagster.yaml, as a user or a service manager starts them: no `matos` command prepares the
    instance first. Each database is stamped once and the next Dagster command works. With
    Dagster's own sqlite storage (the dagster.yaml before instance_storage.py), about half the
    rounds leave a database stamped twice."""
    config = tmp_path / "bad-config.yaml"
    config.write_text(BAD_CONFIG)
    clean = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    for round_ in range(ROUNDS):
        home = tmp_path / f"home{round_}"
        home.mkdir()
        (home / "dagster.yaml").write_text(SHIPPED_INSTANCE.read_text())
        env = {**clean, "DAGSTER_HOME": str(home)}
        procs = []
        for i, name in enumerate(commands):
            log = open(tmp_path / f"{round_}-{i}.log", "w+")
            # From the project folder, as dg wants it; each in its own session, stopped by its PID.
            procs.append((name, subprocess.Popen(dagster_command(name, config), env=env, cwd=PROJECT_ROOT,
                                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log))
        try:
            deadline = time.monotonic() + 240
            for name, p, log in procs:
                while p.poll() is None if name not in SERVING else SERVING[name] not in text(log):
                    assert p.poll() is None or name not in SERVING, (name, text(log)[-3000:])
                    assert time.monotonic() < deadline, (name, text(log)[-3000:])
                    time.sleep(0.2)
                if name in REFUSED:  # the run config, after it had opened the instance
                    assert "DagsterInvalidConfigError" in text(log), (name, text(log)[-3000:])
                elif name not in SERVING:
                    assert p.returncode == 0, (name, text(log)[-3000:])
        finally:
            for _, p, log in procs:
                if p.poll() is None:  # a service, and the code server it started: its session, by its PID
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(30)
                log.close()
        assert all(len(revisions) == 1 for revisions in stamps(home).values()), (round_, stamps(home))
        from dagster import DagsterInstance  # the next process to open it: this one

        with DagsterInstance.from_config(str(home)) as after:
            assert after.get_runs_count() == 0  # it answers (a refused run config records no run)


def text(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()
