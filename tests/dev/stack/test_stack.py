"""`python -m matos_dev.stack up|down|status` runs the real stack and keeps its data."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from matos_dev.stack import process
from matos_dev.stack.kafka import KafkaServer
from matos_dev.stack.stack import local_stack, registry_server
from swiftclient.client import Connection

from matos_dagster.core.settings import PROJECT_ROOT

# Shared with the other devstack tests and `make up`: the downloads are made only once.
CACHE_DIR = PROJECT_ROOT / ".devstack" / "cache"

pytestmark = pytest.mark.timeout(900)

TOPIC = "stack-roundtrip"
KEY = b"key-\x00\xff"
VALUE = bytes(range(256)) * 8
HEADERS = [("h", b"\x00\x01binary")]
CONTAINER = "stack-test"
OBJECT = "dir/obj-\u00e9.bin"
DATA = os.urandom(256 * 1024)


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "matos_dev.stack", *args],
        capture_output=True, text=True, timeout=timeout, cwd=PROJECT_ROOT,
    )


def _ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


@pytest.fixture
def stack_env(tmp_path, monkeypatch):
    """The stack's settings for this test: a temporary folder, free ports, the shared cache."""
    ports: list[int] = []
    while len(ports) < 4:
        port = process.free_port()
        if port not in ports:
            ports.append(port)
    kafka_port, swift_port, spark_port, registry_port = ports
    env = {
        "MATOS_DEVSTACK_DIR": str(tmp_path / "devstack"),
        "MATOS_DEVSTACK_CACHE": str(CACHE_DIR),
        "MATOS_DEVSTACK_KAFKA_PORT": str(kafka_port),
        "MATOS_DEVSTACK_SWIFT_PORT": str(swift_port),
        "MATOS_DEVSTACK_SPARK_PORT": str(spark_port),
        "MATOS_DEVSTACK_REGISTRY_PORT": str(registry_port),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # for the subprocesses and for local_stack() here
    yield env
    # Whatever happened, nothing is left running: each stop runs even if one before it fails.
    kafka, swift, spark = local_stack()
    with contextlib.ExitStack() as stops:  # its callbacks run last first
        for server in (kafka, swift, spark, registry_server()):
            stops.callback(server.stop)
        stops.callback(_cli, "down", timeout=120)


def _records(stack) -> dict[str, tuple[int, int]]:
    """PID and start time of every process, as recorded in its PID file."""
    kafka, swift, spark = stack
    files = {"kafka": kafka.pid_file, **{f"swift {s}": f for s, f in swift.pid_files.items()},
             "spark connect": spark.pid_file}
    records = {}
    for name, pid_file in files.items():
        pid, start_time = map(int, pid_file.read_text().split())
        records[name] = (pid, start_time)
    return records


def _proc_stat(pid: int) -> tuple[str, int] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def _is_live(pid: int, start_time: int) -> bool:
    stat = _proc_stat(pid)
    # A zombie has exited; its parent (init here) just has not collected it yet.
    return stat is not None and stat[1] == start_time and stat[0] not in "ZX"


def _children(pids: list[int]) -> str:
    """The live children of these processes, one `pid ppid args` line each.

    Zombies are left out: spark-submit's bash leaves one (the subshell that ran Spark's
    launcher) under the JVM it execs into; it has exited already and goes with the JVM.
    """
    result = subprocess.run(["ps", "-o", "stat=,pid=,ppid=,args=", "--ppid", ",".join(map(str, pids))],
                            capture_output=True, text=True)
    return "\n".join(line.split(None, 1)[1] for line in result.stdout.splitlines() if not line.startswith("Z"))


def _all_ports(stack) -> list[int]:
    kafka, swift, spark = stack
    return [kafka.port, kafka.controller_port, *swift.ports().values(), spark.port]


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])
    futures[TOPIC].result(timeout=30)  # `admin` stays referenced until the future resolves
    del admin


def _produce(bootstrap: str) -> None:
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(TOPIC, key=KEY, value=VALUE, headers=HEADERS, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None]


