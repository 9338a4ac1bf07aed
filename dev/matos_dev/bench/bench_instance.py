"""The Dagster instance under a bench's `dagster dev`: `sqlite` or `postgres`.

- `sqlite`: the project's dagster.yaml, storage in the instance folder (`make run`);
- `postgres`: dagster.postgres.yaml (the same settings, storage in PostgreSQL) on a PostgreSQL
  server of the bench's own, started for the block in a fresh folder and stopped by its PID
  whatever fails (`make run-postgres`'s setup, minus the shared .devstack server, so that a
  measurement starts from an empty database and leaves nothing behind). Its DAGSTER_PG_*
  settings go into `dagster dev`'s environment, so every process of it (webserver, daemon,
  code server, run workers) uses that database, and into this process's while the bench reads
  the instance (`environment`).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dev.bench import cpu
from matos_dev.stack.postgres import PostgresServer

LABELS = {"sqlite": "sqlite", "postgres": "PostgreSQL"}  # instance -> its name in a report
INSTANCE_FILES = {"sqlite": "dagster.yaml", "postgres": "dagster.postgres.yaml"}


def instances(text: str) -> list[str]:
    """`--instance`'s value: instances, comma-separated, each once (argparse's `type`)."""
    import argparse

    names = [n.strip() for n in text.split(",") if n.strip()]
    wrong = [n for n in names if n not in LABELS]
    if wrong or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r}: give sqlite, postgres or both, comma-separated "
                                         "(e.g. sqlite,postgres)")
    return names


@dataclass
class Instance:
    """What `dagster dev` needs for one instance: its dagster.yaml and the environment it reads."""

    name: str
    dagster_yaml: str
    env: dict[str, str] = field(default_factory=dict)
    server: PostgresServer | None = None

    @property
    def label(self) -> str:
        return LABELS[self.name]

    def pids(self) -> list[int]:
        """The storage server's processes: the postmaster and its backends (none on sqlite, whose
        work is done in Dagster's own processes)."""
        pid = self.server.pid() if self.server else None
        return cpu.tree(pid) if pid is not None else []

    def cpu_sample(self) -> cpu.CpuSample | None:
        """A sample of the server's CPU for `cpu.cpu_used` (group "postgres"; None on sqlite). The
        postmaster waits for its backends (a process per connection, most of them short-lived),
        so theirs counts too."""
        return cpu.cpu_sample({"postgres": self.pids()}) if self.server else None

    @contextlib.contextmanager
    def environment(self):
        """The instance's settings in this process's environment for the block (DagsterInstance
        resolves dagster.yaml's `env:` entries from it)."""
        from matos_dagster.instance import environment

        with environment(self.env):
            yield


@contextlib.contextmanager
def running(name: str, logs: Path | None = None):
    """The instance `name` for the block; on `postgres` its server is stopped at the end, whatever
    happened, and its log copied into `logs` (its data folder is removed)."""
    if name not in LABELS:
        raise ValueError(f"instance {name!r}: use one of {', '.join(LABELS)}")
    dagster_yaml = (PROJECT_ROOT / INSTANCE_FILES[name]).read_text()
    if name == "sqlite":
        yield Instance(name, dagster_yaml)
        return
    # Not under the bench's folder: as root the server runs as another user (postgres.py), who must
    # reach its data; mkdtemp's folder opened to others (o+x) as the tests' pg_server.py does.
    folder = Path(tempfile.mkdtemp(prefix="matos-bench-pg-"))
    folder.chmod(0o711)
    server = PostgresServer(folder / "postgres")
    try:
        server.start()  # a new cluster: its `dagster` database is empty
        yield Instance(name, dagster_yaml, server.instance_env(), server)
    finally:
        try:
            server.stop()
        finally:
            if logs is not None:
                with contextlib.suppress(OSError):
                    shutil.copyfile(server.log_file, logs / "postgres.log")
            shutil.rmtree(folder, ignore_errors=True)
