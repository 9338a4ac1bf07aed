"""A real PostgreSQL server for the tests that run Dagster on its production storage.

`running_postgres()` starts one (matos_dev.stack.postgres) in a temporary folder on a
free port and stops it by PID whatever happens. The folder is made with mkdtemp and opened to
others (o+x) because, as root (CI), the server runs as another user, and pytest's own
temporary folders are private to their owner.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from pathlib import Path

from matos_dev.stack.postgres import PostgresServer

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.instance import environment  # noqa: F401 - the tests' `environment(values)` block

PRODUCTION_INSTANCE = PROJECT_ROOT / "dagster.postgres.yaml"


@contextlib.contextmanager
def running_postgres():
    folder = Path(tempfile.mkdtemp(prefix="matos-pg-"))
    folder.chmod(0o711)
    server = PostgresServer(folder / "postgres")
    try:
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def new_database(server: PostgresServer, prefix: str) -> str:
    """A fresh, empty database on `server`: one Dagster instance's, seen by no other test."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    server.create_database(name)
    return name

