"""The devstack's Kafka broker is a real broker that keeps its records across stop/start."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from matos_dev.stack import kafka as kafka_module
from matos_dev.stack import process
from matos_dev.stack.kafka import KAFKA_VERSION, KafkaServer, kafka_classpath

# Shared with the project's conftest (git-ignored) so the jars are fetched only once.
CACHE_DIR = Path(__file__).resolve().parents[3] / ".devstack" / "cache"

pytestmark = pytest.mark.timeout(600)

KEY = b"key-\x00\xff"
VALUE = bytes(range(256)) * 4  # every byte value, to prove the round trip is byte-exact
HEADERS = [("h", b"\x00\x01binary")]


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    futures[topic].result(timeout=30)


def _produce(bootstrap: str, topic: str) -> None:
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, key=KEY, value=VALUE, headers=HEADERS, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(30) == 0
    assert errors == [None]


def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        messages = []
        deadline = time.monotonic() + timeout
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            messages.append(msg)
        return messages
    finally:
        consumer.close()


def _assert_the_record(messages: list) -> None:
    assert len(messages) == 1
    msg = messages[0]
    assert msg.key() == KEY
    assert msg.value() == VALUE
    assert msg.headers() == HEADERS
    assert msg.offset() == 0


def _assert_gone(pid: int, ports: tuple[int, ...]) -> None:
    assert not process.pid_alive(pid)
    for port in ports:
        assert not process.port_open(port), f"127.0.0.1:{port} still open"


# Slow, both (make test-all): tests/dev/stack/test_stack.py's up, up again, down, down again and up
# again, in make test, run this broker class on the stack's data folder and show the same (the
# second start and stop change nothing; the record read back after a stop and start on the same
# ports; PID and ports gone; the log; the ports found in the data folder).
@pytest.mark.slow
def test_records_survive_stop_and_start(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("kafka")
    server = KafkaServer(data_dir, CACHE_DIR, port=process.free_port())
    topic = "devstack-roundtrip"
    try:
        server.start()
        status = server.status()
        assert status["running"] and status["bootstrap"] == f"127.0.0.1:{server.port}"
        pid, ports = status["pid"], (server.port, server.controller_port)

        _create_topic(server.bootstrap_servers, topic)
        _produce(server.bootstrap_servers, topic)
        _assert_the_record(_consume_all(server.bootstrap_servers, topic, expected=1))

        server.stop()
        assert not server.running()
        assert not server.pid_file.exists()
        _assert_gone(pid, ports)
        # The broker logged through log4j2 into its log file, shutdown included.
        log = server.log_file.read_text()
        assert "Kafka Server started" in log
        assert "shut down completed" in log

        # A fresh object with default arguments finds the same ports and the same data.
        again = KafkaServer(data_dir, CACHE_DIR)
        assert again.bootstrap_servers == server.bootstrap_servers
        assert again.controller_port == server.controller_port
        again.start()
        _assert_the_record(_consume_all(again.bootstrap_servers, topic, expected=1))
        pid = again.status()["pid"]
        again.stop()
        _assert_gone(pid, ports)
    finally:
        server.stop()


@pytest.mark.slow
def test_start_and_stop_are_idempotent(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("kafka")
    server = KafkaServer(data_dir, CACHE_DIR, port=process.free_port())
    try:
        server.start()
        pid = server.status()["pid"]
        server.start()  # already running: nothing new is started
        assert server.status()["pid"] == pid
        assert KafkaServer(data_dir, CACHE_DIR).running()
    finally:
        server.stop()
    server.stop()  # already stopped: no error
    assert not server.running()
    _assert_gone(pid, (server.port, server.controller_port))


def test_install_is_cached_and_has_the_benchmark_tool(monkeypatch, tmp_path):
    kafka_classpath(CACHE_DIR)
    # Installed once, the stamp file short-cuts Maven: it is not even needed any more.
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn (nor anything else) on PATH
    monkeypatch.setattr(kafka_module.subprocess, "run", lambda *a, **kw: pytest.fail(f"ran {a[0]}"))
    classpath = kafka_classpath(CACHE_DIR)
    jars = {Path(p).name for p in classpath.split(":")}
    assert f"kafka_2.13-{KAFKA_VERSION}.jar" in jars
    assert f"kafka-tools-{KAFKA_VERSION}.jar" in jars  # org.apache.kafka.tools.ProducerPerformance
    assert any(name.startswith("log4j-core-") for name in jars)
