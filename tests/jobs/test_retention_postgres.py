"""Run retention on the production instance (dagster.postgres.yaml on a real PostgreSQL server).

On sqlite a run's events are a file of their own; on PostgreSQL they are rows of one shared
`event_logs` table, which `delete_runs` must empty of the deleted runs' rows and of theirs
only (tests/jobs/test_retention.py proves the same on sqlite).
"""

from __future__ import annotations

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test
from pg_server import PRODUCTION_INSTANCE, environment, new_database, running_postgres
from test_retention import failing, small

from matos_dagster.core.runs.retention import Policy
from matos_dagster.jobs.retention import delete_runs

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def postgres():
    with running_postgres() as server:
        yield server


@pytest.fixture
def database(postgres) -> str:
    return new_database(postgres, "retention")


@pytest.fixture
def instance(postgres, database, tmp_path):
    (tmp_path / "dagster.yaml").write_text(PRODUCTION_INSTANCE.read_text())
    with environment(postgres.instance_env(database)):
        instance = DagsterInstance.from_config(str(tmp_path))
    try:
        yield instance
    finally:
        instance.dispose()


def _event_rows(postgres, database, run_ids) -> dict[str, int]:
    """Rows of `event_logs` per run id, read in PostgreSQL itself."""
    with postgres.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id, count(*) FROM event_logs WHERE run_id = ANY(%s) GROUP BY run_id", (list(run_ids),))
        rows = dict(cur.fetchall())
    conn.close()
    return rows


def test_on_postgres_old_runs_go_with_their_event_rows_and_the_newest_and_unfinished_stay(postgres, database, instance):
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    old_started = create_run_for_test(instance, job_name="small", status=DagsterRunStatus.STARTED)
    ids = [small.execute_in_process(instance=instance).run_id for _ in range(12)]  # oldest first
    failed = [failing.execute_in_process(instance=instance, raise_on_error=False).run_id for _ in range(11)]
    assert set(_event_rows(postgres, database, ids + failed)) == set(ids + failed)

    assert delete_runs(instance, Policy(keep_runs=10, keep_failed_days=14), dry_run=False) == 2
    assert _event_rows(postgres, database, ids[:2]) == {}, "a deleted run's events stay in event_logs"
    for gone in ids[:2]:
        assert instance.get_run_by_id(gone) is None
    assert set(_event_rows(postgres, database, ids[2:] + failed)) == set(ids[2:] + failed)
    for kept in ids[2:] + failed:
        assert instance.get_run_by_id(kept) is not None and instance.all_logs(kept)
    assert instance.get_run_by_id(old_started.run_id) is not None, "a run not finished is never deleted"

    assert delete_runs(instance, Policy(keep_runs=10, keep_failed_days=0), dry_run=False) == 1
    assert instance.get_run_by_id(failed[0]) is None
