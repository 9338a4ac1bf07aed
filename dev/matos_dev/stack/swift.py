"""A real OpenStack Swift all-in-one on 127.0.0.1 for development and tests.

The ``swift`` package from PyPI is installed into its own virtual environment under the
cache folder (never into the project's venv: its dependencies, eventlet above all, are
its own). Four servers run from it, one process each (``workers = 0``): proxy (with
tempauth), account, container and object; one replica, one device. There is no
/etc/swift: every conf names ``swift_dir``, and everything lives under ``data_dir``::

    data_dir/
      state.json          backend ports, hash path suffix, Fernet key (kept across restarts)
      etc/                swift.conf, the four server confs, internal-client.conf, *.builder and *.ring.gz
      etc/pylib/          a small module of ours the servers import (cache, log hook)
      devices/d1/         the one "disk" (mount_check = false)
      run/<server>.pid    PID and start time of each running server
      log/<server>.log    each server's log (-v logs to stderr, which is appended here)
      log/container-sharder.log   what shard() ran and the sharder said
      recon/              the sharder's recon cache

Lean on purpose, for a 2-core machine: no replicator, updater, auditor, expirer, reaper
or sharder daemons run. The container server is ready to shard all the same: its conf has a
`[container-sharder]` section and etc/internal-client.conf exists, and `shard()` does what an
operator does (`swift-manage-shard-ranges ... find_and_replace ROWS --enable`, then
`swift-container-sharder --once` until the container is sharded). Nothing runs while idle. With one replica there is nothing to replicate or reconstruct,
and an object PUT updates its container listing synchronously (only if that failed would
an async pending be left for the object updater, which we do not run).

Auth is tempauth with Fernet tokens (``fernet_key_*`` / ``active_fernet_key_id``): a
token carries its groups, so tempauth needs no memcached to issue or check it.

The proxy's ``cache`` filter: in Swift 2.38 ``egg:swift#memcache`` is only a memcached
client, with no in-process fallback. Without any ``swift.cache`` every request through
the proxy re-reads account and container info from the backends (a HEAD to each; the
container HEAD also flushes the container's pending updates into SQLite), and tempauth
logs "swift.cache could not be found in env!" on every token request. With workers = 0
there is exactly one proxy process, so a dict in that process is a coherent cache, just
as one memcached is for one proxy: ``filter:cache`` here is that dict (see
``_PYLIB_SOURCE``). Measured on the 2-core machine, busy, 200 x 1 MiB PUTs: one client
30-50 MiB/s without a cache, 45-80 MiB/s with it; four clients 45-90 -> 110-160 MiB/s;
1 KiB PUTs 17-27 ms -> 9-11 ms each; 1 MiB GETs 14-24 ms -> 6-9 ms. (The memcache
filter with no memcached to talk to is no better than none.)

TLS later: ``extra_proxy_conf`` keys go into the proxy conf's [DEFAULT] section, so
``{"cert_file": ..., "key_file": ...}`` makes the proxy serve https, and ``proxy_scheme``
(hence ``auth_url``) follows the presence of ``cert_file``. Nothing else to change here.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import getpass
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from matos_dev.stack import process

SWIFT_VERSION = "2.38.3"
SWIFT_REQUIREMENT = f"swift=={SWIFT_VERSION}"

HOST = "127.0.0.1"
BACKENDS = ("account", "container", "object")
SERVERS = ("proxy",) + BACKENDS
DEVICE = "d1"
PART_POWER = 8  # 256 partitions: plenty for one device, and the rings build instantly

# Set to False to run the proxy without its in-process cache (for comparison only).
PROXY_CACHE = True

# container-server.conf's [container-sharder] on the local stack: Swift's defaults (sharding is
# operator-driven, auto_shard off; a container is a candidate from 1,000,000 rows) except that
# one `--once` pass cleaves up to 16 shard ranges instead of 2 (a local stack has no daemon
# doing pass after pass every 30 s).
SHARDER_CONF = {
    "auto_shard": "false",
    "cleave_batch_size": "16",
}


def proxy_pipeline(cache: bool = True, keystone: bool = False) -> str:
    # The filters Swift requires (catch_errors, gatekeeper, listing_formats, copy, dlo,
    # versioned_writes) are listed so that the proxy need not insert them itself.
    return " ".join([
        "catch_errors", "gatekeeper", "healthcheck", "proxy-logging",
        *(["cache"] if cache else []),
        # Keystone: authtoken validates the token (cached in swift.cache), keystoneauth
        # maps its project and roles to the account.
        # bulk: extract-archive (a tar of objects in one PUT) and bulk delete; the growth
        # benchmark writes its synthetic history through it. s3api: Swift's own S3 API, for
        # engines that read the archive in place (its tempauth user and key are S3 keys).
        "listing_formats", "bulk",
        *(["authtoken", "keystoneauth"] if keystone else ["s3api", "tempauth"]),
        "copy", "slo", "dlo", "versioned_writes", "symlink", "proxy-logging", "proxy-server",
    ])


# Written to etc/pylib/ and put on the servers' PYTHONPATH. Runs in the swift venv.
_PYLIB_MODULE = "matos_swift_devstack"
_PYLIB_SOURCE = '''\
"""Loaded by the matos devstack's Swift servers (written by matos_dev.stack.swift).

