"""Swift behind a real Keystone v3: every credential form, expiring tokens, bad settings, https, no secret.

One Keystone (keystone 30 from PyPI, SQLite, Fernet tokens, served over https with a CA
made here) and one Swift all-in-one whose proxy validates tokens with keystonemiddleware's
`authtoken` and maps roles with `keystoneauth`, both for the whole module. Tokens live
TOKEN_LIFE_S seconds only, so any test longer than that also re-authenticates mid-run. The
expiry test's run begins with the module's first test and ends after the others (half_run):
its tokens expire meanwhile.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from dagster import DagsterInstance
from helpers import check_archive, manifests, new_instance, produce, read_archive, read_kafka, table_rows
from matos_dev.stack.keystone import ARCHIVER, AUDITOR, PROJECT, KeystoneServer
from matos_dev.stack.process import free_port
from matos_dev.stack.swift import SwiftServer
from test_security import files_under, make_certs, spellings

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import read_table
from matos_dagster.core.restore.plan import Request
from matos_dagster.core.restore.run import restore
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import SwiftError
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic
from matos_dagster.resources import SwiftResource

pytestmark = pytest.mark.timeout(1200)

CACHE = Path(os.environ.get("MATOS_DEVSTACK_DIR", PROJECT_ROOT / ".devstack")) / "cache"
DAGSTER = str(Path(sys.executable).parent / "dagster")
TOKEN_LIFE_S = 45
# A Fernet token (keystone's): base64url of version 0x80 and a timestamp, then ~150 more characters.
FERNET_TOKEN = re.compile(rb"gAAAAA[A-Za-z0-9_\-]{100,}={0,2}")

FORMS = ("user_id", "names", "app_credential")
# `make test` archives, verifies and reads with one form; the others are slow (make test-all).
# Each form's settings become its Keystone session's params in tests/resources/test_keystone_settings.py,
# and every form still authenticates against this Keystone in `make test`: app_credential in the
# restore, restart and CLI tests, names (as the auditor) in the missing-role case.
FAST_FORMS = ("user_id",)


class KeystoneStack:
    def __init__(self, keystone: KeystoneServer, swift: SwiftServer, ca: str):
        self.keystone, self.swift, self.ca = keystone, swift, ca

    def resource(self, form: str = "user_id", **overrides: str) -> SwiftResource:
        """The archiver's SwiftResource in one credential form, as the MATOS_SWIFT_* settings give it."""
        fields = {name.removeprefix("MATOS_SWIFT_").lower(): value
                  for name, value in self.keystone.settings(form).items()}
        fields = {"user_id": "", "project_id": "", **fields, **overrides}
        fields["container"] = fields.get("container") or f"ks-{uuid.uuid4().hex[:10]}"
        return SwiftResource(prefix="kafka", retries=2, **fields)

    def admin_view(self, container: str) -> int:
        """HTTP status of a HEAD of `container` as the archiver, by hand (not through the product)."""
        token = self.keystone.token(ARCHIVER)
        return requests.head(f"{self.keystone.storage_url()}/{container}", headers={"X-Auth-Token": token},
                             timeout=30).status_code


@pytest.fixture(scope="module")
def ks(tmp_path_factory) -> KeystoneStack:
    certs = make_certs(tmp_path_factory.mktemp("ks-certs"))
    swift_port = free_port()
    keystone = KeystoneServer(tmp_path_factory.mktemp("keystone"), CACHE, port=free_port(),
                              swift_url=f"http://127.0.0.1:{swift_port}", cert_file=certs.swift_cert,
                              key_file=certs.swift_key, ca_file=certs.ca, token_expiration_s=TOKEN_LIFE_S)
    # The service user's password is made before Keystone starts (state.json), so Swift's conf is
    # known at once.
    swift = SwiftServer(tmp_path_factory.mktemp("swift-ks"), CACHE, proxy_port=swift_port,
                        keystone=keystone.authtoken_conf())
    try:
        # Swift (its keystone venv, apart from the tempauth one, installed first on a fresh cache)
        # needs nothing of Keystone's to start: its readiness check is an unauthenticated request,
        # refused by authtoken without asking Keystone. So it starts while Keystone installs and
        # bootstraps (about 10 s less on the 2-core CI than one after the other).
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            swift_started = pool.submit(lambda: (swift.install(), swift.start(timeout=300)))
            keystone.install()  # on a fresh cache, outside start's deadline
            keystone.start()
            swift_started.result()
        yield KeystoneStack(keystone, swift, certs.ca)
    finally:
        try:
            swift.stop()
        finally:
            keystone.stop()


