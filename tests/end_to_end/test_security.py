"""Security: Kafka over SSL and SASL_SSL, Swift over https, and no secret anywhere.

Module fixtures start a broker of their own with PLAINTEXT (readiness and test set-up), SSL
and SASL_SSL listeners (PLAIN users in the listener's JAAS config, SCRAM-SHA-256/512
credentials created over PLAINTEXT with the admin API, as KRaft keeps them in its metadata),
and a Swift whose proxy serves https. The certificates are made here with openssl: a CA,
and one certificate for 127.0.0.1/localhost for each server.

The last test runs a whole archive through the `dagster` CLI with distinctive secrets (the
SASL password, the Swift key) and searches everything the run left behind for them.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from dagster import DagsterInstance
from helpers import check_archive, manifests, new_instance, produce, read_archive, read_kafka
from matos_dev.stack.kafka import KafkaServer
from matos_dev.stack.process import free_port
from matos_dev.stack.registry import RegistryServer
from matos_dev.stack.swift import SwiftServer
from swiftclient import Connection
from swiftclient.exceptions import ClientException

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.kafka.errors import KafkaUnavailable
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.swift.store import SwiftError
from matos_dagster.core.topics import TopicConfig
from matos_dagster.resources import KafkaResource, SwiftResource

pytestmark = pytest.mark.timeout(900)

CACHE = Path(os.environ.get("MATOS_DEVSTACK_DIR", PROJECT_ROOT / ".devstack")) / "cache"
DAGSTER = str(Path(sys.executable).parent / "dagster")

# Distinctive and alphanumeric, so a hit can only be a leak and there is no other spelling
# of it in a URL, JSON or a command line.
KAFKA_SECRET = "kAfKaPaSs" + uuid.uuid4().hex + "W0rD"  # SASL PLAIN password of `token` (Message Hub style)
SWIFT_SECRET = "sWiFtKeY" + uuid.uuid4().hex + "sEcReT"
REGISTRY_SECRET = "rEgIsTrY" + uuid.uuid4().hex + "aPiSeCrEt"  # the schema registry's API secret
ALICE = ("alice", "alice-" + uuid.uuid4().hex[:12])  # a SASL PLAIN user
BOB = ("bob", "bob-" + uuid.uuid4().hex[:12])  # a SCRAM user, SHA-256 and SHA-512
SWIFT_USER = "secure:archiver"


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Certs:
    ca: str  # PEM of the CA, what clients are given
    kafka_keystore: str  # PEM: the broker's private key (PKCS#8) and certificate
    swift_cert: str
    swift_key: str


def make_certs(d: Path) -> Certs:
    def openssl(*args: str) -> None:
        p = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True)
        assert p.returncode == 0, p.stderr

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=matos-dagster test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                                  "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n")
    for name in ("kafka", "swift"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", "/CN=localhost")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", "server.ext")
    (d / "kafka-keystore.pem").write_text((d / "kafka.key").read_text() + (d / "kafka.pem").read_text())
    return Certs(str(d / "ca.pem"), str(d / "kafka-keystore.pem"), str(d / "swift.pem"), str(d / "swift.key"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


# --------------------------------------------------------------------------- a secured broker


@dataclass
class SecureKafka:
    server: KafkaServer
    ssl_port: int
    sasl_port: int
    ca_file: str

    @property
    def plaintext(self) -> KafkaResource:
        return KafkaResource(bootstrap_servers=self.server.bootstrap_servers, timeout_s=10)

    def over(self, protocol: str, mechanism: str = "PLAIN", user: tuple[str, str] = ("", ""),
             ca_file: str | None = None) -> KafkaResource:
        port = self.ssl_port if protocol == "SSL" else self.sasl_port
        return KafkaResource(bootstrap_servers=f"127.0.0.1:{port}", security_protocol=protocol,
                             sasl_mechanism=mechanism, username=user[0], password=user[1],
                             ca_file=self.ca_file if ca_file is None else ca_file, timeout_s=10)

    def topic(self, partitions: int = 1) -> str:
        name = f"sec-{uuid.uuid4().hex[:10]}"
        admin = self.plaintext.admin()
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
        return name


def secure_listeners(port: int, controller: int, ssl_port: int, sasl_port: int, keystore: str) -> dict[str, str]:
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in (ALICE, ("token", KAFKA_SECRET)))
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller},"
                     f"SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SSL://127.0.0.1:{ssl_port},"
                                f"SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": keystore,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
    }


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory, certs) -> SecureKafka:
    ports: list[int] = []
    while len(ports) < 4:
        if (p := free_port()) not in ports:
            ports.append(p)
    port, controller, ssl_port, sasl_port = ports
    server = KafkaServer(tmp_path_factory.mktemp("kafka-secure"), CACHE, port=port, controller_port=controller,
                         extra_properties=secure_listeners(port, controller, ssl_port, sasl_port, certs.kafka_keystore))
    server.start()
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
        # One credential change per user and request.
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upsert = UserScramCredentialUpsertion(BOB[0], ScramCredentialInfo(mechanism, 4096), BOB[1].encode())
            admin.alter_user_scram_credentials([upsert])[BOB[0]].result(30)
        yield SecureKafka(server, ssl_port, sasl_port, certs.ca)
    finally:
        server.stop()


def rows(n: int):
    for i in range(n):
        yield bytes([i % 256, 0, 255]), f"v{i}".encode() * 5, [("h", b"\x00\xff")]


# --------------------------------------------------------------------------- Kafka


@pytest.mark.parametrize("protocol, mechanism, user", [
    ("SSL", "PLAIN", ("", "")),
    ("SASL_SSL", "PLAIN", ALICE),
    ("SASL_SSL", "SCRAM-SHA-256", BOB),
    ("SASL_SSL", "SCRAM-SHA-512", BOB),
], ids=["SSL", "SASL_SSL-PLAIN", "SASL_SSL-SCRAM-SHA-256", "SASL_SSL-SCRAM-SHA-512"])
def test_records_archive_over_each_secured_kafka_listener(secure_kafka, swift, spark, protocol, mechanism, user):
    secured = secure_kafka.over(protocol, mechanism, user)
    topic = secure_kafka.topic()
    produce(secured, topic, rows(60))
    cfg = TopicConfig(topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=25)
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 60), cfg, secured, store, spark)
        assert done.slices == 3 and done.manifest["records"] == 60
        assert read_archive(store, done.manifest) == read_kafka(secure_kafka.plaintext, topic, 0)
        assert check_archive(secured, store, topic, cfg.group) == {0: 60}
    assert secure_kafka.plaintext.committed(topic, [0], cfg.group) == {0: 60}


@pytest.mark.parametrize("mechanism, user", [("PLAIN", ALICE[0]), ("SCRAM-SHA-512", BOB[0])])
def test_a_wrong_sasl_password_is_refused_at_once_naming_the_settings(secure_kafka, swift, spark, mechanism, user):
    topic = secure_kafka.topic()
    produce(secure_kafka.plaintext, topic, rows(10))
    wrong_password = "wrong-" + uuid.uuid4().hex[:8]
    wrong = secure_kafka.over("SASL_SSL", mechanism, (user, wrong_password))
    cfg = TopicConfig(topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        with pytest.raises(KafkaUnavailable) as e:
            archive_range(OffsetRange(topic, 0, 0, 10), cfg, wrong, store, spark)
        assert manifests(store, topic) == []
    message = str(e.value)
    assert f"refused the SASL {mechanism} login of user {user!r}" in message, message
    assert "Authentication failed" in message
    assert "check MATOS_KAFKA_USERNAME / MATOS_KAFKA_PASSWORD / MATOS_KAFKA_SASL_MECHANISM" in message
    assert wrong_password not in message
    # At once: the broker's refusal ended the wait, not the timeout (whose error says so).
    assert "did not answer" not in message, message
    assert secure_kafka.plaintext.committed(topic, [0], cfg.group) == {0: None}


def test_ssl_without_the_brokers_ca_is_a_clear_tls_error(secure_kafka):
    untrusting = secure_kafka.over("SSL", ca_file="")  # the system CAs do not know ours
    with pytest.raises(KafkaUnavailable) as e:
        untrusting.partitions("any")
    assert "did not answer" not in str(e.value), str(e.value)  # the handshake's failure, not a timeout
    assert "the TLS handshake failed" in str(e.value) and "certificate verify failed" in str(e.value)
    assert "check MATOS_KAFKA_CA_FILE" in str(e.value)


# --------------------------------------------------------------------------- Swift over https


@pytest.fixture(scope="module")
def tls_swift(tmp_path_factory, certs):
    server = SwiftServer(tmp_path_factory.mktemp("swift-tls"), CACHE, proxy_port=free_port(),
                         extra_proxy_conf={"cert_file": certs.swift_cert, "key_file": certs.swift_key},
                         users={SWIFT_USER: SWIFT_SECRET})
    assert server.auth_url.startswith("https://")
    # SwiftServer's readiness check verifies the certificate with the default CAs; for the
    # start only, requests is pointed at ours (it reads REQUESTS_CA_BUNDLE on every request).
    with pytest.MonkeyPatch.context() as env:
        env.setenv("REQUESTS_CA_BUNDLE", certs.ca)
        server.start()
    yield server
    server.stop()


def https_swift(tls_swift, **kw) -> SwiftResource:
    return SwiftResource(auth_url=tls_swift.auth_url, user=SWIFT_USER, key=SWIFT_SECRET,
                         container=f"tls-{uuid.uuid4().hex[:10]}", retries=1, **kw)


def admin_connection(tls_swift, certs) -> Connection:
    return Connection(authurl=tls_swift.auth_url, user=SWIFT_USER, key=SWIFT_SECRET, cacert=certs.ca, retries=1)


def test_archive_over_https_with_the_ca_file(kafka, new_topic, spark, tls_swift, certs):
    topic = new_topic()
    produce(kafka, topic, rows(30))
    cfg = TopicConfig(topic, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=10)
    swift = https_swift(tls_swift, ca_file=certs.ca)
    with swift.store() as store:
        assert store.url.startswith("https://127.0.0.1:")
        done = archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)
        assert done.slices == 3
        assert read_archive(store, done.manifest) == read_kafka(kafka, topic, 0)
        assert check_archive(kafka, store, topic, cfg.group) == {0: 30}


def test_https_without_the_ca_is_a_clear_tls_error(tls_swift, certs):
    swift = https_swift(tls_swift)  # verification on, system CAs only
    with pytest.raises(SwiftError) as e:
        swift.store()
    message = str(e.value)
    assert "its TLS certificate could not be verified: set MATOS_SWIFT_CA_FILE" in message, message
    assert "CERTIFICATE_VERIFY_FAILED" in message and SWIFT_SECRET not in message
    conn = admin_connection(tls_swift, certs)
    with pytest.raises(ClientException) as missing:
        conn.head_container(swift.container)
    assert missing.value.http_status == 404  # nothing was created


def test_tls_verification_off_works_but_warns(kafka, new_topic, spark, tls_swift):
    topic = new_topic()
    produce(kafka, topic, rows(20))
    cfg = TopicConfig(topic, group=f"g-{uuid.uuid4().hex[:8]}")
    swift = https_swift(tls_swift, verify_tls="false")
    with pytest.warns(UserWarning, match=r"TLS verification of https://127\.0\.0\.1:\d+/auth/v1\.0 is OFF "
                                         r"\(MATOS_SWIFT_VERIFY_TLS=false\)"):
        with swift.store() as store:
            done = archive_range(OffsetRange(topic, 0, 0, 20), cfg, kafka, store, spark)
            assert read_archive(store, done.manifest) == read_kafka(kafka, topic, 0)
            assert check_archive(kafka, store, topic, cfg.group) == {0: 20}


# --------------------------------------------------------------------------- no secret anywhere


def files_under(*roots: Path) -> dict[str, bytes]:
    return {str(f): f.read_bytes() for root in roots for f in sorted(Path(root).rglob("*")) if f.is_file()}


def spellings(secret: str) -> list[bytes]:
    """The secret, and its base64 at each of the three alignments (minus the edges)."""
    raw = secret.encode()
    return [raw] + [base64.b64encode(b"\0" * shift + raw)[4:-4] for shift in range(3)]


def dagster(env, cwd, *args) -> subprocess.CompletedProcess:
    p = subprocess.run([DAGSTER, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


@pytest.fixture
def auth_registry(tmp_path_factory):
    """A Schema Registry stand-in that asks for basic auth, with the distinctive secret."""
    server = RegistryServer(tmp_path_factory.mktemp("auth-registry"), port=free_port(), user="archiver",
                            password=REGISTRY_SECRET)
    server.start()
    yield server
    server.stop()


def avro_rows(registry: RegistryServer, topic: str, n: int):
    """Avro values in the wire format, their schema registered in the registry that asks for auth."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = json.dumps({"type": "record", "name": "Secret", "fields": [{"name": "n", "type": "long"}]})
    serialize = AvroSerializer(SchemaRegistryClient(registry.client_config()), schema)
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [(key, serialize({"n": i}, ctx), headers) for i, (key, _, headers) in enumerate(rows(n))]