filter_factory: `filter:cache` for the proxy. A dict standing in for memcached, with
MemcacheRing's interface; right for one proxy process (workers = 0). Values pass through
JSON as MemcacheRing's do (serialize=True), so no caller can mutate a cached value.

log_to_file_only: a `log_custom_handlers` hook that drops the syslog handler Swift
always adds (with no /dev/log it would send every log line as UDP to 127.0.0.1:514);
with -v the servers log to stderr, which goes to their log file.
"""
import json
import logging
import time as _time
from logging.handlers import SysLogHandler

_MAXDELTA = 30 * 24 * 60 * 60  # memcached: larger expiry times are absolute


class InProcessCache(object):
    def __init__(self, max_items=100000):
        self._items = {}  # key -> ((kind, value), expires_at or None)
        self._max_items = max_items

    @staticmethod
    def _expiry(time):
        time = int(time or 0)
        if time <= 0:
            return None
        return float(time) if time > _MAXDELTA else _time.time() + time

    def _live(self, key):
        item = self._items.get(key)
        if item is not None and item[1] is not None and item[1] <= _time.time():
            del self._items[key]
            return None
        return item

    def _put(self, key, value, expiry):
        if key not in self._items and len(self._items) >= self._max_items:
            self._items.clear()
        self._items[key] = (value, expiry)

    def set(self, key, value, serialize=True, time=0, min_compress_len=0,
            raise_on_error=False):
        if serialize:
            if isinstance(value, bytes):
                value = value.decode("utf8")
            value = ("json", json.dumps(value))
        elif isinstance(value, bytes):
            value = ("raw", value)
        else:
            value = ("raw", str(value).encode("utf-8"))
        self._put(key, value, self._expiry(time))

    def get(self, key, raise_on_error=False):
        item = self._live(key)
        if item is None:
            return None
        kind, value = item[0]
        return json.loads(value) if kind == "json" else value

    def incr(self, key, delta=1, time=0):
        item = self._live(key)
        if item is None:
            new, expiry = max(int(delta), 0), self._expiry(time)
        else:
            kind, value = item[0]
            old = int(json.loads(value) if kind == "json" else value)
            new, expiry = max(old + int(delta), 0), item[1]
        self._put(key, ("raw", str(new).encode("ascii")), expiry)
        return new

    def decr(self, key, delta=1, time=0):
        return self.incr(key, delta=-delta, time=time)

    def delete(self, key, server_key=None):
        self._items.pop(key, None)

    def set_multi(self, mapping, server_key, serialize=True, time=0,
                  min_compress_len=0, raise_on_error=False):
        for key, value in mapping.items():
            self.set(key, value, serialize=serialize, time=time)

    def get_multi(self, keys, server_key):
        return [self.get(key) for key in keys]


class InProcessCacheMiddleware(object):
    def __init__(self, app, cache):
        self.app = app
        self.cache = cache

    def __call__(self, env, start_response):
        env["swift.cache"] = self.cache
        return self.app(env, start_response)


def filter_factory(global_conf, **local_conf):
    cache = InProcessCache(int(local_conf.get("max_items", 100000)))
    return lambda app: InProcessCacheMiddleware(app, cache)


def log_to_file_only(conf, name, log_to_console, log_route, fmt, logger,
                     adapted_logger):
    # Every logger, not only this one: proxy-logging makes its access logger from a
    # conf without log_custom_handlers; the filters built after it (paste builds the
    # pipeline right to left, catch_errors last) call this hook again.
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values()
        if isinstance(lg, logging.Logger)]
    for lg in loggers:
        for handler in list(lg.handlers):
            if isinstance(handler, SysLogHandler):
                lg.removeHandler(handler)
                handler.close()
'''


class SwiftServer:
    """One Swift all-in-one whose state lives in ``data_dir``."""

    user = "test:tester"
    key = "testing"
    account = "AUTH_test"

    def __init__(
        self,
        data_dir: Path,
        cache_dir: Path,
        proxy_port: int = 8080,
        extra_proxy_conf: dict | None = None,
        users: dict[str, str] | None = None,
        keystone: dict[str, str] | None = None,
        sharder: dict[str, str] | None = None,
    ):
        self.data_dir = Path(data_dir).absolute()
        self.cache_dir = Path(cache_dir).absolute()
        self.proxy_port = int(proxy_port)
        # Extra options for the proxy conf's [DEFAULT] section (TLS: cert_file, key_file).
        self.extra_proxy_conf = dict(extra_proxy_conf or {})
        # More tempauth users, `account:user` -> key, each an admin of AUTH_<account>
        # (test:tester is always there).
        self.users = dict(users or {})
        for name, key in self.users.items():
            account, sep, user = name.partition(":")
            if not sep or not account or not user or ":" in user or any(c.isspace() for c in name):
                raise ValueError(f"swift user {name!r} is not `account:user`")
            if not key or any(c.isspace() for c in key):
                raise ValueError(f"the key of swift user {name!r} must be non-empty, without spaces")
        # Keystone instead of tempauth: the options of the proxy's `filter:authtoken`
        # (KeystoneServer.authtoken_conf()); then swift[keystone] (keystonemiddleware) is
        # needed, in a venv of its own so the tempauth one is never changed under a running server.
        self.keystone = dict(keystone) if keystone else None
        # Options of container-server.conf's [container-sharder] on top of SHARDER_CONF
        # (swift's own names: rows_per_shard, cleave_batch_size, ...).
        self.sharder = dict(sharder or {})
        self.requirement = f"swift[keystone]=={SWIFT_VERSION}" if self.keystone else SWIFT_REQUIREMENT
        self.venv = self.cache_dir / (f"swift-{SWIFT_VERSION}-keystone-venv" if self.keystone
                                      else f"swift-{SWIFT_VERSION}-venv")
        self.etc = self.data_dir / "etc"
        self.pylib = self.etc / "pylib"
        self.devices = self.data_dir / "devices"
        self.run_dir = self.data_dir / "run"
        self.log_dir = self.data_dir / "log"
        self.state_file = self.data_dir / "state.json"
        self.log_files: dict[str, Path] = {s: self.log_dir / f"{s}.log" for s in SERVERS}
        self.pid_files: dict[str, Path] = {s: self.run_dir / f"{s}.pid" for s in SERVERS}
        self.conf_files: dict[str, Path] = {s: self.etc / f"{s}-server.conf" for s in SERVERS}
        self.internal_client_conf = self.etc / "internal-client.conf"
        self.sharder_log = self.log_dir / "container-sharder.log"

    # ---------------------------------------------------------------- addresses

    @property
    def proxy_scheme(self) -> str:
        return "https" if self.extra_proxy_conf.get("cert_file") else "http"

    @property
    def url(self) -> str:
        return f"{self.proxy_scheme}://{HOST}:{self.proxy_port}"

    @property
    def auth_url(self) -> str:
        return f"{self.url}/auth/v1.0"

    @property
    def storage_url(self) -> str:
        return f"{self.url}/v1/{self.account}"

    def ports(self) -> dict[str, int | None]:
        """Ports of the four servers; the backends' as persisted (None before the first start)."""
        backend = (self._read_state() or {}).get("ports", {})
        return {"proxy": self.proxy_port, **{b: backend.get(b) for b in BACKENDS}}

    # ------------------------------------------------------------------ install

    @property
    def _stamp(self) -> Path:
        return self.venv / ".matos-installed"

    def installed(self) -> bool:
        try:
            return self._stamp.read_text().strip() == self.requirement
        except OSError:
            return False

    def install(self) -> None:
        """Make the swift venv under the cache folder unless a complete one is there.

        The stamp file is written last, so a venv without it (an interrupted install) is
        thrown away and made again. A lock file keeps two callers (the project's conftest
        and a test, two pytest processes) from building it at the same time.
        """
        if self.installed():
            return
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with _locked(self.cache_dir / f"{self.venv.name}.lock"):
            if self.installed():
                return
            shutil.rmtree(self.venv, ignore_errors=True)
            python = getattr(sys, "_base_executable", None) or sys.executable
            log = self.cache_dir / f"{self.venv.name}-install.log"
            with open(log, "wb") as out:
                for argv in (
                    [python, "-m", "venv", str(self.venv)],
                    [str(self.venv / "bin" / "python"), "-m", "pip", "install",
                     "--disable-pip-version-check", "--no-input", self.requirement],
                ):
                    _run(argv, out, f"installing {self.requirement}", log)
            self._stamp.write_text(self.requirement + "\n")

    # ----------------------------------------------------------- start and stop

    def start(self, timeout: float = 60) -> None:
        """Start whatever of the four servers is not running; return once auth works.

        Installs swift first if needed; writes the confs (every time) and builds the
        rings (once per data_dir). Raises, with the servers stopped again, if Swift does
        not answer an authenticated account HEAD within `timeout` seconds.
        """
        deadline = time.monotonic() + timeout
        self.install()
        self._prepare()
        ports = self.ports()
        try:
            for server in SERVERS:
                if self._pid(server) is not None:
                    continue
                if process.port_open(ports[server]):
                    raise RuntimeError(
                        f"cannot start the swift {server} server: 127.0.0.1:{ports[server]} "
                        "is taken by another process")
                process.start(
                    [str(self.venv / "bin" / f"swift-{server}-server"),
                     str(self.conf_files[server]), "-v"],
                    self.pid_files[server], self.log_files[server],
                    env=self._server_env(), cwd=self.data_dir,
                )
            self._wait_ready(deadline)
        except BaseException:
            self.stop()  # all or nothing: no half-started stack left behind
            raise

    def stop(self) -> None:
        """Stop the four servers by their recorded PIDs (SIGTERM, SIGKILL after 15 s).

        With workers = 0 a server forks nothing, so signalling it alone (not its
        process group) leaves nothing behind.
        """
        errors = []
        for server in SERVERS:
            try:
                process.stop(self.pid_files[server], timeout=15)
            except OSError as e:  # stop the others anyway
                errors.append(e)
        if errors:
            raise errors[0]

    def running(self) -> bool:
        return all(self._pid(s) is not None for s in SERVERS)

    def status(self) -> dict:
        ports = self.ports()
        servers = {}
        for server in SERVERS:
            pid = self._pid(server)
            servers[server] = {
                "running": pid is not None,
                "pid": pid,
                "port": ports[server],
                "log_file": str(self.log_files[server]),
            }
        return {
            "running": all(s["running"] for s in servers.values()),
            "auth_url": self.auth_url,
            "user": self.user,
            "data_dir": str(self.data_dir),
            "servers": servers,
        }

    def connection(self, **kwargs):
        """A python-swiftclient Connection as test:tester (auth v1.0)."""
        from swiftclient.client import Connection

        return Connection(authurl=self.auth_url, user=self.user, key=self.key,
                          auth_version="1", **kwargs)

    # ------------------------------------------------------------------ sharding

    def container_db(self, container: str, account: str | None = None) -> dict:
        """Where `container`'s database is on the one device: {"partition", "db"} (Swift's own ring and hash)."""
        return self._sharding_tool("locate", account or self.account, container)

    def sharding(self, container: str, account: str | None = None) -> dict:
        """The container's sharding as its database has it: {"partition", "db", "state" (unsharded,
        sharding, sharded, collapsed), "object_count", "shard_ranges": [{"name", "lower", "upper",
        "state", "object_count"}], "misplaced" (sharded: object rows in the root itself, which
        listings do not show until the sharder moves them to their shard; up to 10,000)}."""
        return self._sharding_tool("state", account or self.account, container)

    def shard(self, container: str, rows: int, account: str | None = None, max_passes: int = 30,
              wait: bool = True, timeout_s: float = 900, **sharder: str | int) -> dict:
        """Shard `container` as a Swift operator does; return once it is sharded.

        `swift-manage-shard-ranges <db> --config container-server.conf find_and_replace <rows>
        --enable` cuts the listing into shard ranges of `rows` rows and marks the container for
        sharding; then the container sharder runs pass after pass (`swift-container-sharder
        --once`, each pass walking every container database on the device and cleaving up to
        `cleave_batch_size` ranges) until the container's state is `sharded`, and one pass more
        (the shards report their stats to the root, as the daemon's next cycle would). All in one
        process of the swift venv (each start costs seconds here). Returns `sharding()` with
        "passes", "found" (False: the container had shard ranges already, a sharding begun
        before was carried on) and "seconds"; the sharder's output goes to log/container-sharder.log.

        `wait=False` returns after `max_passes` passes whatever the state (a sharding under
        way); `sharder` overrides [container-sharder] options for these passes
        (`cleave_batch_size=1`: one shard range a pass). Raises if it takes over `timeout_s`
        (the sharding process is stopped; the next call carries the sharding on).
        """
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        t0 = time.monotonic()
        out = self._sharding_tool("shard", account or self.account, container, str(rows),
                                  str(self.conf_files["container"]), str(max_passes),
                                  json.dumps({k: str(v) for k, v in sharder.items()}), timeout_s=timeout_s)
        if wait and out["state"] != "sharded":
            raise RuntimeError(
                f"container {container!r} is still {out['state']} after {out['passes']} sharder passes; "
                f"see {self.sharder_log}")
        return {**out, "seconds": time.monotonic() - t0}

    def _sharding_tool(self, *args: str, timeout_s: float = 120) -> dict:
        """Run _SHARDING_SCRIPT in the swift venv (swift_dir set: there is no /etc/swift)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.sharder_log, "ab") as log:
            log.write(f"$ {' '.join(args)}\n".encode())
            log.flush()
            try:
                proc = subprocess.run(
                    [str(self.venv / "bin" / "python"), "-c", _SHARDING_SCRIPT,
                     json.dumps({"swift_dir": str(self.etc), "devices": str(self.devices), "args": list(args)})],
                    stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                    env=self._server_env(), cwd=self.data_dir, timeout=timeout_s)
            except subprocess.TimeoutExpired:  # run() has killed it
                raise RuntimeError(f"swift {args[0]} did not finish within {timeout_s:.0f} s and was stopped; "
                                   f"see {self.sharder_log}") from None
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            said = _tail(self.sharder_log, 1)
            raise RuntimeError(f"swift {args[0]} failed (exit {proc.returncode}): {said}; see {self.sharder_log}")
        lines = out.strip().splitlines()
        return json.loads(lines[-1]) if lines else {}

    # ------------------------------------------------------------------ insides

    def _pid(self, server: str) -> int | None:
        """The server's PID if the process recorded at its start is still alive.

        The PID recorded at start is the server itself: the console script's shebang
        execs python in place, the server's own setsid() fails harmlessly (it already
        leads the session we started it in), and with workers = 0 it forks nothing.
        """
        return process.read_pid(self.pid_files[server])

    def _server_env(self) -> dict[str, str]:
        env = _clean_env()
        env["PYTHONPATH"] = str(self.pylib)
        return env

    def _read_state(self) -> dict | None:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def _prepare(self) -> dict:
        """Dirs, state (made once), confs (written every time), rings (built once)."""
        for d in (self.etc, self.pylib, self.devices / DEVICE, self.run_dir, self.log_dir, self.data_dir / "recon"):
            d.mkdir(parents=True, exist_ok=True)
        state = self._read_state()
        if state is None:
            ports = _distinct_free_ports(len(BACKENDS), avoid={self.proxy_port})
            state = {
                "ports": dict(zip(BACKENDS, ports)),
                "hash_path_suffix": secrets.token_hex(16),
                "fernet_key": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
            }
            # New ports mean new rings.
            for f in self.etc.glob("*.ring.gz"):
                f.unlink()
            _write_atomic(self.state_file, json.dumps(state, indent=2) + "\n")
        if self.proxy_port in state["ports"].values():
            raise ValueError(
                f"proxy port {self.proxy_port} is a backend port of {self.data_dir}")
        self._write_confs(state)
        self._build_rings(state["ports"])
        return state

    def _write_confs(self, state: dict) -> None:
        _write_atomic(self.pylib / f"{_PYLIB_MODULE}.py", _PYLIB_SOURCE)
        _write_ini(self.etc / "swift.conf", {
            "swift-hash": {"swift_hash_path_suffix": state["hash_path_suffix"]},
            "storage-policy:0": {"name": "default", "default": "yes"},
        })
        common = {
            "bind_ip": HOST,
            "workers": "0",
            "swift_dir": str(self.etc),
            "user": getpass.getuser(),
            "log_level": "INFO",
            "log_custom_handlers": f"{_PYLIB_MODULE}.log_to_file_only",
        }
        for server in BACKENDS:
            _write_ini(self.conf_files[server], {
                "DEFAULT": {
                    **common,
                    "bind_port": str(state["ports"][server]),
                    "devices": str(self.devices),
                    "mount_check": "false",
                    "log_name": f"{server}-server",
                },
                "pipeline:main": {"pipeline": f"healthcheck {server}-server"},
                f"app:{server}-server": {"use": f"egg:swift#{server}"},
                "filter:healthcheck": {"use": "egg:swift#healthcheck"},
                **({"container-sharder": self._sharder_conf()} if server == "container" else {}),
            })
        # The sharder's internal client (a proxy app in its own process) reads shard ranges
        # from root containers; swift's sample internal-client.conf, with our in-process cache.
        _write_ini(self.internal_client_conf, {
            "DEFAULT": {**common, "log_name": "internal-client"},
            "pipeline:main": {"pipeline": "catch_errors proxy-logging cache proxy-server"},
            "app:proxy-server": {"use": "egg:swift#proxy", "account_autocreate": "true"},
            "filter:cache": {"paste.filter_factory": f"{_PYLIB_MODULE}:filter_factory"},
            "filter:proxy-logging": {"use": "egg:swift#proxy_logging"},
            "filter:catch_errors": {"use": "egg:swift#catch_errors"},
        })
        proxy_default = {**common, "bind_port": str(self.proxy_port), "log_name": "proxy-server"}
        # The hook for TLS (cert_file, key_file) and any other [DEFAULT] option.
        proxy_default.update({str(k): str(v) for k, v in self.extra_proxy_conf.items()})
        _write_ini(self.conf_files["proxy"], {
            "DEFAULT": proxy_default,
            "pipeline:main": {"pipeline": proxy_pipeline(PROXY_CACHE, keystone=bool(self.keystone))},
            "app:proxy-server": {"use": "egg:swift#proxy", "account_autocreate": "true"},
            "filter:tempauth": {
                "use": "egg:swift#tempauth",
                # user_<account>_<user> = <key> <groups>: test:tester, admin of AUTH_test.
                "user_test_tester": f"{self.key} .admin",
                **{f"user_{n.replace(':', '_', 1)}": f"{k} .admin" for n, k in self.users.items()},
                "token_life": "86400",
                "fernet_key_k1": state["fernet_key"],
                "active_fernet_key_id": "k1",
            },
            **({} if not self.keystone else self._keystone_filters()),
            "filter:cache": {"paste.filter_factory": f"{_PYLIB_MODULE}:filter_factory"},
            "filter:catch_errors": {"use": "egg:swift#catch_errors"},
            "filter:gatekeeper": {"use": "egg:swift#gatekeeper"},
            "filter:healthcheck": {"use": "egg:swift#healthcheck"},
            "filter:proxy-logging": {"use": "egg:swift#proxy_logging"},
            "filter:listing_formats": {"use": "egg:swift#listing_formats"},
            "filter:bulk": {"use": "egg:swift#bulk"},
            # Region us-east-1, path-style URLs (no DNS names for buckets on loopback).
            "filter:s3api": {"use": "egg:swift#s3api", "location": "us-east-1"},
            "filter:copy": {"use": "egg:swift#copy"},
            "filter:slo": {"use": "egg:swift#slo"},
            "filter:dlo": {"use": "egg:swift#dlo"},
            # Versioned containers as production Swift has them: forgetting must refuse one.
            "filter:versioned_writes": {"use": "egg:swift#versioned_writes", "allow_versioned_writes": "true"},
            "filter:symlink": {"use": "egg:swift#symlink"},
        })

    def _sharder_conf(self) -> dict[str, str]:
        return {
            **SHARDER_CONF,
            "log_name": "container-sharder",
            "internal_client_conf_path": str(self.internal_client_conf),
            "recon_cache_path": str(self.data_dir / "recon"),  # not /var/cache/swift
            **{str(k): str(v) for k, v in self.sharder.items()},
        }

    def _keystone_filters(self) -> dict[str, dict[str, str]]:
        options = dict(self.keystone)
        roles = options.pop("operator_roles", "admin, member")
        return {
            "filter:authtoken": {
                "paste.filter_factory": "keystonemiddleware.auth_token:filter_factory",
                # The proxy's in-process cache (filter:cache) holds validated tokens: no memcached.
                "cache": "swift.cache",
                "delay_auth_decision": "false",
                "include_service_catalog": "false",
                **options,
            },
            "filter:keystoneauth": {"use": "egg:swift#keystoneauth", "operator_roles": roles},
        }

    def _build_rings(self, ports: dict[str, int]) -> None:
        """Build the three rings with swift-ring-builder, once per data_dir.

        The ring-builder's own main() runs for each of the nine commands in one python
        process of the swift venv (nine separate processes take 3 s; this 0.4 s).
        """
        if all((self.etc / f"{b}.ring.gz").exists() for b in BACKENDS):
            return
        commands = []
        for backend in BACKENDS:
            builder = str(self.etc / f"{backend}.builder")
            (self.etc / f"{backend}.builder").unlink(missing_ok=True)
            (self.etc / f"{backend}.ring.gz").unlink(missing_ok=True)
            commands += [
                [builder, "create", str(PART_POWER), "1", "1"],  # part power, replicas, min hours
                [builder, "add", f"r1z1-{HOST}:{ports[backend]}/{DEVICE}", "100"],
                [builder, "rebalance"],
            ]
        log = self.log_dir / "ring-builder.log"
        with open(log, "ab") as out:
            _run([str(self.venv / "bin" / "python"), "-c", _RING_BUILDER_SCRIPT,
                  json.dumps(commands)], out, "swift-ring-builder", log, cwd=self.etc,
                 shown="swift-ring-builder (its main() in one process)")
        for backend in BACKENDS:
            if not (self.etc / f"{backend}.ring.gz").exists():
                raise RuntimeError(f"no {backend}.ring.gz was written; see {log}")

    def _wait_ready(self, deadline: float) -> None:
        ports = self.ports()
        for server in SERVERS:
            while not process.port_open(ports[server]):
                self._check_alive(server)
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the swift {server} server did not listen on "
                        f"127.0.0.1:{ports[server]}; see {self.log_files[server]}")
                time.sleep(0.1)
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            for server in SERVERS:
                self._check_alive(server)
            try:
                if self.keystone:  # no tempauth user: the proxy's healthcheck, then an unauthenticated HEAD
                    self._keystone_ready()
                    return
                with contextlib.closing(self.connection(retries=0, timeout=5)) as conn:
                    conn.head_account()
                return
            except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = e
                time.sleep(0.2)
        raise TimeoutError(
            f"swift did not answer an authenticated account HEAD at {self.auth_url}: "
            f"{last_error!r}; see {self.log_files['proxy']}")

    def _keystone_ready(self) -> None:
        import requests

        r = requests.get(f"{self.url}/healthcheck", timeout=5)
        r.raise_for_status()
        # Through authtoken and keystoneauth to the account: refused (401), not an error.
        r = requests.head(self.storage_url, timeout=5)
        if r.status_code != 401:
            raise RuntimeError(f"an unauthenticated HEAD of {self.storage_url} answered {r.status_code}, not 401")

    def _check_alive(self, server: str) -> None:
        if self._pid(server) is None:
            raise RuntimeError(
                f"the swift {server} server exited at start; the end of "
                f"{self.log_files[server]}:\n{_tail(self.log_files[server])}")


# Runs swift-ring-builder's main() for each argv (a JSON list) in one process.
_RING_BUILDER_SCRIPT = """\
import json, sys
from swift.cli.ringbuilder import main
for args in json.loads(sys.argv[1]):
    print("$ swift-ring-builder " + " ".join(args), flush=True)
    try:
        main(["swift-ring-builder"] + args)
        code = 0
    except SystemExit as e:
        code = e.code or 0
    sys.stdout.flush()
    if code not in (0, 1):  # 1 = done with warnings, 2 = error
        sys.exit(code)
