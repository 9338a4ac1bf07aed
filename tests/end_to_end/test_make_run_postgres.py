"""`make run-postgres`: `make run` on the production instance (dagster.postgres.yaml, PostgreSQL).

The stack, the demo records, then `dg dev` with the local PostgreSQL server (.devstack/data/postgres)
started for it: the sensor's runs are stored in PostgreSQL (not in the sqlite instance of `make
run`), and when `dg dev` is stopped the server is stopped too, by its PID. Slow (make test-all):
the whole stack and two servers' starts, minutes on the shared 2-core machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance
from matos_dev.stack.postgres import PostgresServer
from test_make_run import answers, group_gone, group_members, stack_env

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.resources import KafkaResource


def succeeded_runs(server: PostgresServer) -> list[str]:
    """The partitions of the successful archive runs in the instance's PostgreSQL tables."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT t.value FROM runs r JOIN run_tags t ON t.run_id = r.run_id "
                        "WHERE r.status = 'SUCCESS' AND t.key = 'dagster/partition'")
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_make_run_postgres_runs_dagster_on_postgresql_and_stops_the_server_after(output_dir):
    # mkdtemp, opened to others (o+x): as root the server runs as another user (tests/pg_server.py).
    root = Path(tempfile.mkdtemp(prefix="matos-run-pg-"))
    root.chmod(0o711)
    env, dport = stack_env(root / "devstack")
    for name in [k for k in env if k.startswith("DAGSTER_PG_")]:
        env.pop(name)  # only what the server gives must count
    server = PostgresServer(root / "devstack" / "data" / "postgres")
    log_path = output_dir / "make-run-postgres.log"
    log = open(log_path, "wb")
    make = subprocess.Popen(["make", "run-postgres", f"DAGSTER_PORT={dport}"], cwd=PROJECT_ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    kafka = KafkaResource(bootstrap_servers=env["MATOS_KAFKA_BOOTSTRAP_SERVERS"], timeout_s=5)
    try:
        deadline = time.monotonic() + 900
        while not answers(f"http://127.0.0.1:{dport}/server_info"):
            assert make.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the UI did not answer within 900 s"
            time.sleep(2)
        assert server.running(), "dg dev answers, but the PostgreSQL server is not running"
        # The lag sensor archives demo records, and its runs are stored in PostgreSQL.
        deadline = time.monotonic() + 900
        while not (done := succeeded_runs(server)):
            assert make.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "no archive run succeeded within 900 s"
            time.sleep(5)
        assert all(key.startswith("demo:") for key in done), done
        assert any(c for c in kafka.committed("demo", kafka.partitions("demo")).values()), "nothing committed"
        # ... and none in the sqlite instance of `make run` (`make up` prepares its folder).
        sqlite_home = root / "devstack" / "dagster"
        if (sqlite_home / "history").exists():
            with DagsterInstance.from_config(str(sqlite_home)) as instance:
                assert instance.get_runs() == [], "runs were stored in the sqlite instance"
        pid = server.pid()

        # Ctrl-C's SIGINT (to the whole foreground group, as a terminal sends it): dg dev ends, then
        # the server is stopped by its PID.
        os.killpg(make.pid, signal.SIGINT)
        make.wait(300)
        assert server.pid() is None, "the PostgreSQL server still runs after dg dev ended"
        assert not Path(f"/proc/{pid}").exists() or b"postgres" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    finally:
        try:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(make.pid, signal.SIGTERM)
            try:
                make.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(make.pid, signal.SIGKILL)
                make.wait(30)
        finally:
            server.stop()  # a no-op when the make target stopped it
            subprocess.run(["make", "down"], cwd=PROJECT_ROOT, env=env, capture_output=True, timeout=300)
            log.close()
            shutil.rmtree(root, ignore_errors=True)
    assert group_gone(make.pid, 60), f"left behind: {group_members(make.pid)}"
