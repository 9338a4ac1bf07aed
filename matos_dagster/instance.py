"""The Dagster instance the project's commands use: its storage made once, completely, under a lock.

Dagster makes a sqlite instance's storage when a process first opens it, with no lock: when
two processes open a new DAGSTER_HOME at the same moment, one can create the tables and stamp
them at alembic's head while the other, finding tables but no stamp yet, stamps them at the
revision Dagster assumes for tables of its own older releases. `alembic_version` then holds two
rows, and every later command, `dg dev` included, fails with "more than one head" (Dagster
issue 27390, about half the time with three commands at once). So every place the project
creates or first opens an instance (the CLI, `make up`, `make run`, `make run-postgres`, the
tests' helpers) calls `prepare` first: it opens the instance once under an exclusive lock of
the folder, so that its storage exists whole before anything else may open it. Dagster's own
processes (webserver, daemon, `dagster job execute`, `dg launch`, run workers) take the same lock
through the instance class the project's dagster.yaml names (instance_storage.py).

Usage: `python -m matos_dagster.instance [HOME]` prepares HOME (default $DAGSTER_HOME);
`--repair` mends an instance broken this way.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from matos_dagster.core import settings

# The project's dagster.yaml (a symlink in the source tree, the file itself in the wheel).
TEMPLATE = Path(__file__).resolve().parent / "dagster.yaml"
LOCK = ".matos-instance.lock"
# For storage that is not in the folder (PostgreSQL): which configuration was prepared.
PREPARED = ".matos-instance-prepared"
# Dagster's sqlite storage, under the folder (dagster.yaml's default `storage`).
SQLITE_DBS = ("history/runs.db", "history/runs/index.db", "schedules/schedules.db")
# What Dagster stamps on tables it finds without a stamp (dagster._core.storage.sqlite).
OLD_STAMP = "5771160a95ad"


class InstanceError(RuntimeError):
    """The instance cannot be used as it is; the one-line message says what to do."""


def default_home() -> Path:
    """$DAGSTER_HOME; unset, the local stack's instance folder in the development setup, else InstanceError."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    if not settings.development():  # never a folder of the installed package's
        raise InstanceError("DAGSTER_HOME is not set: set it to the folder of your Dagster instance (one that "
                            "outlives the process, e.g. the one your `dg dev` uses)")
    return Path(settings.get("MATOS_DEVSTACK_DIR")) / "dagster"


def prepare(home: Path | None = None, template: Path = TEMPLATE,
            say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
            env: dict[str, str] | None = None) -> Path:
    """Make `home` (default: `default_home()`) an instance whose storage exists whole.

    A folder without a dagster.yaml gets `template` (said once: after that it has one). Refuses,
    in one line, an instance that needs environment variables that are not set, or whose
    sqlite storage was broken by two processes creating it at once. `env`: variables the
    instance's dagster.yaml reads, if not this process's (a test's PostgreSQL).
    """
    home = (home or default_home()).expanduser().absolute()
    with environment(env or {}):
        if not _ready(home):  # the common case: no lock, no Dagster import
            _create(home, template, say)
    return home