"""


# Sharding steps, in the swift venv. argv[1]: JSON {swift_dir, devices, args}; the last line of
# stdout is a JSON answer. set_swift_dir first: swift's own commands read /etc/swift/swift.conf
# (the hash path suffix) unless told otherwise.
_SHARDING_SCRIPT = """\
import json, os, sys
from swift.common.utils import set_swift_dir
cmd = json.loads(sys.argv[1])
set_swift_dir(cmd["swift_dir"])
what, args = cmd["args"][0], cmd["args"][1:]


def locate(account, container):
    from swift.common.ring import Ring
    from swift.common.utils import hash_path
    part, nodes = Ring(cmd["swift_dir"], ring_name="container").get_nodes(account, container)
    h = hash_path(account, container)
    db = os.path.join(cmd["devices"], nodes[0]["device"], "containers", str(part), h[-3:], h, h + ".db")
    return {"partition": part, "db": db, "node": nodes[0]}


def state(db):
    from swift.container.backend import ContainerBroker
    broker = ContainerBroker(db)
    info = broker.get_info()
    ranges = [{"name": sr.name, "lower": str(sr.lower), "upper": str(sr.upper), "state": sr.state_text,
               "object_count": sr.object_count} for sr in broker.get_shard_ranges()]
    db_state = broker.get_db_state()
    # A sharded root's own table holds only misplaced rows: updates that reached it after it
    # was sharded (a proxy that did not know yet), not listed until a sharder pass moves them.
    misplaced = len(broker.get_objects(limit=10000, include_deleted=False)) if db_state == "sharded" else None
    return {"state": db_state, "object_count": info["object_count"], "shard_ranges": ranges, "misplaced": misplaced}


