"""The PostgreSQL server of the production instance: started by the project on loopback,
stopped by PID, and dagster.postgres.yaml an instance on it with dagster.yaml's settings."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile

import psycopg2
import pytest
import yaml
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter
from dagster._core.errors import DagsterInvalidConfigError
from matos_dev.stack import process
from matos_dev.stack.postgres import PostgresServer
from pg_server import PRODUCTION_INSTANCE, environment, new_database, running_postgres

from matos_dagster.core.settings import PROJECT_ROOT

pytestmark = pytest.mark.timeout(300)


def _env_leaves(tree) -> list:
    """Every value of the tree that is not an `env:` reference."""
    if isinstance(tree, dict) and set(tree) == {"env"}:
        return []
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _env_leaves(v)]
    return [tree]


def test_the_production_instance_is_dagster_yaml_on_postgres_storage_read_from_the_environment():
    local = yaml.safe_load((PROJECT_ROOT / "dagster.yaml").read_text())
    production = yaml.safe_load(PRODUCTION_INSTANCE.read_text())
    storage = production.pop("storage")
    # `make run` keeps its embedded sqlite, created under the instance's lock (instance_storage.py).
    assert local.pop("instance_class") == {"module": "matos_dagster.instance_storage", "class": "MatosInstance"}
    # Same queue, limits, run monitoring and retention: dagster.yaml stays the one source.
    assert production == local
    assert "storage" not in local
    assert set(storage) == {"postgres"}
    # No literal value (host, password, ...) in the file: each one is an `env:` entry, but for
    # the driver's name.
    db = dict(storage["postgres"]["postgres_db"])
    assert db.pop("scheme") == "postgresql+psycopg2"
    assert _env_leaves(storage["postgres"] | {"postgres_db": db}) == []
    names = {v["env"] for v in db.values()}
    assert names == {"DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD",
                     "DAGSTER_PG_DB"}


def test_postgres_runs_on_loopback_with_a_password_keeps_its_data_and_stops_by_pid():
    with running_postgres() as server:
        pid = server.pid()
        assert pid is not None and process.pid_alive(pid)
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW listen_addresses")
            assert cur.fetchone() == ("127.0.0.1",)
            cur.execute("SHOW unix_socket_directories")
            assert cur.fetchone() == ("",)
            cur.execute("CREATE TABLE kept (n int)")
            cur.execute("INSERT INTO kept VALUES (42)")
        conn.close()
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(host="127.0.0.1", port=server.port, user="matos", password="wrong",
                             dbname="dagster", connect_timeout=10)
        # The password is the server's own, in a file only its owner reads.
        assert os.stat(server.state_file).st_mode & 0o077 == 0

        assert server.stop() is True
        assert not process.pid_alive(pid) and server.pid() is None
        assert not process.port_open(server.port)
        assert server.stop() is False  # stopping a stopped server is a no-op

        server.start()  # same folder: same port, same data, no initdb
        assert server.pid() != pid
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT n FROM kept")
            assert cur.fetchall() == [(42,)]
        conn.close()


def test_a_taken_port_is_refused_with_the_port_named(tmp_path_factory):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = PostgresServer(tmp_path_factory.mktemp("pg") / "postgres", port=port)
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port} is taken"):
            server.start()
        assert server.pid() is None and not (server.pgdata / "PG_VERSION").exists()


def test_the_production_instance_keeps_runs_in_postgres_and_names_a_missing_setting(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(PRODUCTION_INSTANCE.read_text())
    with running_postgres() as server:
        db = new_database(server, "instance")
        settings = server.instance_env(db)
        with environment(settings):
            instance = DagsterInstance.from_config(str(home))
        try:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
            assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
            assert instance.run_coordinator.get_run_queue_config().max_concurrent_runs == 2
            run = instance.add_run(DagsterRun(job_name="archive_t", run_id="0" * 32 + "aaaa",
                                              status=DagsterRunStatus.STARTED, tags={"dagster/partition": "t:p00000:a"}))
            assert [r.run_id for r in instance.get_runs(RunsFilter(tags={"dagster/partition": "t:p00000:a"}))] \
                == [run.run_id]
        finally:
            instance.dispose()
        # The run is in PostgreSQL itself, where another machine's daemon would find it.
        with server.connect(db) as conn, conn.cursor() as cur:
            cur.execute("SELECT run_id, status FROM runs")
            assert cur.fetchall() == [(run.run_id, "STARTED")]
        conn.close()

    missing = {k: v for k, v in settings.items() if k != "DAGSTER_PG_PASSWORD"}
    with environment(missing):
        saved = os.environ.pop("DAGSTER_PG_PASSWORD", None)
        try:
            with pytest.raises(DagsterInvalidConfigError, match="DAGSTER_PG_PASSWORD"):
                DagsterInstance.from_config(str(home))
        finally:
            if saved is not None:
                os.environ["DAGSTER_PG_PASSWORD"] = saved


def test_the_local_stack_runs_postgres_only_when_asked_and_down_stops_it(monkeypatch, capsys):
    from matos_dev.stack.__main__ import main
    from matos_dev.stack.stack import StackError, local_stack, postgres_enabled, postgres_server, servers

    folder = tempfile.mkdtemp(prefix="matos-stack-")
    os.chmod(folder, 0o711)  # as root the server runs as another user, who must reach its data
    monkeypatch.setenv("MATOS_DEVSTACK_DIR", folder)
    try:
        monkeypatch.delenv("MATOS_DEVSTACK_DAGSTER_STORAGE", raising=False)
        assert not postgres_enabled()
        assert "postgres" not in [s.name for s in servers(local_stack())]
        monkeypatch.setenv("MATOS_DEVSTACK_DAGSTER_STORAGE", "mysql")
        with pytest.raises(StackError, match="MATOS_DEVSTACK_DAGSTER_STORAGE is 'mysql'; use sqlite or postgres"):
            postgres_enabled()

        monkeypatch.setenv("MATOS_DEVSTACK_DAGSTER_STORAGE", "postgres")
        server = postgres_server()
        server.start()
        try:
            (row,) = [s for s in servers(local_stack()) if s.name == "postgres"]
            assert row.pid == server.pid() and row.port == server.port
            # `down` stops it, whatever the setting says by then.
            monkeypatch.setenv("MATOS_DEVSTACK_DAGSTER_STORAGE", "sqlite")
            pid = server.pid()
            assert main(["down"]) == 0
            assert re.search(rf"stopped postgres +PID {pid}\b", capsys.readouterr().out)
            assert server.pid() is None and not process.pid_alive(pid)
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
