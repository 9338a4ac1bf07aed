"""Spark, through dagster-pyspark: a session made only when an asset first asks for it."""

from __future__ import annotations

import os
import sys
from typing import Any

from dagster import ConfigurableResource
from dagster_pyspark.resources import spark_session_from_config
from pydantic import Field, PrivateAttr

# Loopback only, and no UI unless asked for: the defaults of a process that shares a
# 2-core machine with Kafka and Swift. Any of these can be overridden by `conf`.
DEFAULT_CONF = {
    "spark.app.name": "matos-dagster",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}


def parse_conf(text: str) -> dict[str, str]:
    """`key=value;key=value` (MATOS_SPARK_CONF) into a dict, refusing what is not a pair."""
    conf: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"MATOS_SPARK_CONF: {item!r} is not key=value (pairs separated by ';')")
        conf[key.strip()] = value.strip()
    return conf


class SparkResource(ConfigurableResource):
    """A Spark session; `master` may be `local[*]` or a cluster (`spark://host:7077`)."""

    master: str = Field(default="local[*]", description="spark.master (MATOS_SPARK_MASTER).")
    conf: str = Field(
        default="",
        description="More Spark settings, `key=value;key=value` (MATOS_SPARK_CONF). Never put secrets here: "
        "Spark shows its settings in its UI and event log.",
    )
    _session: Any = PrivateAttr(default=None)

    def spark_config(self) -> dict[str, str]:
        return {**DEFAULT_CONF, "spark.master": self.master, **parse_conf(self.conf)}

    @property
    def spark_session(self) -> Any:
        if self._session is None:
            # Spark picks its own address from the host name before reading any setting;
            # this keeps it on loopback unless the environment says otherwise.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            # Python workers must run the interpreter that has this package and its
            # libraries; Spark reads only the environment for that in local mode.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self._session = spark_session_from_config(self.spark_config())
        return self._session