where = locate(args[0], args[1])
node = where.pop("node")
if what != "locate" and not os.path.isdir(os.path.dirname(where["db"])):
    sys.exit("container %s/%s has no database on this Swift (%s): is the name right, and does it exist?"
             % (args[0], args[1], os.path.dirname(where["db"])))
if what == "locate":
    out = where
elif what == "state":
    out = {**where, **state(where["db"])}
elif what == "shard":
    rows, conf_file, max_passes, overrides = args[2], args[3], int(args[4]), json.loads(args[5])
    # A HEAD through the container server first: it merges the updates still pending beside
    # the database into it. Without it, a sharder pass right after a burst of object PUTs was
    # seen to wait forever while cleaving the first shard range.
    from swift.common.direct_client import direct_head_container
    direct_head_container(node, where["partition"], args[0], args[1])
    found = not state(where["db"])["shard_ranges"]
    if found:  # else a sharding begun before: carry it on
        from swift.cli.manage_shard_ranges import main
        print("$ swift-manage-shard-ranges %s --config %s find_and_replace %s --enable" % (where["db"], conf_file, rows),
              file=sys.stderr, flush=True)
        code = main([where["db"], "--config", conf_file, "find_and_replace", rows, "--enable"])
        if code:
            sys.exit(code)
    # What swift-container-sharder --once does (swift.common.daemon.run_daemon), pass after pass.
    import eventlet
    from swift.common import utils
    from swift.container.sharder import ContainerSharder
    utils.monkey_patch()
    eventlet.hubs.use_hub(utils.get_hub())
    conf = {**utils.readconf(conf_file, "container-sharder"), **overrides}
    try:
        sharder = ContainerSharder(conf, logger=utils.get_logger(conf, conf["log_name"], log_to_console=True))
    except SystemExit as e:  # e.g. no internal-client.conf: say why, and leave at once
        print("the container sharder cannot start: %s" % e, file=sys.stderr, flush=True)
        os._exit(1)
    passes = 0
    while state(where["db"])["state"] != "sharded" and passes < max_passes:
        print("$ swift-container-sharder %s --once   # pass %d" % (conf_file, passes + 1), file=sys.stderr, flush=True)
        sharder.run_once()
        passes += 1
    if state(where["db"])["state"] == "sharded":
        sharder.run_once()
        passes += 1
    out = {**where, **state(where["db"]), "passes": passes, "found": found}
