"""Dagster's sqlite storage, its tables created under the instance folder's lock.

The project's dagster.yaml names this storage (`storage: custom:`), so that whichever process
opens a new instance first, `dagster-webserver`, `dagster-daemon`, `dagster job execute`,
`dg launch`, a run worker or `matos`, creates its tables whole before another may look at them:
Dagster creates a sqlite instance's tables on first open with no lock of its own, and two
processes doing it at once can stamp a database twice (instance.py says how, and how it is
repaired). The storage is Dagster's own (runs, event logs and schedules in the folder, as
`storage: sqlite:` keeps them); only its opening takes the lock that `matos` and the make
targets take (`instance.locked`), a few milliseconds once the tables exist.
"""

from __future__ import annotations

from pathlib import Path

from dagster._core.storage.sqlite_storage import DagsterSqliteStorage

from matos_dagster import instance


class LockedSqliteStorage(DagsterSqliteStorage):
    """`DagsterSqliteStorage` in `base_dir` (the instance folder), opened under its lock."""

    def __init__(self, base_dir: str, inst_data=None):
        with instance.locked(Path(base_dir)):
            super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)
