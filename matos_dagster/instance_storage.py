"""The project's Dagster instance: Dagster's own, whose sqlite storage is created under a lock.

The project's dagster.yaml names `MatosInstance` (`instance_class:`), so that whichever process
opens a new instance first, `dagster-webserver`, `dagster-daemon`, `dagster job execute`,
`dg launch`, a run worker or `matos`, creates its tables whole before another may look at them:
Dagster creates a sqlite instance's tables on first open with no lock of its own, and two
processes doing it at once can stamp a database twice (instance.py says how, and how it is
repaired). The instance's default storage is then `LockedSqliteStorage`, Dagster's own sqlite
storage (runs, event logs and schedules in the instance folder, as Dagster keeps them) whose
opening takes the lock that `matos` and the make targets take (`instance.locked`): a few
milliseconds once the tables exist. The folder is the instance's own, however it is opened
($DAGSTER_HOME, `DagsterInstance.from_config(path)`, `dg dev`'s temporary folder). A `storage:`
section (PostgreSQL) replaces the default; nothing else of Dagster's instance changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import yaml
from dagster import DagsterEventType, DagsterInstance, EventLogEntry
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from dagster._serdes import ConfigurableClassData

from matos_dagster import instance


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's sqlite event log, storing a batch of materialisations (Dagster's event batches,
    DAGSTER_EVENT_BATCH_SIZE) in one transaction of the run's shard and one of the index.

    Dagster's own stores a batch event by event, each in two transactions on two connections
    made for it: 11 ms of CPU a materialisation, most of an estate's thousand-range run's report
    of what it archived (jobs/archive_ranges.py reports them as one batch). Rows, tags and each
    asset's latest materialisation are what storing them one by one leaves."""

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not events or len({e.run_id for e in events}) != 1 or not all(
                e.is_dagster_event and e.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION for e in events):
            return super().store_event_batch(events)
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), [self._event_to_row(e) for e in events])
        with self.index_transaction() as conn:
            ids = [conn.execute(self.prepare_insert_event(e)).inserted_primary_key[0] for e in events]
            self._store_asset_event_tags(conn, events, ids)
            latest = {e.get_dagster_event().asset_key: (e, i) for e, i in zip(events, ids)}
            for e, i in latest.values():
                self._store_asset_event(conn, e, i)


class LockedSqliteStorage(DagsterSqliteStorage):
    """`DagsterSqliteStorage` in `base_dir` (the instance folder), opened under its lock, its event
    log storing batches of materialisations whole."""

    def __init__(self, base_dir: str, inst_data=None):
        with instance.locked(Path(base_dir)):
            super().__init__(base_dir, inst_data)
            self._event_log_storage.dispose()
            self._event_log_storage = BatchedSqliteEventLogStorage(self._event_log_storage._base_dir)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)


class MatosInstance(DagsterInstance):
    """Dagster's instance whose default storage is `LockedSqliteStorage` in the instance folder."""

    @classmethod
    def config_schema(cls) -> dict:
        return {}  # no settings of its own: dagster.yaml's are Dagster's

    @staticmethod
    def config_defaults(base_dir: str) -> dict:
        defaults = dict(InstanceRef.config_defaults(base_dir))
        defaults["storage"] = ConfigurableClassData(
            __name__, LockedSqliteStorage.__name__, yaml.dump({"base_dir": base_dir}, default_flow_style=False))
        return defaults
