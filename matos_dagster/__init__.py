"""matos-dagster: archive Apache Kafka topics into OpenStack Swift, batch by batch, exactly once.

In a Dagster project of one's own: `archive_definitions` (the library function) or `KafkaArchive`
(the `dg` component), and `serve_metrics` (its Prometheus exporter). Each is imported on first
use: importing the package reads no setting, reaches no server and imports no Dagster (Spark
workers import the core through it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["KafkaArchive", "archive_definitions", "serve_metrics"]

_WHERE = {"KafkaArchive": "matos_dagster.component", "archive_definitions": "matos_dagster.library",
          "serve_metrics": "matos_dagster.exporter"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'matos_dagster' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    # `dg` finds a package's components by listing it (dir) once its entry point is loaded.
    return sorted([*globals(), *__all__])
