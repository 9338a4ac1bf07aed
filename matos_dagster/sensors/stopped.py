"""The partitions the lag sensor no longer requests ranges of, as the monitor reads them.

A range that failed `policy.MAX_ATTEMPTS` times leaves its partition waiting for an operator
(core/runs/policy.py). The lag sensor keeps that in its cursor, which only it reads; so each tick
whose set of such partitions is not empty, or was not at the last tick, it also writes the set
to the instance's key-value store, one row per lag sensor, and the monitor reports each
partition in it (WARN at least) with the one command that goes on.
"""

from __future__ import annotations

import json

from dagster import DagsterInstance

TP = tuple[str, int]
LAG = "lag"  # the lag sensor's name (sensors/lag.py), before the archive's Names


def _key(sensor: str) -> str:
    return f"matos/{sensor}/stopped"


def record(instance: DagsterInstance, sensor: str, stopped: dict[TP, str]) -> None:
    """`stopped`: each partition the sensor `sensor` gave up on, with what goes on (stopped_reason)."""
    doc = [[t, p, why] for (t, p), why in sorted(stopped.items())]
    instance.run_storage.set_cursor_values({_key(sensor): json.dumps(doc)})


def read(instance: DagsterInstance, sensor: str) -> dict[TP, str]:
    """The partitions `sensor` last recorded as given up on: one query."""
    text = instance.run_storage.get_cursor_values({_key(sensor)}).get(_key(sensor))
    try:
        return {(str(t), int(p)): str(why) for t, p, why in json.loads(text)} if text else {}
    except (TypeError, ValueError):
        return {}
