"""The monitor's verdicts kept bounded on the production instance (dagster.postgres.yaml on a real
PostgreSQL server), where events are rows of one shared `event_logs` table: pruning a topic's old
verdicts deletes their rows, of that check only (tests/sensors/test_monitor_sensor.py proves the
same on sqlite, in `make test`)."""

from __future__ import annotations

import pytest
from dagster import AssetCheckEvaluation, AssetCheckKey, AssetKey, DagsterInstance
from pg_server import PRODUCTION_INSTANCE, environment, new_database, running_postgres

from matos_dagster.dagster_compat import prune_check_history

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_on_postgres_a_checks_old_runless_evaluations_go_with_their_event_rows_and_no_others(tmp_path):
    with running_postgres() as server:
        database = new_database(server, "monitor")
        (tmp_path / "dagster.yaml").write_text(PRODUCTION_INSTANCE.read_text())
        with environment(server.instance_env(database)):
            instance = DagsterInstance.from_config(str(tmp_path))
        try:
            assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
            a, b = (AssetCheckKey(AssetKey(name), "monitor") for name in ("archive_a", "archive_b"))
            for i in range(6):
                for key in (a, b):
                    instance.report_runless_asset_event(AssetCheckEvaluation(
                        asset_key=key.asset_key, check_name=key.name, passed=True, metadata={"i": i}))
            assert prune_check_history(instance, [a], 2) == 4
            history = instance.event_log_storage.get_asset_check_execution_history(a, limit=100)
            assert [h.evaluation.metadata["i"].value for h in history] == [5, 4]
            assert len(instance.event_log_storage.get_asset_check_execution_history(b, limit=100)) == 6
            with server.connect(database) as conn, conn.cursor() as cur:
                cur.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_CHECK_EVALUATION'")
                (rows,) = cur.fetchone()
            conn.close()
            assert rows == 2 + 6
        finally:
            instance.dispose()
