"""A real OpenStack Keystone (identity v3) on 127.0.0.1, for the Swift all-in-one to use.

The ``keystone`` package from PyPI is installed with gunicorn into its own virtual
environment under the cache folder (its dependencies are its own, as Swift's are). It
runs with a SQLite database and Fernet tokens; everything lives under ``data_dir``::

    data_dir/
      state.json          ids, passwords and the application credential (mode 600)
      etc/keystone.conf   the one config file (found through OS_KEYSTONE_CONFIG_FILES)
      etc/pylib/          the WSGI module gunicorn loads (see _WSGI_SOURCE)
      keystone.db         SQLite: users, projects, roles, the catalog
      fernet-keys/, credential-keys/
      run/keystone.pid, log/keystone.log

First start (once per data_dir): ``keystone-manage db_sync``, ``fernet_setup``,
``credential_setup`` and ``bootstrap`` (admin user and project, the roles, region
RegionOne, the identity endpoint). Every start then makes sure, through the API, of what
the archive and Swift need (`_provision`): a project ``matos``; its user ``archiver``
(role ``member``, one of Swift's operator roles), an application credential of that user,
a user ``auditor`` with only the ``reader`` role there (authenticates, may not use Swift);
a ``swift`` service user (role ``service`` on project ``service``) that Swift's
``authtoken`` filter validates tokens with; and the object-store service with a public
endpoint (127.0.0.1) and an internal one (``localhost``, so the two are told apart) at the
Swift proxy. Endpoints are updated when the Swift port changes.

keystone 30 has no ``keystone-wsgi-public`` script: gunicorn serves
``keystone.wsgi.api:application`` through a module of ours that first resets
``sys.argv`` (keystone's config parser would read gunicorn's arguments as its own).

bcrypt with 4 rounds (its least) instead of 12: each token request checks a password,
and at 12 rounds that costs seconds on a busy 2-core machine. A development setting.
"""

from __future__ import annotations

import getpass
import grp
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import requests

from matos_dev.stack import process
from matos_dev.stack.swift import _clean_env, _locked, _run, _tail, _write_atomic, _write_ini

KEYSTONE_VERSION = "30.0.0"
REQUIREMENTS = (f"keystone=={KEYSTONE_VERSION}", "gunicorn==23.0.0")

HOST = "127.0.0.1"
REGION = "RegionOne"
DOMAIN = "Default"  # name of the domain bootstrap makes (id `default`)
PROJECT = "matos"
ARCHIVER = "archiver"
AUDITOR = "auditor"  # only `reader` on the project: not a Swift operator
SWIFT_SERVICE_USER = "swift"
SERVICE_PROJECT = "service"
OPERATOR_ROLES = ("admin", "member")  # what Swift's keystoneauth lets use an account

_WSGI_MODULE = "matos_keystone_wsgi"
_WSGI_SOURCE = '''\
"""Keystone's WSGI app for gunicorn (written by matos_dev.stack.keystone).

keystone parses sys.argv when it loads its config; under gunicorn that is gunicorn's
command line, which it rejects. Its config file comes from OS_KEYSTONE_CONFIG_FILES.
"""
import sys

sys.argv = sys.argv[:1]

from keystone.wsgi.api import application  # noqa: E402,F401
'''

# Runs keystone-manage's main() for each argv (a JSON list) in one process; oslo.config's
# global CONF is cleared between two commands so that each parses its own arguments.
_MANAGE_SCRIPT = """\
import json, sys
from keystone.cmd import cli
from keystone.conf import CONF
for args in json.loads(sys.argv[1]):
    print("$ keystone-manage " + " ".join(args), flush=True)
    try:
        cli.main(argv=["keystone-manage"] + args)
    except SystemExit as e:
        if e.code:
            sys.exit(e.code)
    CONF.reset()
    CONF.clear()
"""


class KeystoneError(RuntimeError):
    """Keystone did not install, start or answer as expected (the message says where to look)."""