else:
    sys.exit("unknown step %r" % what)
print(json.dumps(out), flush=True)
sys.stderr.flush()
os._exit(0)  # not through interpreter shutdown, where eventlet's hub can keep the process waiting
"""


# --------------------------------------------------------------------------- helpers


def _clean_env() -> dict[str, str]:
    """The caller's environment without what would leak the project's venv into swift's."""
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"):
        env.pop(name, None)
    return env


def _run(argv: list[str], out, what: str, log: Path, cwd: Path | None = None,
         shown: str | None = None) -> None:
    out.write(f"$ {shown or ' '.join(argv)}\n".encode())
    out.flush()
    rc = subprocess.call(argv, stdout=out, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, env=_clean_env(), cwd=cwd)
    if rc != 0:
        raise RuntimeError(f"{what} failed (exit {rc}); see {log}")


def _distinct_free_ports(n: int, avoid: set[int]) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = process.free_port()
        if port not in ports and port not in avoid:
            ports.append(port)
    return ports


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _write_ini(path: Path, sections: dict[str, dict[str, str]]) -> None:
    lines = []
    for name, options in sections.items():
        lines.append(f"[{name}]")
        lines.extend(f"{k} = {v}" for k, v in options.items())
        lines.append("")
    _write_atomic(path, "\n".join(lines))


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def _locked(lock_file: Path):
    with open(lock_file, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