def _create(home: Path, template: Path, say: Callable[[str], None]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    with locked(home):
        if not (home / "dagster.yaml").exists():
            shutil.copyfile(template, home / "dagster.yaml")
            say(f"{home} had no dagster.yaml: the project's ({template}) is there now")
        missing_variables(home)
        broken(home)
        if not _ready(home):
            _open_once(home)
            if not _sqlite(home):
                (home / PREPARED).write_text(_fingerprint(home))


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`env` in os.environ for the block (Dagster resolves dagster.yaml's `env:` entries from it)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def repair(home: Path | None = None) -> list[str]:
    """Mend storage broken by Dagster issue 27390; the files mended (none if nothing was broken).

    Both stamps describe the same tables: the process that created them made them as the
    current Dagster defines them, so the head stamp is the true one and the old one goes.
    """
    home = (home or default_home()).expanduser().absolute()
    mended = []
    with locked(home):
        for db, revisions in _stamps(home).items():
            if len(revisions) < 2:
                continue
            if len(set(revisions)) != 2 or OLD_STAMP not in revisions:
                raise InstanceError(f"{home / db} has alembic revisions {sorted(revisions)}, not the two this "
                                    "race leaves: it was not repaired; move the instance folder away and start anew")
            with contextlib.closing(sqlite3.connect(home / db)) as conn, conn:
                conn.execute("delete from alembic_version where version_num = ?", (OLD_STAMP,))
            mended.append(db)
        if mended:
            _open_once(home)  # Dagster itself now finds one head
    return mended


# Within one process the lock is reentrant: `prepare` holds it while Dagster opens the storage
# (instance_storage.py), which takes it too; a second flock of the same file would wait forever.
_held: dict[Path, int] = {}
_threads = threading.RLock()


@contextlib.contextmanager
def locked(home: Path) -> Iterator[None]:
    """The exclusive lock of the instance folder, between processes and between threads."""
    home = home.absolute()
    with _threads:
        if _held.get(home):
            _held[home] += 1
            try:
                yield
            finally:
                _held[home] -= 1
            return
        home.mkdir(parents=True, exist_ok=True)
        with open(home / LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _held[home] = 1
            try:
                yield
            finally:
                _held.pop(home)


def missing_variables(home: Path) -> None:
    """InstanceError naming the environment variables the instance's dagster.yaml reads and lacks."""
    names = sorted(set(_env_names(_config(home))))
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        hint = ("`make up` with MATOS_DEVSTACK_DAGSTER_STORAGE=postgres prints them for the local PostgreSQL, "
                "and `make run-postgres` sets them" if any(n.startswith("DAGSTER_PG_") for n in missing) else
                "set them")
        raise InstanceError(f"the Dagster instance in {home} reads {', '.join(missing)} from the environment, "
                            f"which {'is' if len(missing) == 1 else 'are'} not set: {hint}")


def broken(home: Path) -> None:
    """InstanceError if a sqlite storage of the instance has more than one alembic stamp."""
    for db, revisions in _stamps(home).items():
        if len(revisions) > 1:
            raise InstanceError(
                f"the Dagster instance in {home} is broken: {db} has {len(revisions)} alembic revisions "
                "(two processes created it at once, Dagster issue 27390); repair it with "
                f"`DAGSTER_HOME={home} {sys.executable} -m matos_dagster instance --repair`")


def _config(home: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load((home / "dagster.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}  # Dagster says what is wrong with it, and where
    return doc if isinstance(doc, dict) else {}


def _env_names(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if set(node) == {"env"} and isinstance(node["env"], str):
            yield node["env"]
        for value in node.values():
            yield from _env_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _env_names(value)


def _sqlite(home: Path) -> bool:
    """Whether the instance keeps sqlite files in its folder: Dagster's default storage, or the
    project's instance (instance_storage.py), whose default it is."""
    config = _config(home)
    storage = config.get("storage") or {}
    separate = {"run_storage", "event_log_storage", "schedule_storage"} & set(config)
    return not separate and (not storage or set(storage) == {"sqlite"} and not (storage["sqlite"] or {}).get("base_dir"))


def _stamps(home: Path, sqlite: bool | None = None) -> dict[str, list[str]]:
    """The alembic revisions of each sqlite file (none for storage elsewhere); `sqlite`: known already."""
    out: dict[str, list[str]] = {}
    if not (_sqlite(home) if sqlite is None else sqlite):
        return out
    for db in SQLITE_DBS:
        if (home / db).exists():
            try:
                with contextlib.closing(sqlite3.connect(f"file:{home / db}?mode=ro", uri=True, timeout=30)) as conn:
                    out[db] = [r[0] for r in conn.execute("select version_num from alembic_version")]
            except sqlite3.OperationalError:  # no such table: being created now
                out[db] = []
    return out


def _ready(home: Path) -> bool:
    """Whether the storage is known whole, asked without a lock (sqlite: every file stamped once)."""
    if not (home / "dagster.yaml").exists():
        return False
    if _sqlite(home):
        stamps = _stamps(home, sqlite=True)
        return len(stamps) == len(SQLITE_DBS) and all(len(r) == 1 for r in stamps.values())
    prepared = home / PREPARED
    return prepared.exists() and prepared.read_text() == _fingerprint(home)


def _fingerprint(home: Path) -> str:
    """The configuration and the variables it reads (a PostgreSQL elsewhere is prepared again)."""
    config = (home / "dagster.yaml").read_text()
    env = "".join(f"{n}={os.environ.get(n, '')}\n" for n in sorted(set(_env_names(_config(home)))))
    return hashlib.sha256((config + env).encode()).hexdigest()


def _open_once(home: Path) -> None:
    from dagster import DagsterInstance

    with DagsterInstance.from_config(str(home)) as instance:
        # Each storage is made when first asked for.
        instance.run_storage, instance.event_log_storage, instance.schedule_storage


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m matos_dagster.instance",
                                     description="Create a Dagster instance's storage once, under a lock, "
                                                 "or repair one that two processes created at once.")
    parser.add_argument("home", nargs="?", type=Path, help="the instance folder; default: $DAGSTER_HOME")
    parser.add_argument("--repair", action="store_true", help="mend storage stamped twice (Dagster issue 27390)")
    args = parser.parse_args(argv)
    try:
        if args.repair:
            mended = repair(args.home)
            print(f"repaired {', '.join(mended)}" if mended else "nothing to repair")
        home = prepare(args.home)
        os.environ["DAGSTER_HOME"] = str(home)
        print(f"Dagster instance ready: {home}")
    except InstanceError as e:
        print(f"{parser.prog}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    # Through the module as imported, not as __main__: instance_storage.py takes the lock through
    # `matos_dagster.instance`, and the lock is reentrant only within one module's bookkeeping (a
    # second flock of the same file from this process would wait forever).
    from matos_dagster.instance import main as _main

    sys.exit(_main())