def rows(n: int):
    for i in range(n):
        yield f"k{i}".encode(), f"value {i}".encode() * 3, [("h", bytes([i % 256]))]


# --------------------------------------------------------------------------- each credential form


@pytest.mark.parametrize("form", [pytest.param(f, marks=() if f in FAST_FORMS else [pytest.mark.slow]) for f in FORMS])
def test_archive_verify_and_read_with_each_keystone_v3_credential_form(ks, kafka, new_topic, spark, form):
    topic = new_topic()
    produce(kafka, topic, rows(40))
    cfg = TopicConfig(topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=15)
    # The names form takes the catalog's internal endpoint (registered as `localhost`), the others the public one.
    interface = "internal" if form == "names" else "public"
    swift = ks.resource(form, interface=interface)
    with swift.store() as store:
        assert store.url == ks.keystone.storage_url(interface)
        done = archive_range(OffsetRange(topic, 0, 0, 40), cfg, kafka, store, spark)
        assert done.slices == 3 and done.manifest["records"] == 40
        original = read_kafka(kafka, topic, 0)
        assert read_archive(store, done.manifest) == original
        assert check_archive(kafka, store, topic, cfg.group) == {0: 40}
        report = verify_topic(kafka, store, layout.join(store.params.prefix, cfg.prefix), cfg, sample=None)
        assert report.ok and report.compared == 40, report.render()
        assert table_rows(read_table(store, "kafka", topic)) == original
    assert ks.admin_view(swift.container) == 204  # in the archiver's project account, seen by hand


def test_restore_through_keystone_equals_the_originals(ks, kafka, new_topic, spark):
    topic = new_topic()
    produce(kafka, topic, rows(30))
    cfg = TopicConfig(topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=10)
    target = new_topic()
    with ks.resource("app_credential").store() as store:
        archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)
        report = restore(Request(topic, "kafka", target=target), kafka, store, spark)
    assert report.records == 30, report
    strip = ("topic", "offset")
    assert [{k: v for k, v in r.items() if k not in strip} for r in read_kafka(kafka, target, 0)] == \
        [{k: v for k, v in r.items() if k not in strip} for r in read_kafka(kafka, topic, 0)]


# --------------------------------------------------------------------------- bad settings


WRONG = "wrong-" + uuid.uuid4().hex[:8]


@pytest.mark.parametrize("case, overrides, says", [
    ("wrong password", {"key": WRONG},
     "refused the user's credentials: check MATOS_SWIFT_USER_ID and MATOS_SWIFT_KEY"),
    ("wrong application credential secret", {"app_credential_secret": WRONG},
     "refused the application credential: check MATOS_SWIFT_APP_CREDENTIAL_ID and MATOS_SWIFT_APP_CREDENTIAL_SECRET"),
    ("unknown project", {"project_id": uuid.uuid4().hex},
     "the project does not exist or the user has no role on it: check MATOS_SWIFT_PROJECT_ID"),
    ("unknown project name", {"project_name": "no-such-project"},
     "check MATOS_SWIFT_PROJECT_NAME and MATOS_SWIFT_PROJECT_DOMAIN"),
    ("wrong region", {"region": "RegionNowhere"},
     "no object-store endpoint with interface 'public' in region 'RegionNowhere': check MATOS_SWIFT_REGION and "
     "MATOS_SWIFT_INTERFACE (the catalog has: internal in RegionOne, public in RegionOne)"),
    ("missing role", {"user_id": "", "user": AUDITOR, "domain": "Default", "project_id": "", "project_name": PROJECT},
     "its Keystone token has no role that Swift lets use the project's account"),
], ids=lambda v: v if isinstance(v, str) and " " in v and len(v) < 40 else "")
def test_bad_keystone_settings_fail_at_once_naming_the_setting_and_write_nothing(ks, case, overrides, says):
    form = ("app_credential" if "application" in case else
            "names" if "name" in case or case == "missing role" else "user_id")
    overrides = dict(overrides)
    if case == "missing role":  # the auditor: a good password, only `reader` on the project
        overrides["key"] = ks.keystone.state()[f"{AUDITOR}_password"]
    swift = ks.resource(form, **overrides)
    with pytest.raises(SwiftError) as e:
        swift.store()
    message = str(e.value)
    assert says in message, message
    for secret in (WRONG, ks.keystone.state()[f"{ARCHIVER}_password"], ks.keystone.state()["app_credential_secret"]):
        assert secret not in message
    assert ks.admin_view(swift.container) == 404  # nothing was created


