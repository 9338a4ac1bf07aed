"""A run's many materialisations are stored as Dagster's event batches (matos_dagster/materialisations.py).

An estate's batch run reports a thousand ranges. On the project's sqlite instance they are stored
in one transaction per shard (instance_storage.py), on PostgreSQL one insert per asset; either way
every partition key reads as materialised and each asset's latest materialisation is its last.
"""

from __future__ import annotations

import os

import pytest
from dagster import AssetKey, AssetMaterialization, DagsterEventType, DagsterInstance, job, op
from pg_server import PRODUCTION_INSTANCE, environment, new_database, running_postgres

from matos_dagster.instance_storage import BatchedSqliteEventLogStorage
from matos_dagster.materialisations import BATCH_SIZE, log_materialisations

ASSETS, KEYS = 10, 4


@op
def report(context):
    log_materialisations(context, [AssetMaterialization(f"topic_{a}", partition=f"range_{k}", metadata={"k": k})
                                   for a in range(ASSETS) for k in range(KEYS)])


@job
def reporting():
    report()


def _every_key_and_the_latest_of_each_asset(instance) -> None:
    for a in range(ASSETS):
        key = AssetKey(f"topic_{a}")
        assert instance.get_materialized_partitions(key) == {f"range_{k}" for k in range(KEYS)}
        latest = instance.get_latest_materialization_events([key])[key]
        assert latest is not None and latest.asset_materialization.partition == f"range_{KEYS - 1}", a


@pytest.fixture
def clean_environment(monkeypatch):
    """This process's environment as a run worker's starts: no event batches asked for."""
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != BATCH_SIZE})


def test_on_sqlite_a_runs_materialisations_are_stored_as_one_batch(tmp_path, clean_environment, monkeypatch):
    (tmp_path / "dagster.yaml").write_text((PRODUCTION_INSTANCE.parent / "dagster.yaml").read_text())
    one_by_one = []
    store_event = BatchedSqliteEventLogStorage.store_event

    def stored(self, event):
        one_by_one.append(event.dagster_event_type)
        return store_event(self, event)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "store_event", stored)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert isinstance(instance.event_log_storage, BatchedSqliteEventLogStorage)
        assert reporting.execute_in_process(instance=instance).success
        _every_key_and_the_latest_of_each_asset(instance)
    assert DagsterEventType.ASSET_MATERIALIZATION not in one_by_one


def test_on_postgres_each_assets_materialisations_are_a_batch_of_their_own(tmp_path, clean_environment):
    with running_postgres() as server:
        (tmp_path / "dagster.yaml").write_text(PRODUCTION_INSTANCE.read_text())
        with environment(server.instance_env(new_database(server, "batches"))):
            instance = DagsterInstance.from_config(str(tmp_path))
        try:
            assert reporting.execute_in_process(instance=instance).success
            _every_key_and_the_latest_of_each_asset(instance)
        finally:
            instance.dispose()
