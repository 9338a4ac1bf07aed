"""`make bench-estate` on both Dagster instances: sqlite (dagster.yaml, `make run`'s) and the
production one (dagster.postgres.yaml on PostgreSQL, `make run-postgres`'s), each size on each,
the report side by side; the PostgreSQL server a fresh one per measurement, stopped whatever fails.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import processes_of_this_session
from dagster import DagsterInstance
from matos_dev.bench import bench_instance, estate
from matos_dev.stack import process
from pg_server import PRODUCTION_INSTANCE

from matos_dagster.core.settings import PROJECT_ROOT


def _children(pid: int) -> set[int]:
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.add(int(entry.name))
            except OSError:
                continue
    return out


def _start(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.mark.timeout(300)
def test_the_postgres_instance_is_an_empty_database_of_its_own_server_stopped_when_the_block_fails(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    with pytest.raises(RuntimeError, match="the measurement failed"):
        with bench_instance.running("postgres", tmp_path) as storage:
            server = storage.server
            pid = server.pid()
            assert pid is not None and process.pid_alive(pid)
            # make run-postgres's instance file, its DAGSTER_PG_* naming this server's `dagster` database
            assert storage.dagster_yaml == PRODUCTION_INSTANCE.read_text()
            assert storage.env == server.instance_env("dagster") and storage.env["DAGSTER_PG_PORT"] == str(server.port)
            assert "DAGSTER_PG_HOST" not in os.environ
            (home / "dagster.yaml").write_text(storage.dagster_yaml)
            with storage.environment(), DagsterInstance.from_config(str(home)) as instance:
                assert type(instance.run_storage).__name__ == "PostgresRunStorage"
                assert instance.get_runs() == []  # fresh: no other measurement's runs
            assert "DAGSTER_PG_HOST" not in os.environ  # set for the block only
            # the server's processes, for its CPU: the postmaster and its backends
            # (its checkpointer, writers, ...: each a session of its own, so found by parent)
            pids = storage.pids()
            assert pids[0] == pid and set(pids[1:]) == _children(pid) and len(pids) > 3
            assert set(storage.cpu_sample().procs) == {(p, _start(p)) for p in storage.pids()}
            raise RuntimeError("the measurement failed")
    assert not any(process.pid_alive(p) for p in pids)
    assert not server.data_dir.parent.exists()  # its data removed ...
    assert "database system is shut down" in (tmp_path / "postgres.log").read_text()  # ... its log kept


def test_the_sqlite_instance_is_the_projects_dagster_yaml_with_nothing_started(tmp_path):
    with bench_instance.running("sqlite", tmp_path) as storage:
        assert storage.dagster_yaml == (PROJECT_ROOT / "dagster.yaml").read_text()
        assert storage.env == {} and storage.server is None and storage.pids() == [] and storage.cpu_sample() is None


def test_an_unknown_instance_is_refused_in_one_line_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exit:
        estate.main(["--instance", "sqlite,mysql"])
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("argument --instance: 'sqlite,mysql': give sqlite, postgres or both, comma-separated "
                        "(e.g. sqlite,postgres)")


def test_the_report_has_a_column_per_size_and_instance_side_by_side():
    def result(partitions, instance, idle):
        return {"partitions": partitions, "topics": partitions // 4, "per_topic": 4, "instance": instance,
                "first_backlog_s": 1.0, "steady": {"median_s": 2.0, "p95_s": 3.0, "not_committed": 0},
                "idle_cores": idle, "monitor_oldest_verdict_s": 4.0, "runs": {"archive_ranges": 5}}

    sqlite_idle = {"daemon_and_code_server": 0.05}
    pg_idle = {"daemon_and_code_server": 0.04, "postgres": 0.02}
    md = estate.markdown([result(100, "sqlite", sqlite_idle), result(100, "postgres", pg_idle),
                          result(1000, "sqlite", sqlite_idle), result(1000, "postgres", pg_idle)])
    lines = md.splitlines()
    assert lines[0] == ("| figure | 100 partitions, sqlite | 100 partitions, PostgreSQL | 1,000 partitions, sqlite "
                        "| 1,000 partitions, PostgreSQL | target |")
    assert "| idle CPU, daemon + code server, cores | 0.05 | 0.04 | 0.05 | 0.04 | < 0.1 |" in lines
    assert "| idle CPU, PostgreSQL server, cores | – | 0.02 | – | 0.02 |  |" in lines
    assert "| a record in each quiet partition every, s | – | – | – | – |  |" in lines  # no steady workload given
    # sqlite alone (or results from before the instances): no PostgreSQL row
    assert "PostgreSQL" not in estate.markdown([result(100, "sqlite", sqlite_idle)])


@pytest.mark.slow  # its own Kafka, Swift, Spark Connect, PostgreSQL and dagster dev, then a minute's wait: ~4 min
@pytest.mark.timeout(1800)
def test_bench_estate_measures_a_tiny_estate_on_postgres_and_leaves_nothing_running(tmp_path):
    before = set(processes_of_this_session())
    assert estate.main(["--partitions", "2x1", "--idle-s", "5", "--steady-s", "20", "--busy-latency-s", "0",
                        "--instance", "postgres", "--out", str(tmp_path)]) == 0
    [r] = json.loads((tmp_path / "estate.json").read_text())
    assert r["instance"] == "postgres" and r["partitions"] == 2
    assert r["first_backlog_s"] > 0 and r["steady"]["not_committed"] == 0 and r["steady"]["p95_s"] > 0
    assert r["runs"].get("archive_ranges", 0) >= 1 and r["monitor_oldest_verdict_s"] is not None
    assert r["idle_cores"]["postgres"] >= 0
    md = (tmp_path / "estate.md").read_text().splitlines()
    assert md[0] == "| figure | 2 partitions, PostgreSQL | target |"
    for line in md[2:]:
        assert line.split("|")[2].strip() not in ("", "None"), line  # every figure filled in
    # Every Dagster process used PostgreSQL: nothing made a sqlite storage in the instance folder.
    [folder] = tmp_path.glob("estate-2x1-postgres-*")
    assert not list((folder / "dagster_home").rglob("*.db")), list((folder / "dagster_home").rglob("*.db"))
    assert "database system is shut down" in (folder / "postgres.log").read_text()
    deadline = time.monotonic() + 30
    while (left := set(processes_of_this_session()) - before) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, {pid: processes_of_this_session().get(pid) for pid in left}


def test_each_size_may_carry_its_own_period():
    assert estate.size("100@10", 60.0) == (25, 4, 10.0)  # N partitions: topics of 4
    assert estate.size("100x1", 60.0) == (100, 1, 60.0)  # no period: --quiet-every-s's
    assert estate.size("250x4@30", 60.0) == (250, 4, 30.0)
