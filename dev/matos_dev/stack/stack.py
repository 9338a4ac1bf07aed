"""The local stack: one Kafka broker, one Swift all-in-one, one Spark Connect server and the
Schema Registry stand-in, under `MATOS_DEVSTACK_DIR`.

    <MATOS_DEVSTACK_DIR>/
      data/kafka/    the broker's data folder (see kafka.py)
      data/swift/    Swift's data folder (see swift.py)
      data/spark/    the Spark Connect server's data folder (see spark.py)
      data/registry/ the Schema Registry stand-in's data folder (see registry.py)
      data/postgres/ PostgreSQL for a production-like Dagster instance, with
                     MATOS_DEVSTACK_DAGSTER_STORAGE=postgres (see postgres.py)
      cache/         downloads: Kafka's jars, Swift's venv (MATOS_DEVSTACK_CACHE moves it)

`local_stack()` builds the three server objects from the settings, `registry_server()` the
stand-in's (and `keystone_server()`, `postgres_server()` the optional ones); starting,
stopping and status are theirs. `python -m matos_dev.stack` is the command line over this.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import itertools
import os
from pathlib import Path
from typing import NamedTuple

from matos_dagster.core import settings
from matos_dev.stack import process
from matos_dev.stack.kafka import KafkaServer
from matos_dev.stack.keystone import KeystoneServer
from matos_dev.stack.postgres import PostgresServer
from matos_dev.stack.registry import NAME as REGISTRY_NAME
from matos_dev.stack.registry import RegistryServer
from matos_dev.stack.spark import SparkConnectServer
from matos_dev.stack.swift import BACKENDS, SwiftServer

KAFKA_PORT_SETTING = "MATOS_DEVSTACK_KAFKA_PORT"
SWIFT_PORT_SETTING = "MATOS_DEVSTACK_SWIFT_PORT"
SPARK_PORT_SETTING = "MATOS_DEVSTACK_SPARK_PORT"
AUTH_SETTING = "MATOS_DEVSTACK_AUTH"
KEYSTONE_PORT_SETTING = "MATOS_DEVSTACK_KEYSTONE_PORT"
REGISTRY_PORT_SETTING = "MATOS_DEVSTACK_REGISTRY_PORT"
# `sqlite` (the default: `make run`'s embedded instance) or `postgres`: `up` also starts the
# PostgreSQL server of dagster.postgres.yaml. Read here only: the product never sees it.
DAGSTER_STORAGE_SETTING = "MATOS_DEVSTACK_DAGSTER_STORAGE"


class StackError(Exception):
    """An expected failure, told to the user in one line (no traceback)."""


class LocalStack(NamedTuple):
    kafka: KafkaServer
    swift: SwiftServer
    spark: SparkConnectServer


def devstack_dir() -> Path:
    return Path(settings.get("MATOS_DEVSTACK_DIR")).expanduser().absolute()


def cache_dir() -> Path:
    cache = settings.get("MATOS_DEVSTACK_CACHE")
    return Path(cache).expanduser().absolute() if cache else devstack_dir() / "cache"


def local_stack() -> LocalStack:
    """The Kafka broker, Swift all-in-one and Spark Connect server of the local stack (not started)."""
    root, cache = devstack_dir(), cache_dir()
    kafka = KafkaServer(root / "data" / "kafka", cache, port=_port(KAFKA_PORT_SETTING))
    # With MATOS_DEVSTACK_AUTH=keystone the proxy checks tokens with the local Keystone.
    keystone = keystone_server() if keystone_enabled() else None
    swift = SwiftServer(root / "data" / "swift", cache, proxy_port=_port(SWIFT_PORT_SETTING),
                        keystone=keystone.authtoken_conf() if keystone else None)
    spark = SparkConnectServer(root / "data" / "spark", port=_port(SPARK_PORT_SETTING))
    if not kafka.controller_port:
        # First start: pick the controller's port now, away from the ports the settings
        # name (free_port alone could hand out the Swift proxy's before Swift listens).
        taken = {kafka.port, swift.proxy_port, spark.port, _port(REGISTRY_PORT_SETTING),
                 *(p for p in swift.ports().values() if p)}
        while not kafka.controller_port or kafka.controller_port in taken:
            kafka.controller_port = process.free_port()
    return LocalStack(kafka, swift, spark)


def keystone_enabled() -> bool:
    auth = settings.get(AUTH_SETTING).strip().lower()
    if auth not in ("tempauth", "keystone"):
        raise StackError(f"{AUTH_SETTING} is {auth!r}; use tempauth or keystone")
    return auth == "keystone"


def keystone_server() -> KeystoneServer:
    """The local Keystone (data/keystone), whether or not MATOS_DEVSTACK_AUTH asks for it (`down` stops it anyway)."""
    return KeystoneServer(devstack_dir() / "data" / "keystone", cache_dir(), port=_port(KEYSTONE_PORT_SETTING),
                          swift_url=f"http://127.0.0.1:{_port(SWIFT_PORT_SETTING)}")


def registry_server() -> RegistryServer:
    """The Schema Registry stand-in (data/registry), on MATOS_DEVSTACK_REGISTRY_PORT, without auth."""
    return RegistryServer(devstack_dir() / "data" / "registry", port=_port(REGISTRY_PORT_SETTING))


def postgres_enabled() -> bool:
    storage = os.environ.get(DAGSTER_STORAGE_SETTING, "sqlite").strip().lower()
    if storage not in ("sqlite", "postgres"):
        raise StackError(f"{DAGSTER_STORAGE_SETTING} is {storage!r}; use sqlite or postgres")
    return storage == "postgres"


def postgres_server() -> PostgresServer:
    """The local PostgreSQL (data/postgres; its port is picked at its first start and kept)."""
    return PostgresServer(devstack_dir() / "data" / "postgres")


def check_ports(stack: LocalStack) -> None:
    """Raise StackError, naming the setting to change, if a port the stack needs is not free."""
    kafka, swift, spark = stack
    registry = registry_server()
    settings_ports = ((KAFKA_PORT_SETTING, kafka.port), (SWIFT_PORT_SETTING, swift.proxy_port),
                      (SPARK_PORT_SETTING, spark.port), (REGISTRY_PORT_SETTING, registry.port))
    for (first, port), (second, other) in itertools.combinations(settings_ports, 2):
        if port == other:
            raise StackError(f"{first} and {second} are both {port}; set one of them to another port")
    # Ports picked on a first start and saved in the data folders.
    internal = {p: f"the local Swift's {b} server" for b, p in swift.ports().items() if b in BACKENDS and p}
    if kafka.controller_port:
        internal[kafka.controller_port] = "the local Kafka's controller"
    for setting, port in settings_ports:
        if port in internal:
            raise StackError(f"port {port} is used by {internal[port]}; set {setting} to another port")

    running = running_ports(stack)
    for what, port, setting, actual in (
        ("Kafka", kafka.port, KAFKA_PORT_SETTING, running["kafka"]),
        ("the Swift proxy", swift.proxy_port, SWIFT_PORT_SETTING, running["swift"]),
        ("Spark Connect", spark.port, SPARK_PORT_SETTING, running["spark"]),
        (f"the {REGISTRY_NAME}", registry.port, REGISTRY_PORT_SETTING, running["registry"]),
    ):
        if actual is not None and actual != port:
            raise StackError(
                f"{what} already runs on port {actual}, but {setting} is {port}; "
                "run `python -m matos_dev.stack down` first")
        if actual is None and process.port_open(port):
            raise StackError(
                f"port {port} for {what} is already taken by another program; "
                f"stop it, or set {setting} to a free port")


def running_ports(stack: LocalStack) -> dict[str, int | None]:
    """The ports the running Kafka broker, Swift proxy, Spark Connect server and Schema Registry stand-in were
    started on (None: not running)."""
    kafka, swift, spark = stack
    kafka_port = swift_port = spark_port = registry_port = None
    if kafka.running():
        # Saved in its data folder at start; a server object without a port reads it.
        kafka_port = KafkaServer(kafka.data_dir, kafka.cache_dir).port
    if swift.status()["servers"]["proxy"]["running"]:
        conf = configparser.ConfigParser(interpolation=None)
        conf.read(swift.conf_files["proxy"])
        swift_port = conf.getint("DEFAULT", "bind_port", fallback=None)
    if spark.running():
        spark_port = SparkConnectServer(spark.data_dir).port  # saved in its data folder too
    registry = registry_server()
    if registry.running():
        registry_port = RegistryServer(registry.data_dir).port  # likewise
    return {"kafka": kafka_port, "swift": swift_port, "spark": spark_port, "registry": registry_port}


@contextlib.contextmanager
def locked():
    """Serialise `up` and `down` of the same devstack folder."""
    root = devstack_dir()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".stack.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _port(name: str) -> int:
    value = settings.get(name)
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise StackError(f"{name} must be a TCP port number (1-65535), not {value!r}")
    return port


class Server(NamedTuple):
    """One process of the stack, as `status` shows it."""

    name: str
    pid: int | None  # None: not running
    port: int | None
    log_file: Path


def servers(stack: LocalStack) -> list[Server]:
    """Kafka, the four Swift servers, Spark Connect and the Schema Registry stand-in (and Keystone, PostgreSQL
    if enabled or running): PID if running, port (the one it runs on), log file."""
    kafka, swift, spark = stack
    actual = running_ports(stack)
    rows = [Server("kafka", kafka.status()["pid"], actual["kafka"] or kafka.port, kafka.log_file)]
    for name, entry in swift.status()["servers"].items():
        port = (actual["swift"] or entry["port"]) if name == "proxy" else entry["port"]
        rows.append(Server(f"swift {name}", entry["pid"], port, Path(entry["log_file"])))
    rows.append(Server("spark connect", spark.status()["pid"], actual["spark"] or spark.port, spark.log_file))
    registry = registry_server()
    rows.append(Server(REGISTRY_NAME, registry.pid(), actual["registry"] or registry.port, registry.log_file))
    keystone = keystone_server()
    if keystone_enabled() or keystone.running():
        rows.append(Server("keystone", keystone.pid(), keystone.port, keystone.log_file))
    postgres = postgres_server()
    if postgres_enabled() or postgres.running():
        rows.append(Server("postgres", postgres.pid(), postgres.port or None, postgres.log_file))
    return rows