def _assert_the_record(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        messages, deadline = [], time.monotonic() + 30
        while not messages and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None:
                assert msg.error() is None, msg.error()
                messages.append(msg)
        assert len(messages) == 1
        msg = messages[0]
        assert (msg.key(), msg.value(), msg.headers(), msg.offset()) == (KEY, VALUE, HEADERS, 0)
        assert consumer.poll(1.0) is None  # and nothing else
    finally:
        consumer.close()


def _swift(swift) -> Connection:
    return Connection(authurl=swift.auth_url, user="test:tester", key="testing", auth_version="1", retries=1)


def _spark_job(url: str) -> None:
    """A tiny job on the Spark Connect server: a Python task run by the venv's python."""
    from matos_dagster.core.spark.tasks import run_tasks
    from matos_dagster.resources import SparkResource

    def where(_):
        import matos_dagster

        return f"{sys.executable} {matos_dagster.__file__}"

    resource = SparkResource(master=url)
    try:
        assert resource.spark_session.range(3).count() == 3
        assert run_tasks(resource.spark_session, where, [0]) == [
            f"{sys.executable} {PROJECT_ROOT / 'matos_dagster' / '__init__.py'}"]
    finally:
        resource.teardown_after_execution(None)


def test_up_down_status_and_data_survives(stack_env):
    started = time.monotonic()
    result = _ok(_cli("up"))
    up_s = time.monotonic() - started
    stack = local_stack()
    kafka, swift, spark = stack
    assert f"127.0.0.1:{stack_env['MATOS_DEVSTACK_KAFKA_PORT']}" in result.stdout
    assert f"sc://127.0.0.1:{stack_env['MATOS_DEVSTACK_SPARK_PORT']}" in result.stdout
    assert str(spark.log_file) in result.stdout
    assert f"http://127.0.0.1:{stack_env['MATOS_DEVSTACK_SWIFT_PORT']}/auth/v1.0" in result.stdout
    assert "test:tester" in result.stdout
    assert str(kafka.log_file) in result.stdout and str(swift.log_files["proxy"]) in result.stdout
    assert kafka.data_dir == Path(stack_env["MATOS_DEVSTACK_DIR"]) / "data" / "kafka"
    assert swift.data_dir == Path(stack_env["MATOS_DEVSTACK_DIR"]) / "data" / "swift"
    assert spark.data_dir == Path(stack_env["MATOS_DEVSTACK_DIR"]) / "data" / "spark"
    assert swift.venv.parent == CACHE_DIR
    assert not (Path(stack_env["MATOS_DEVSTACK_DIR"]) / "cache").exists()

    records = _records(stack)
    pids = [pid for pid, _ in records.values()]
    assert len(set(pids)) == 6 and all(_is_live(*r) for r in records.values())
    assert _children(pids) == ""  # no server forked a child (nothing could be left behind)
    ports = _all_ports(stack)
    assert len(set(ports)) == 7 and all(process.port_open(p) for p in ports)

    # Idempotent: a second `up` starts nothing new.
    _ok(_cli("up"))
    assert _records(stack) == records

    _create_topic(kafka.bootstrap_servers)
    _produce(kafka.bootstrap_servers)
    _assert_the_record(kafka.bootstrap_servers)
    conn = _swift(swift)
    conn.put_container(CONTAINER)
    conn.put_object(CONTAINER, OBJECT, DATA)
    assert conn.get_object(CONTAINER, OBJECT)[1] == DATA
    conn.close()
    _spark_job(spark.url)
    # The Python workers the job started (their daemon and its forks), to check `down` ends them.
    daemons = [int(line.split()[0]) for line in _children([records["spark connect"][0]]).splitlines()]
    assert daemons, "the UDF started no Python worker"
    workers = {pid: _proc_stat(pid)[1] for pid in
               daemons + [int(line.split()[0]) for line in _children(daemons).splitlines()]}

    status = _ok(_cli("status"))
    for name, (pid, _) in records.items():
        assert any(line.startswith(name) and f"PID {pid}" in line for line in status.stdout.splitlines()), name
    registry = registry_server()
    assert registry.url == f"http://127.0.0.1:{stack_env['MATOS_DEVSTACK_REGISTRY_PORT']}"
    assert registry.url in result.stdout
    assert any(line.startswith("Schema Registry stand-in") and f"PID {registry.pid()}" in line
               for line in status.stdout.splitlines())

    started = time.monotonic()
    down = _ok(_cli("down"))
    down_s = time.monotonic() - started
    for name, (pid, _) in records.items():
        assert f"PID {pid}" in down.stdout
    status = _cli("status")
    assert status.returncode == 1, status.stdout + status.stderr
    assert "running " not in status.stdout
    for name, record in records.items():
        assert not _is_live(*record), f"{name} (PID {record[0]}) still alive"
    for pid, start_time in workers.items():
        assert not _is_live(pid, start_time), f"Spark's Python worker (PID {pid}) still alive"
    for port in ports:
        assert not process.port_open(port), f"127.0.0.1:{port} still open"
    assert not kafka.pid_file.exists() and not any(f.exists() for f in swift.pid_files.values())
    assert not spark.pid_file.exists() and not registry_server().pid_file.exists()
    assert _cli("down").stdout.strip() == "The local stack was not running."
    # The broker logged through log4j2 into its log file, shutdown included; a KafkaServer made
    # with default arguments finds its ports in its data folder (what tests/dev/stack/
    # test_kafka_server.py shows of one broker, in make test-all).
    log = kafka.log_file.read_text()
    assert "Kafka Server started" in log and "shut down completed" in log
    found = KafkaServer(kafka.data_dir, CACHE_DIR)
    assert (found.bootstrap_servers, found.controller_port) == (kafka.bootstrap_servers, kafka.controller_port)

    started = time.monotonic()
    _ok(_cli("up"))
    up_again_s = time.monotonic() - started
    assert _all_ports(local_stack()) == ports
    _assert_the_record(kafka.bootstrap_servers)
    conn = _swift(swift)
    assert conn.get_object(CONTAINER, OBJECT)[1] == DATA
    conn.close()
    started = time.monotonic()
    _ok(_cli("down"))
    down_again_s = time.monotonic() - started
    assert _cli("status").returncode == 1
    print(f"\nup {up_s:.1f} s, down {down_s:.1f} s, up again {up_again_s:.1f} s, down again {down_again_s:.1f} s")


@pytest.mark.parametrize("setting", ["MATOS_DEVSTACK_KAFKA_PORT", "MATOS_DEVSTACK_SWIFT_PORT",
                                     "MATOS_DEVSTACK_SPARK_PORT", "MATOS_DEVSTACK_REGISTRY_PORT"])
def test_up_fails_clearly_when_a_port_is_taken(stack_env, setting):
    port = int(stack_env[setting])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
        result = _cli("up")
    assert result.returncode == 1
    error = result.stderr.strip()
    assert len(error.splitlines()) == 1, error  # one line, no traceback
    assert setting in error and str(port) in error, error
    assert _cli("status").returncode == 1  # and nothing was started
    kafka, swift, spark = local_stack()
    assert not kafka.pid_file.exists() and not any(f.exists() for f in swift.pid_files.values())
    assert not spark.pid_file.exists() and not registry_server().pid_file.exists()
