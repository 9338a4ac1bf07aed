"""A long-lived Spark Connect server for the local stack, so runs skip a JVM start each.

It is the Spark Connect server that ships with the venv's pyspark (no download), started
with pyspark's own `spark-submit` in local mode, bound to 127.0.0.1 only. Clients use
`SparkSession.builder.remote(server.url)`, or `MATOS_SPARK_MASTER=sc://127.0.0.1:<port>`.

Everything that belongs to one server lives in its `data_dir`: the chosen port, the PID
file, the log file, Spark's scratch space, warehouse, Ivy and Derby folders (so nothing
lands in whatever folder `up` was run from).

Python UDFs run in Python workers forked by the server, with the venv's python, so they
can import matos_dagster. The workers are reused and keep the modules they imported:
after changing the project's code, restart the server (`down`, then `up`).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path

from matos_dev.stack import process

DEFAULT_PORT = 15002
_SETTINGS_FILE = "devstack-spark.json"
_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


# Spark's default logging (org/apache/spark/log4j2-defaults.properties), but for one class: when a
# client goes away without releasing an execution (a run killed mid-job), the server removes it
# later and logs, at INFO, the whole execution, plan included: the task's pickled closure, which
# holds the Kafka and Swift settings the tasks need, credentials among them. A server of the
# user's own wants the same line (docs: security).
LOG4J2 = """rootLogger.level = info
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
logger.abandoned.name = org.apache.spark.sql.connect.service.SparkConnectExecutionManager
logger.abandoned.level = warn
"""


def spark_home() -> Path:
    """The venv's pyspark package folder: its bin/spark-submit and jars/ are a Spark install."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkConnectServer:
    """One Spark Connect server (driver and executor in one JVM) on 127.0.0.1.

    `port` defaults to the one saved in `data_dir` by a previous start, else 15002.
    `master` is `local[N,F]`: N task threads (`*`: one per core), each task tried up to F
    times, so a task whose Python worker was killed is run again.
    """

    def __init__(self, data_dir: Path, port: int | None = None, master: str = "local[*,3]",
                 driver_memory: str = "1g") -> None:
        self.data_dir = Path(data_dir).resolve()
        self.port = port or self._load_settings().get("port") or DEFAULT_PORT
        self.master = master
        self.driver_memory = driver_memory
        self._log_start = 0  # where this start's lines begin in the (appended) log file

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def version(self) -> str:
        """The venv's pyspark version, which is the server's Spark version."""
        return importlib.metadata.version("pyspark")

    @property
    def log_file(self) -> Path:
        return self.data_dir / "spark-connect.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "spark-connect.pid"

    def start(self, timeout: float = 120) -> None:
        """Start the server and return once it listens; a no-op if it already runs."""
        deadline = time.monotonic() + timeout
        if self.running():
            self._wait_ready(deadline)
            return
        if process.port_open(self.port):
            raise RuntimeError(
                f"127.0.0.1:{self.port} is already in use; cannot start Spark Connect for {self.data_dir}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / _SETTINGS_FILE).write_text(json.dumps({"port": self.port}, indent=2) + "\n")
        home = spark_home()
        env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP="127.0.0.1",
                   # Python workers run the venv's python, which can import matos_dagster.
                   PYSPARK_PYTHON=sys.executable)
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.python.worker.reuse": "true",
            "spark.local.dir": str(self.data_dir / "tmp"),
            "spark.sql.warehouse.dir": str(self.data_dir / "warehouse"),
            "spark.jars.ivy": str(self.data_dir / "ivy"),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.data_dir / 'derby'} "
                                             f"-Dlog4j2.configurationFile=file:{self.data_dir / 'log4j2.properties'}",
        }
        (self.data_dir / "log4j2.properties").write_text(LOG4J2)
        argv = [str(home / "bin" / "spark-submit"), "--class", _SERVER_CLASS,
                "--master", self.master, "--driver-memory", self.driver_memory]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        self._log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
        # spark-submit execs the JVM in place, so the recorded PID is the server's.
        process.start([*argv, "spark-internal"], self.pid_file, self.log_file, env=env, cwd=self.data_dir)
        try:
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server by its recorded PID (SIGTERM, SIGKILL after 30 s); no-op if not running."""
        # group=True: during start-up its process group also holds spark-submit's launcher
        # JVM. The Python workers' daemon leads a group of its own; it exits, and takes its
        # workers along, when the server's JVM exits and so closes the daemon's stdin.
        process.stop(self.pid_file, timeout=30, group=True)

    def running(self) -> bool:
        return self._pid() is not None

    def status(self) -> dict:
        pid = self._pid()
        return {
            "running": pid is not None,
            "pid": pid,
            "url": self.url,
            "master": self.master,
            "log_file": str(self.log_file),
            "data_dir": str(self.data_dir),
        }

    def _pid(self) -> int | None:
        return process.read_pid(self.pid_file)

    def _load_settings(self) -> dict:
        try:
            return json.loads((self.data_dir / _SETTINGS_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def _wait_ready(self, deadline: float) -> None:
        """Wait until the gRPC port listens (it opens once the Spark session is up)."""
        while not process.port_open(self.port):
            if not self.running():
                raise RuntimeError(
                    f"Spark Connect exited during start-up; last lines of {self.log_file}:\n{self._log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Spark Connect did not listen on 127.0.0.1:{self.port}; last lines of "
                    f"{self.log_file}:\n{self._log_tail()}")
            time.sleep(0.2)

    def _log_tail(self, lines: int = 30) -> str:
        """The last lines this start wrote to the log."""
        return process.log_tail(self.log_file, self._log_start, lines)
