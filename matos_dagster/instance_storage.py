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

import yaml
from dagster import DagsterInstance
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.sqlite_storage import DagsterSqliteStorage
from dagster._serdes import ConfigurableClassData

from matos_dagster import instance


class LockedSqliteStorage(DagsterSqliteStorage):
    """`DagsterSqliteStorage` in `base_dir` (the instance folder), opened under its lock."""

    def __init__(self, base_dir: str, inst_data=None):
        with instance.locked(Path(base_dir)):
            super().__init__(base_dir, inst_data)

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
