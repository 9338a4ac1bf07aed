"""Session-wide real services: a Kafka broker, a Swift all-in-one, a local Spark session, and a
Spark Connect server for the tests that use one (started on first use).

Each runs on free ports of 127.0.0.1 with its data in a temporary folder, and is stopped
by PID when the session ends. Downloads (Kafka's jars, Swift's virtual environment) are
cached in the project's `.devstack/cache`, shared with `make run`.
"""

from __future__ import annotations

import itertools
import os
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from matos_dagster.devstack.kafka import KafkaServer
from matos_dagster.devstack.process import free_port
from matos_dagster.devstack.spark import SparkConnectServer
from matos_dagster.devstack.swift import SwiftServer
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource
from matos_dagster.settings import PROJECT_ROOT

CACHE = Path(os.environ.get("MATOS_DEVSTACK_DIR", PROJECT_ROOT / ".devstack")) / "cache"
OUTPUT = PROJECT_ROOT / "test-output"


@pytest.fixture(scope="session")
def kafka_server(tmp_path_factory):
    server = KafkaServer(tmp_path_factory.mktemp("kafka"), CACHE, port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def swift_server(tmp_path_factory):
    server = SwiftServer(tmp_path_factory.mktemp("swift"), CACHE, proxy_port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """What `make run` gives the runs: a long-lived Spark, its tasks tried up to 3 times."""
    server = SparkConnectServer(tmp_path_factory.mktemp("spark-connect"), port=free_port(), master="local[2,3]")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka(kafka_server) -> KafkaResource:
    return KafkaResource(bootstrap_servers=kafka_server.bootstrap_servers, timeout_s=10)


@pytest.fixture
def swift(swift_server) -> SwiftResource:
    """A fresh container for each test, so tests never see each other's archives."""
    return SwiftResource(
        auth_url=swift_server.auth_url,
        user=swift_server.user,
        key=swift_server.key,
        container=f"test-{uuid.uuid4().hex[:10]}",
        prefix="kafka",
        retries=2,
    )


@pytest.fixture(scope="session")
def spark_resource() -> SparkResource:
    # Two cores: two tasks at once, and retries of a failed task like a cluster would.
    resource = SparkResource(master="local[2,3]", conf="spark.sql.shuffle.partitions=2")
    yield resource
    if resource._session is not None:
        resource._session.stop()


@pytest.fixture(scope="session")
def spark(spark_resource):
    return spark_resource.spark_session


_topic_numbers = itertools.count()


@pytest.fixture
def new_topic(kafka):
    """Make a topic with a unique name: new_topic(partitions=1, **topic_config) -> name."""

    def make(partitions: int = 1, **config: str) -> str:
        name = f"t{next(_topic_numbers)}-{uuid.uuid4().hex[:8]}"
        admin = kafka.admin()  # must outlive the future, or the request is cancelled
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)]
        )
        futures[name].result(timeout=30)
        return name

    return make


@pytest.fixture
def output_dir(request) -> Path:
    """A folder under test-output/ named after the test, for screenshots and reports."""
    path = OUTPUT / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path
