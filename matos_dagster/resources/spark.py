"""Spark, through dagster-pyspark: a session made only when an asset first asks for it.

`master` is either a Spark master (`local[*]`, `spark://host:7077`: the run process starts
its own driver JVM, some seconds per run) or a Spark Connect server (`sc://host:15002`, as
the local stack runs: the run is a thin client of a long-lived Spark, which saves that
start on every run). The archive's tasks run the same way on both (core/spark/tasks.py).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any
from urllib.parse import urlsplit

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
    # A run's own driver JVM only coordinates: every job of the project (archive, compaction,
    # restore, monitor) runs its work in Python workers (core/spark/tasks.py), so the JVM holds
    # Spark's classes and task results, about 100 MiB of heap in use. Spark's default heap
    # (1g, with G1's 40-50 MiB of collector tables and a 1/64-of-RAM initial heap) is memory
    # the run never needs; the serial collector starting at 64 MiB keeps the JVM about 50 MiB
    # smaller. (defaultJavaOptions: `spark.driver.extraJavaOptions` in `conf` adds to these.)
    "spark.driver.memory": "512m",
    # C1 only (no C2 JIT): a run's driver is a short-lived JVM doing per-job work, and most of its
    # CPU was the JIT compiling (W2's archive path: the JVM 0.9 of 4.3 CPU-us per record, 4-7x
    # less with C1 alone, the tasks' CPU unchanged; `make bench` profiles). A long-lived
    # Spark Connect server (make run) does not get this: there C2 pays once.
    "spark.driver.defaultJavaOptions": "-XX:+UseSerialGC -Xms64m -XX:TieredStopAtLevel=1",
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


def _check_reachable(url: str, timeout_s: float = 5.0) -> None:
    """Fail now, naming the setting, if no server listens: the Connect client would retry for minutes."""
    try:
        where = urlsplit(url.split(";", 1)[0])
        host, port = where.hostname, where.port or 15002
    except ValueError as e:
        raise ValueError(f"MATOS_SPARK_MASTER: {url!r} is not sc://host:port ({e})") from None
    if not host:
        raise ValueError(f"MATOS_SPARK_MASTER: {url!r} is not sc://host:port")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as e:
        raise ConnectionError(
            f"no Spark Connect server answers at {host}:{port} ({e}); start the local stack's with "
            "`make up`, or set MATOS_SPARK_MASTER to a running server or to local[*]"
        ) from None


class SparkResource(ConfigurableResource):
    """Where the archive's Spark tasks run: a Spark Connect server, or a Spark driver of each run.

    `master` is a Spark Connect server (`sc://host:15002`: each run is a thin client of a
    long-lived Spark, which saves a driver's start on every run) or a `spark.master` (`local[*]`,
    `spark://host:7077`: each run starts its own driver JVM, which needs Java 17). The archive's
    tasks run the same way on both, and read Kafka and write Swift themselves: the Spark workers
    need matos-dagster installed. The session is made only when a run first uses it.

    ```python
    from matos_dagster.resources import SparkResource

    spark = SparkResource(master="sc://spark.example:15002")
    local = SparkResource(master="local[*]", conf="spark.driver.memory=1g")
    ```

    Attributes:
        master: A Spark Connect server, `sc://host:port`, or a `spark.master` (`local[*]`,
            `spark://host:7077`).
        conf: More Spark settings, `key=value` pairs separated by `;` (in a component's
            `defs.yaml`, a mapping too). A driver of the run's own defaults to a small heap (it
            only coordinates). Never put secrets here: Spark shows its settings in its UI and
            event log.
    """

    master: str = Field(
        default="local[*]",
        description="spark.master, or a Spark Connect server as sc://host:port (MATOS_SPARK_MASTER).",
    )
    conf: str = Field(
        default="",
        description="More Spark settings, `key=value;key=value` (MATOS_SPARK_CONF). Never put secrets here: "
        "Spark shows its settings in its UI and event log.",
    )
    _session: Any = PrivateAttr(default=None)

    @property
    def is_connect(self) -> bool:
        return self.master.startswith("sc://")

    def spark_config(self) -> dict[str, str]:
        if self.is_connect:
            # The server's own settings rule its Spark; a client sends only session settings.
            return {"spark.sql.session.timeZone": "UTC", **parse_conf(self.conf)}
        return {**DEFAULT_CONF, "spark.master": self.master, **parse_conf(self.conf)}

    @property
    def spark_session(self) -> Any:
        if self._session is None:
            if self.is_connect:
                # The Connect session's own builder: pyspark's generic one refuses a remote
                # session in a process that already has a classic one.
                from pyspark.sql.connect.session import SparkSession as ConnectSession

                _check_reachable(self.master)
                builder = ConnectSession.builder.remote(self.master)
                for key, value in self.spark_config().items():
                    builder = builder.config(key, value)
                self._session = builder.getOrCreate()
                # The client's default retries wait at least 10 minutes for a server that went
                # away; about 2 minutes (8 retries, back-off capped at 30 s) outlasts a restart
                # and then fails the run, which the sensor requests again.
                from pyspark.sql.connect.client.retries import DefaultPolicy

                self._session.client.set_retry_policies([DefaultPolicy(max_retries=8, max_backoff=30_000)])
                return self._session
            # Spark picks its own address from the host name before reading any setting;
            # this keeps it on loopback unless the environment says otherwise.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            # Python workers must run the interpreter that has this package and its
            # libraries; Spark reads only the environment for that in local mode.
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            self._session = spark_session_from_config(self.spark_config())
        return self._session

    def teardown_after_execution(self, context: Any) -> None:
        # A Connect session holds state on the server until released; a classic session
        # ends with the run's process.
        if self._session is not None and self.is_connect:
            self._session.stop()
            self._session = None