class KeystoneServer:
    """One Keystone whose state lives in ``data_dir``."""

    def __init__(
        self,
        data_dir: Path,
        cache_dir: Path,
        port: int = 5000,
        swift_url: str = "http://127.0.0.1:8080",
        cert_file: str = "",
        key_file: str = "",
        ca_file: str = "",
        token_expiration_s: int = 3600,
    ):
        self.data_dir = Path(data_dir).absolute()
        self.cache_dir = Path(cache_dir).absolute()
        self.port = int(port)
        self.swift_url = swift_url.rstrip("/")  # where the catalog's object-store endpoints point
        self.cert_file, self.key_file = cert_file, key_file  # both: serve https
        self.ca_file = ca_file  # what clients (and Swift's authtoken) verify Keystone with
        self.token_expiration_s = int(token_expiration_s)
        self.venv = self.cache_dir / f"keystone-{KEYSTONE_VERSION}-venv"
        self.etc = self.data_dir / "etc"
        self.pylib = self.etc / "pylib"
        self.conf_file = self.etc / "keystone.conf"
        self.state_file = self.data_dir / "state.json"
        self.pid_file = self.data_dir / "run" / "keystone.pid"
        self.log_file = self.data_dir / "log" / "keystone.log"
        self.log_dir = self.log_file.parent

    # ---------------------------------------------------------------- addresses

    @property
    def scheme(self) -> str:
        return "https" if self.cert_file else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.port}"

    @property
    def auth_url(self) -> str:
        """What MATOS_SWIFT_AUTH_URL is set to (auth version 3)."""
        return f"{self.url}/v3"

    def storage_url(self, interface: str = "public") -> str:
        base = self.swift_url if interface == "public" else self.swift_url.replace(f"//{HOST}:", "//localhost:", 1)
        return f"{base}/v1/AUTH_{self.state()['project_id']}"

    # -------------------------------------------------------------------- state

    def state(self) -> dict:
        """Passwords (made on first use, kept), and the ids learnt at provisioning."""
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            pass
        self.data_dir.mkdir(parents=True, exist_ok=True)
        state = {f"{name}_password": secrets.token_urlsafe(18)
                 for name in ("admin", ARCHIVER, AUDITOR, SWIFT_SERVICE_USER)}
        self._save_state(state)
        return state

    def _save_state(self, state: dict) -> None:
        tmp = self.state_file.with_name("state.json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.chmod(tmp, 0o600)  # passwords
        tmp.replace(self.state_file)

    def authtoken_conf(self) -> dict[str, str]:
        """Swift's ``filter:authtoken`` options: validate tokens here, as the ``swift`` user."""
        state = self.state()
        conf = {
            "www_authenticate_uri": self.auth_url,
            "auth_url": self.url,
            "auth_type": "password",
            "username": SWIFT_SERVICE_USER,
            "password": state[f"{SWIFT_SERVICE_USER}_password"],
            "user_domain_name": DOMAIN,
            "project_name": SERVICE_PROJECT,
            "project_domain_name": DOMAIN,
            "region_name": REGION,
            "interface": "public",  # of Keystone's own endpoint (the default, internal, is not registered)
            "operator_roles": ", ".join(OPERATOR_ROLES),
        }
        if self.ca_file:
            conf["cafile"] = self.ca_file
        return conf

    # ------------------------------------------------------------------ install

    @property
    def _stamp(self) -> Path:
        return self.venv / ".matos-installed"

    def installed(self) -> bool:
        try:
            return self._stamp.read_text().strip() == " ".join(REQUIREMENTS)
        except OSError:
            return False

    def install(self) -> None:
        """Make the keystone venv under the cache folder unless a complete one is there (as Swift's)."""
        if self.installed():
            return
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with _locked(self.cache_dir / f"keystone-{KEYSTONE_VERSION}.lock"):
            if self.installed():
                return
            shutil.rmtree(self.venv, ignore_errors=True)
            python = getattr(sys, "_base_executable", None) or sys.executable
            log = self.cache_dir / f"keystone-{KEYSTONE_VERSION}-install.log"
            with open(log, "wb") as out:
                for argv in (
                    [python, "-m", "venv", str(self.venv)],
                    [str(self.venv / "bin" / "python"), "-m", "pip", "install",
                     "--disable-pip-version-check", "--no-input", *REQUIREMENTS],
                ):
                    _run(argv, out, f"installing {' '.join(REQUIREMENTS)}", log)
            self._stamp.write_text(" ".join(REQUIREMENTS) + "\n")

    # ----------------------------------------------------------- start and stop

    def start(self, timeout: float = 180) -> None:
        """Start Keystone if it is not running; return once it is provisioned.

        Bootstraps once per data_dir; writes the conf every time. All or nothing: if it
        does not answer within `timeout` seconds it is stopped again and this raises.
        """
        deadline = time.monotonic() + timeout
        self.install()
        self._prepare()
        try:
            if self.pid() is None:
                if process.port_open(self.port):
                    raise KeystoneError(f"cannot start keystone: 127.0.0.1:{self.port} is taken by another process "
                                       "(the local stack's port is MATOS_DEVSTACK_KEYSTONE_PORT)")
                argv = [str(self.venv / "bin" / "gunicorn"), "--bind", f"{HOST}:{self.port}",
                        "--workers", "1", "--threads", "4", "--timeout", "120",
                        "--pythonpath", str(self.pylib), "--error-logfile", "-",
                        "--access-logfile", "-"]  # method, path, status: no header (no token)
                if self.cert_file:
                    argv += ["--certfile", self.cert_file, "--keyfile", self.key_file]
                process.start(argv + [f"{_WSGI_MODULE}:application"], self.pid_file, self.log_file,
                              env=self._env(), cwd=self.data_dir)
            self._wait_ready(deadline)
            self._provision()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop gunicorn by its recorded PID; its worker goes with it (`group`: it forks one)."""
        process.stop(self.pid_file, timeout=15, group=True)

    def pid(self) -> int | None:
        return process.read_pid(self.pid_file)

    def running(self) -> bool:
        return self.pid() is not None

    def status(self) -> dict:
        pid = self.pid()
        return {"running": pid is not None, "pid": pid, "port": self.port, "auth_url": self.auth_url,
                "log_file": str(self.log_file), "data_dir": str(self.data_dir)}

    # ------------------------------------------------------------- the API

    def token(self, user: str = "admin", project: str | None = None) -> str:
        """A project-scoped token of one of our users (admin: project admin)."""
        state = self.state()
        project = project or ("admin" if user == "admin" else PROJECT)
        body = {"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"name": DOMAIN}, "password": state[f"{user}_password"]}}},
            "scope": {"project": {"name": project, "domain": {"name": DOMAIN}}},
        }}
        r = self._request("POST", "/v3/auth/tokens", None, json=body)
        return r.headers["X-Subject-Token"]

    def _request(self, method: str, path: str, token: str | None, **kw) -> requests.Response:
        headers = {"X-Auth-Token": token} if token else {}
        r = requests.request(method, self.url + path, headers=headers, timeout=60,
                             verify=self.ca_file or True, **kw)
        if r.status_code >= 400:
            raise KeystoneError(f"keystone answered {method} {path} with HTTP {r.status_code}: {r.text[:300]}")
        return r

    # ------------------------------------------------------------------ insides

    def _env(self) -> dict[str, str]:
        env = _clean_env()
        env["OS_KEYSTONE_CONFIG_FILES"] = str(self.conf_file)
        return env

    def _prepare(self) -> None:
        for d in (self.etc, self.pylib, self.log_dir, self.pid_file.parent):
            d.mkdir(parents=True, exist_ok=True)
        state = self.state()
        _write_atomic(self.pylib / f"{_WSGI_MODULE}.py", _WSGI_SOURCE)
        _write_ini(self.conf_file, {
            "DEFAULT": {"debug": "false", "use_stderr": "true", "insecure_debug": "false"},
            "database": {"connection": f"sqlite:///{self.data_dir / 'keystone.db'}"},
            "token": {"provider": "fernet", "expiration": str(self.token_expiration_s)},
            "fernet_tokens": {"key_repository": str(self.data_dir / "fernet-keys"), "max_active_keys": "3"},
            "fernet_receipts": {"key_repository": str(self.data_dir / "fernet-keys")},
            "credential": {"key_repository": str(self.data_dir / "credential-keys")},
            "identity": {"password_hash_algorithm": "bcrypt", "password_hash_rounds": "4"},
            "cache": {"enabled": "false"},
        })
        if state.get("bootstrapped"):
            return
        conf = ["--config-file", str(self.conf_file)]
        owner = ["--keystone-user", getpass.getuser(), "--keystone-group", grp.getgrgid(os.getgid()).gr_name]
        for d in ("fernet-keys", "credential-keys"):
            (self.data_dir / d).mkdir(mode=0o700, exist_ok=True)
        commands = [[*conf, "db_sync"], [*conf, "fernet_setup", *owner], [*conf, "credential_setup", *owner],
                    [*conf, "bootstrap", "--bootstrap-region-id", REGION, "--bootstrap-public-url", self.auth_url]]
        log = self.log_dir / "keystone-manage.log"
        env = {**_clean_env(), "OS_BOOTSTRAP_PASSWORD": state["admin_password"]}  # not on a command line
        with open(log, "ab") as out:
            # The four keystone-manage commands in one process: importing keystone is most of
            # the cost of each (28 s instead of about two minutes on the busy 2-core machine).
            rc = subprocess.call([str(self.venv / "bin" / "python"), "-c", _MANAGE_SCRIPT, json.dumps(commands)],
                                 stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                 cwd=self.data_dir)
        if rc != 0:
            raise KeystoneError(f"keystone-manage failed (exit {rc}); see {log}:\n{_tail(log)}")
        state["bootstrapped"] = True
        self._save_state(state)

    def _wait_ready(self, deadline: float) -> None:
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise KeystoneError(f"keystone exited at start; the end of {self.log_file}:\n{_tail(self.log_file)}")
            try:
                if requests.get(self.auth_url, timeout=5, verify=self.ca_file or True).status_code == 200:
                    return
            except requests.RequestException as e:
                last = e
            time.sleep(0.3)
        raise KeystoneError(f"keystone did not answer at {self.auth_url}: {last!r}; see {self.log_file}")

    def _provision(self) -> None:
        """Make sure of the users, projects, roles, catalog and application credential (idempotent).

        Once done for this Swift URL it is all in the database: a restart asks nothing.
        """
        state = self.state()
        if state.get("catalog_for") == self.swift_url:
            return
        admin = [self.token("admin")]

        def call(method: str, path: str, **kw) -> requests.Response:
            # Tokens may live less than provisioning takes (tests use short ones): renew on a 401.
            try:
                return self._request(method, path, admin[0], **kw)
            except KeystoneError as e:
                if " HTTP 401" not in str(e):
                    raise
                admin[0] = self.token("admin")
                return self._request(method, path, admin[0], **kw)

        def find(kind: str, name: str, **query) -> dict | None:
            found = call("GET", f"/v3/{kind}", params={"name": name, **query}).json()[kind]
            return found[0] if found else None

        def ensure(kind: str, name: str, body: dict, **query) -> str:
            item = find(kind, name, **query)
            if item is None:
                singular = kind[:-1]
                item = call("POST", f"/v3/{kind}", json={singular: {"name": name, **body}}).json()[singular]
            return item["id"]

        domain_id = "default"  # the id of the domain bootstrap makes
        project_id = ensure("projects", PROJECT, {"domain_id": domain_id}, domain_id=domain_id)
        service_project_id = ensure("projects", SERVICE_PROJECT, {"domain_id": domain_id}, domain_id=domain_id)
        roles = {r["name"]: r["id"] for r in call("GET", "/v3/roles").json()["roles"]}  # bootstrap made them
        users = {}
        for user, project, role in ((ARCHIVER, project_id, "member"), (AUDITOR, project_id, "reader"),
                                    (SWIFT_SERVICE_USER, service_project_id, "service")):
            users[user] = ensure("users", user, {"domain_id": domain_id, "password": state[f"{user}_password"]},
                                 domain_id=domain_id)
            call("PUT", f"/v3/projects/{project}/users/{users[user]}/roles/{roles[role]}")

        service = find("services", "swift") or call(
            "POST", "/v3/services",
            json={"service": {"name": "swift", "type": "object-store", "enabled": True}}).json()["service"]
        endpoints = call("GET", "/v3/endpoints", params={"service_id": service["id"]}).json()["endpoints"]
        for interface in ("public", "internal"):
            base = self.swift_url if interface == "public" else self.swift_url.replace(f"//{HOST}:", "//localhost:", 1)
            url = f"{base}/v1/AUTH_$(project_id)s"
            mine = [e for e in endpoints if e["interface"] == interface and e.get("region_id") == REGION]
            if not mine:
                call("POST", "/v3/endpoints", json={"endpoint": {
                    "service_id": service["id"], "interface": interface, "region_id": REGION, "url": url}})
            elif mine[0]["url"] != url:  # the Swift port changed
                call("PATCH", f"/v3/endpoints/{mine[0]['id']}", json={"endpoint": {"url": url}})

        state.update(domain_id=domain_id, project_id=project_id, service_project_id=service_project_id,
                     user_ids=users, region=REGION)
        if "app_credential_id" not in state:
            # Made by the archiver itself, bound to its project and roles; the secret is shown once.
            token = self.token(ARCHIVER)
            body = {"application_credential": {"name": "matos-archive", "description": "matos devstack"}}
            cred = self._request("POST", f"/v3/users/{users[ARCHIVER]}/application_credentials", token,
                                 json=body).json()["application_credential"]
            state.update(app_credential_id=cred["id"], app_credential_secret=cred["secret"])
        state["catalog_for"] = self.swift_url
        self._save_state(state)

    def settings(self, form: str = "user_id") -> dict[str, str]:
        """The archive's MATOS_SWIFT_* settings for the archiver, in one of the v3 forms."""
        state = self.state()
        common = {"MATOS_SWIFT_AUTH_VERSION": "3", "MATOS_SWIFT_AUTH_URL": self.auth_url,
                  "MATOS_SWIFT_REGION": REGION}
        if self.ca_file:
            common["MATOS_SWIFT_CA_FILE"] = self.ca_file
        if form == "user_id":
            return {**common, "MATOS_SWIFT_USER_ID": state["user_ids"][ARCHIVER],
                    "MATOS_SWIFT_PROJECT_ID": state["project_id"], "MATOS_SWIFT_KEY": state[f"{ARCHIVER}_password"]}
        if form == "names":
            return {**common, "MATOS_SWIFT_USER": ARCHIVER, "MATOS_SWIFT_DOMAIN": DOMAIN,
                    "MATOS_SWIFT_PROJECT_NAME": PROJECT, "MATOS_SWIFT_PROJECT_DOMAIN": DOMAIN,
                    "MATOS_SWIFT_KEY": state[f"{ARCHIVER}_password"]}
        if form == "app_credential":
            return {**common, "MATOS_SWIFT_APP_CREDENTIAL_ID": state["app_credential_id"],
                    "MATOS_SWIFT_APP_CREDENTIAL_SECRET": state["app_credential_secret"]}
        raise ValueError(f"no credential form {form!r}: user_id, names or app_credential")