def test_https_keystone_without_its_ca_is_a_clear_tls_error(ks):
    swift = ks.resource("user_id", ca_file="")  # the system CAs do not know ours
    with pytest.raises(SwiftError) as e:
        swift.store()
    message = str(e.value)
    assert ks.keystone.auth_url.startswith("https://")
    assert "its TLS certificate could not be verified: set MATOS_SWIFT_CA_FILE" in message, message
    assert ks.admin_view(swift.container) == 404


# --------------------------------------------------------------------------- no secret anywhere


def dagster(env, cwd, *args) -> subprocess.CompletedProcess:
    p = subprocess.run([DAGSTER, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def test_a_cli_archive_through_keystone_leaves_no_password_secret_or_token_anywhere(ks, kafka_server, kafka,
                                                                                   new_topic, tmp_path):
    topic = new_topic()
    produce(kafka, topic, rows(60))
    group = f"ks-{uuid.uuid4().hex[:8]}"
    container = f"ks-cli-{uuid.uuid4().hex[:10]}"
    (tmp_path / "topics.yaml").write_text(f"topics:\n  - name: {topic}\n    group: {group}\n    slice_records: 25\n")
    home = new_instance(tmp_path / "dagster_home")
    event_logs = tmp_path / "spark-events"
    event_logs.mkdir()
    base = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MATOS_") or k in ("MATOS_DEVSTACK_DIR", "MATOS_DEV")},
        "DAGSTER_HOME": str(home),
        "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml"),
        "MATOS_KAFKA_BOOTSTRAP_SERVERS": kafka_server.bootstrap_servers,
        "MATOS_SWIFT_CONTAINER": container,
        "MATOS_SPARK_MASTER": "local[2]",
        "MATOS_SPARK_CONF": f"spark.eventLog.enabled=true;spark.eventLog.dir=file://{event_logs};"
                            "spark.eventLog.compress=false",
    }
    by_password = {**base, **ks.keystone.settings("user_id")}
    by_app_credential = {**base, **ks.keystone.settings("app_credential")}
    password = by_password["MATOS_SWIFT_KEY"]
    app_secret = by_app_credential["MATOS_SWIFT_APP_CREDENTIAL_SECRET"]
    asset = TopicConfig(topic).asset_name
    key = OffsetRange(topic, 0, 0, 60).key
    (tmp_path / "ranges.yaml").write_text(json.dumps({"ops": {"add_range_keys": {"config": {"topic": topic}}}}))
    outputs = []
    for env, args in (
        (by_password, ["job", "execute", "-m", "matos_dagster.definitions", "-j", "add_ranges", "-c", "ranges.yaml"]),
        (by_password, ["asset", "materialize", "-m", "matos_dagster.definitions", "--select", asset,
                       "--partition", key]),
        (by_app_credential, ["job", "execute", "-m", "matos_dagster.definitions", "-j", "monitor_checks"]),
    ):
        p = dagster(env, tmp_path, *args)
        outputs += [p.stdout, p.stderr]

    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_dynamic_partitions(f"{asset}_ranges") == [key]
    with ks.resource("user_id", container=container).store() as store:
        assert check_archive(kafka, store, topic, group) == {0: 60}
        (doc,) = manifests(store, topic)
        assert read_archive(store, doc) == read_kafka(kafka, topic, 0)
        token = store._conn.token  # a token of ours: the control for the token search

    sources: dict[str, dict[str, bytes]] = {
        "dagster CLI output": {f"output {i}": o.encode() for i, o in enumerate(outputs)},
        "DAGSTER_HOME (storage, compute logs)": files_under(home),
        "Spark event log": files_under(event_logs),
        "the test folder": files_under(tmp_path),
        "Swift server logs": files_under(ks.swift.log_dir),
        "Keystone logs": files_under(ks.keystone.log_dir),
    }
    assert any(b"SparkListenerTaskEnd" in blob for blob in sources["Spark event log"].values())
    assert any("compute_logs" in name for name in sources["DAGSTER_HOME (storage, compute logs)"])

    def found(value: str) -> list[str]:
        return [f"{source}: {name}" for source, blobs in sources.items() for name, blob in blobs.items()
                if any(s in blob for s in spellings(value))]

    leaks = found(password) + found(app_secret)
    assert not leaks, f"a secret appears in {leaks}"
    tokens = [f"{source}: {name}" for source, blobs in sources.items() for name, blob in blobs.items()
              if FERNET_TOKEN.search(blob)]
    assert not tokens, f"a whole Keystone token appears in {tokens}"

    # Controls: the searches find what they look for, in every source.
    assert FERNET_TOKEN.search(token.encode()) and found(token) == []
    for source in ("dagster CLI output", "DAGSTER_HOME", "Spark event log", "the test folder"):
        assert any(s.startswith(source) for s in found(topic)), f"{topic} not found in the {source}"
    assert any(s.startswith("Swift server logs") for s in found(container))
    assert any(s.startswith("Keystone logs") for s in found("POST /v3/auth/tokens"))  # its access log


