"""`dagster dev` for a bench run: the archive as it runs in production, on the bench's stack.

It starts in a session of its own (webserver, daemon, code server, run workers: one process
group), in a folder with its own topics file, workspace and DAGSTER_HOME (the project's
dagster.yaml; or, with `instance="postgres"`, dagster.postgres.yaml on a PostgreSQL server of its
own: bench_instance.py), pointed at the bench's Kafka and Swift and at a Spark Connect server. The whole
group is stopped whatever fails (SIGTERM, SIGKILL after a grace period), so no run worker of a
bench outlives it. Used by the latency run (latency.py), the fault run (archive_faults.py) and the estate (estate.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from matos_dev.bench import bench_instance
from matos_dev.stack.process import free_port, group_members

WORKSPACE = ("load_from:\n  - python_module:\n      module_name: matos_dagster.definitions\n"
             "      location_name: matos_dagster\n")


@dataclass
class DagsterDev:
    proc: subprocess.Popen
    url: str
    home: Path
    log: Path
    storage: bench_instance.Instance

    def check(self) -> None:
        """Raise if `dagster dev` has exited (a bench must not wait on a stack that is gone)."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"dagster dev exited {self.proc.returncode}; see {self.log}")

    def owns(self, pid: int) -> bool:
        """Whether `pid` is a live process of this `dagster dev`'s session (a run worker, say)."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        state, _ppid, _pgrp, session = stat[stat.rindex(")") + 2:].split()[:4]
        return state != "Z" and int(session) == self.proc.pid

    @contextlib.contextmanager
    def instance(self):
        """This `dagster dev`'s Dagster instance, opened in this process for the block."""
        from dagster import DagsterInstance

        with self.storage.environment(), DagsterInstance.from_config(str(self.home)) as instance:
            yield instance


def stack_settings(stack, container: str, spark_url: str, sensor_interval_s: float) -> dict[str, str]:
    """The MATOS_* settings of `dagster dev` on the bench's Kafka and Swift and a Spark Connect server."""
    return {
        "MATOS_SENSOR_INTERVAL_S": str(int(sensor_interval_s)), "MATOS_KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
        "MATOS_SWIFT_AUTH_URL": stack.swift_server.auth_url, "MATOS_SWIFT_USER": stack.swift_server.user,
        "MATOS_SWIFT_KEY": stack.swift_server.key, "MATOS_SWIFT_CONTAINER": container,
        "MATOS_SWIFT_PREFIX": "kafka", "MATOS_SPARK_MASTER": spark_url,
    }


@contextlib.contextmanager
def running(folder: Path, topics_yaml: str, settings: dict[str, str], answer_timeout: float = 300,
            instance: str = "sqlite"):
    """`dagster dev` in `folder` on `instance` (sqlite or postgres), answering, for the block; its whole
    process group stopped at the end, then the instance's PostgreSQL server if it has one."""
    with bench_instance.running(instance, folder) as storage:
        with _running(folder, topics_yaml, settings, answer_timeout, storage) as dev:
            yield dev


@contextlib.contextmanager
def _running(folder: Path, topics_yaml: str, settings: dict[str, str], answer_timeout: float,
             storage: bench_instance.Instance):
    (folder / "topics.yaml").write_text(topics_yaml)
    (folder / "workspace.yaml").write_text(WORKSPACE)
    home = folder / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(storage.dagster_yaml)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DAGSTER_HOME": str(home),
           "MATOS_TOPICS_FILE": str(folder / "topics.yaml"), **storage.env, **settings}
    env.pop("MATOS_FAULT", None)  # a fault left in the caller's environment would fire in every run
    # The instance's storage exists before dagster dev starts, so no two processes race to make it.
    from matos_dagster.instance import prepare

    prepare(home, env=storage.env)
    port = free_port()
    dagster = str(Path(sys.executable).parent / "dagster")
    log = folder / "dagster-dev.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([dagster, "dev", "-w", str(folder / "workspace.yaml"), "-h", "127.0.0.1",
                                 "-p", str(port)], cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    dev = DagsterDev(proc, f"http://127.0.0.1:{port}", home, log, storage)
    try:
        deadline = time.monotonic() + answer_timeout
        while True:
            dev.check()
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{dev.url}/server_info", timeout=2):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"dagster dev did not answer within {answer_timeout:.0f} s; see {log}")
            time.sleep(1)
        yield dev
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen, grace: float = 60) -> None:
    """SIGTERM the process group, SIGKILL what is left after `grace` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (proc.poll() is None or group_members(proc.pid)):
        time.sleep(0.5)
    if proc.poll() is None or group_members(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