def test_a_full_cli_archive_over_sasl_ssl_and_https_leaves_no_secret_anywhere(secure_kafka, tls_swift, certs,
                                                                              auth_registry, tmp_path):
    """Kafka over SASL_SSL, Swift over https, and a typed topic whose schemas come from a registry
    that asks for basic auth: the Spark tasks ask it for the schema, with the credentials."""
    topic = secure_kafka.topic()
    produce(secure_kafka.plaintext, topic, avro_rows(auth_registry, topic, 100))
    group = f"secure-{uuid.uuid4().hex[:8]}"
    container = f"secure-{uuid.uuid4().hex[:10]}"
    (tmp_path / "topics.yaml").write_text(f"topics:\n  - name: {topic}\n    group: {group}\n    slice_records: 40\n"
                                          "    value_format: avro\n")
    home = new_instance(tmp_path / "dagster_home")
    event_logs = tmp_path / "spark-events"
    event_logs.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MATOS_") or k in ("MATOS_DEVSTACK_DIR", "MATOS_DEV")},
        "DAGSTER_HOME": str(home),
        "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml"),
        "MATOS_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{secure_kafka.sasl_port}",
        "MATOS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MATOS_KAFKA_SASL_MECHANISM": "PLAIN",
        "MATOS_KAFKA_USERNAME": "token",
        "MATOS_KAFKA_PASSWORD": KAFKA_SECRET,
        "MATOS_KAFKA_CA_FILE": certs.ca,
        "MATOS_SWIFT_AUTH_URL": tls_swift.auth_url,
        "MATOS_SWIFT_USER": SWIFT_USER,
        "MATOS_SWIFT_KEY": SWIFT_SECRET,
        "MATOS_SWIFT_CA_FILE": certs.ca,
        "MATOS_SWIFT_CONTAINER": container,
        "MATOS_SCHEMA_REGISTRY_URL": auth_registry.url,
        "MATOS_SCHEMA_REGISTRY_USERNAME": "archiver",
        "MATOS_SCHEMA_REGISTRY_PASSWORD": REGISTRY_SECRET,
        "MATOS_SPARK_MASTER": "local[2]",
        "MATOS_SPARK_CONF": f"spark.eventLog.enabled=true;spark.eventLog.dir=file://{event_logs};"
                            "spark.eventLog.compress=false",
    }
    asset = TopicConfig(topic).asset_name
    (tmp_path / "ranges.yaml").write_text(json.dumps({"ops": {"add_range_keys": {"config": {"topic": topic}}}}))
    outputs = []
    for args in (["job", "execute", "-m", "matos_dagster.definitions", "-j", "add_ranges", "-c", "ranges.yaml"],
                 ["asset", "materialize", "-m", "matos_dagster.definitions", "--select", asset,
                  "--partition", OffsetRange(topic, 0, 0, 100).key],
                 ["job", "execute", "-m", "matos_dagster.definitions", "-j", "monitor_checks"]):
        p = dagster(env, tmp_path, *args)
        outputs += [p.stdout, p.stderr]

    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_dynamic_partitions(f"{asset}_ranges") == [OffsetRange(topic, 0, 0, 100).key]
    swift = SwiftResource(auth_url=tls_swift.auth_url, user=SWIFT_USER, key=SWIFT_SECRET, container=container,
                          ca_file=certs.ca)
    with swift.store() as store:
        assert check_archive(secure_kafka.plaintext, store, topic, group) == {0: 100}
        (doc,) = manifests(store, topic)
        assert read_archive(store, doc) == read_kafka(secure_kafka.plaintext, topic, 0)
        assert doc["typed"]["value"]["decoded"] == 100  # the registry was asked, with the credentials
        storage_url = store.url

    # The container the run created is private: no read or write ACL, and anonymous requests fail.
    headers = admin_connection(tls_swift, certs).head_container(container)
    assert "x-container-read" not in headers and "x-container-write" not in headers, headers
    assert requests.get(f"{storage_url}/{container}", verify=certs.ca, timeout=10).status_code == 401
    assert requests.get(f"{storage_url}/{container}/{doc['objects'][0]['name']}", verify=certs.ca,
                        timeout=10).status_code == 401

    # Search everything the run left behind, and every log file of the servers it talked to.
    sources: dict[str, dict[str, bytes]] = {
        "dagster CLI output": {f"output {i}": o.encode() for i, o in enumerate(outputs)},
        "DAGSTER_HOME (storage, compute logs)": files_under(home),
        "Spark event log": files_under(event_logs),
        "the test folder": files_under(tmp_path),
        "Kafka broker log": {str(secure_kafka.server.log_file): secure_kafka.server.log_file.read_bytes()},
        "Swift server logs": files_under(tls_swift.log_dir),
        "Schema registry log": {str(auth_registry.log_file): auth_registry.log_file.read_bytes()},
    }
    assert any(b"SparkListenerTaskEnd" in blob for blob in sources["Spark event log"].values())
    assert any("compute_logs" in name for name in sources["DAGSTER_HOME (storage, compute logs)"])

    def found(value: str) -> list[str]:
        return [f"{source}: {name}" for source, blobs in sources.items() for name, blob in blobs.items()
                if any(s in blob for s in spellings(value))]

    leaks = found(KAFKA_SECRET) + found(SWIFT_SECRET) + found(REGISTRY_SECRET)
    assert not leaks, f"a secret appears in {leaks}"

    # Controls: the same search finds a distinctive value that is not secret in every source.
    def holds(source: str, value: str) -> bool:
        return any(s.startswith(source) for s in found(value))

    for source in ("dagster CLI output", "DAGSTER_HOME", "Spark event log", "the test folder", "Kafka broker log"):
        assert holds(source, topic), f"{topic} not found in the {source}"
    assert holds("DAGSTER_HOME", container) and holds("Swift server logs", container)