# --------------------------------------------------------------------------- a token that expires

EXPIRY_TEST = "test_a_token_that_expires_in_the_middle_of_a_run_is_renewed"


@dataclass
class HalfRun:
    """The expiry test's run, its first half archived: two connections, each holding a token."""

    topic: str
    cfg: TopicConfig
    store: object
    uploader: object
    tokens: list[str]
    first_half: object


@pytest.fixture(scope="module", autouse=True)
def half_run(request):
    """The first half of the expiry test's run, begun with the module's first test when that test is
    selected: its tokens then expire while the module's other tests run (the expiry test comes after
    them), instead of while the expiry test waits. Run alone, the test waits for them as before."""
    if not any(item.module is request.module and getattr(item, "originalname", "") == EXPIRY_TEST
               for item in request.session.items):
        yield None
        return
    ks, kafka, spark = (request.getfixturevalue(name) for name in ("ks", "kafka", "spark"))
    topic = f"ks-expiry-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    produce(kafka, topic, rows(30))
    cfg = TopicConfig(topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=10)
    swift = ks.resource("user_id")
    # Two connections of the run, each holding a token: one archives, one only uploads.
    with swift.store() as store, ks.resource("user_id", container=swift.container).store() as uploader:
        tokens = [store._conn.token, uploader._conn.token]
        first_half = archive_range(OffsetRange(topic, 0, 0, 10), cfg, kafka, store, spark)
        yield HalfRun(topic, cfg, store, uploader, tokens, first_half)


def test_a_token_that_expires_in_the_middle_of_a_run_is_renewed(ks, kafka, spark, half_run):
    topic, cfg, store, uploader, tokens = half_run.topic, half_run.cfg, half_run.store, half_run.uploader, \
        half_run.tokens
    # Wait until Swift itself refuses both tokens (Keystone's expiry, through authtoken's cache).
    deadline = time.monotonic() + 4 * TOKEN_LIFE_S
    for token in tokens:
        while requests.head(store.url, headers={"X-Auth-Token": token}, timeout=30).status_code != 401:
            assert time.monotonic() < deadline, "the token never expired"
            time.sleep(2)
    # An upload as the first request after expiry: refused (401), sent again with a new token.
    data = os.urandom(100_000)
    uploader.put("after-expiry", data)
    assert uploader._conn.token != tokens[1] and uploader.get("after-expiry") == data
    # The run goes on with its connection: a new token, no failure, nothing twice.
    second_half = archive_range(OffsetRange(topic, 0, 10, 30), cfg, kafka, store, spark)
    assert store._conn.token != tokens[0]
    assert [m["start"] for m in (half_run.first_half.manifest, second_half.manifest)] == [0, 10]
    assert check_archive(kafka, store, topic, cfg.group) == {0: 30}
    assert read_archive(store, half_run.first_half.manifest) + read_archive(store, second_half.manifest) == \
        read_kafka(kafka, topic, 0)


# --------------------------------------------------------------------------- persistence


def test_keystone_keeps_its_users_and_catalog_across_a_restart(ks):
    before = ks.keystone.state()
    ks.keystone.stop()
    assert not ks.keystone.running()
    ks.keystone.start()
    after = ks.keystone.state()
    assert {k: after[k] for k in ("project_id", "user_ids", "app_credential_id")} == \
        {k: before[k] for k in ("project_id", "user_ids", "app_credential_id")}
    with ks.resource("app_credential").store() as store:  # the credential made before the restart
        assert store.url == ks.keystone.storage_url("public")


# --------------------------------------------------------------------------- uploads after a 401


def test_an_upload_refused_for_a_stale_token_is_sent_again_after_authenticating(swift):
    """Any auth: swiftclient re-sends a refused upload only if it can rewind it (bytes it cannot)."""
    with swift.store() as store:
        stale = store._conn.token = "AUTH_tk" + uuid.uuid4().hex  # what an expired token looks like to Swift
        data = os.urandom(200_000)
        store.put("after-a-401", data)
        assert store._conn.token != stale  # it was refused, and the upload sent again with a new one
        assert store.get("after-a-401") == data
