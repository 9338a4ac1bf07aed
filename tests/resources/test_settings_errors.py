"""A wrong MATOS_ setting fails with a clear error that names the setting, and does not hang."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from matos_dev.stack.process import free_port

from matos_dagster.core.kafka.errors import KafkaUnavailable
from matos_dagster.core.swift.store import SwiftError
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource


# "Does not hang" is the test's own timeout, far above the setting's few seconds and far below
# what an unbounded client retry takes (minutes): no wall-clock assertion (timings: make bench).
@pytest.mark.timeout(180)
def test_an_unreachable_kafka_names_the_setting_and_does_not_hang():
    kafka = KafkaResource(bootstrap_servers=f"127.0.0.1:{free_port()}", timeout_s=3)
    with pytest.raises(KafkaUnavailable, match="MATOS_KAFKA_BOOTSTRAP_SERVERS"):
        kafka.partitions("demo")


def test_an_unknown_security_protocol_names_the_setting():
    with pytest.raises(ValueError, match="MATOS_KAFKA_SECURITY_PROTOCOL"):
        KafkaResource(bootstrap_servers="127.0.0.1:1", security_protocol="SASL_PLAIN").client_config()


def test_a_wrong_swift_key_names_the_settings(swift_server):
    swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key="wrong", retries=0)
    with pytest.raises(SwiftError, match="MATOS_SWIFT_USER and MATOS_SWIFT_KEY"):
        swift.store()


def test_an_unreachable_swift_names_the_setting():
    swift = SwiftResource(auth_url=f"http://127.0.0.1:{free_port()}/auth/v1.0", user="u:u", key="k", retries=0,
                          timeout_s=5)
    with pytest.raises(SwiftError, match="MATOS_SWIFT_AUTH_URL"):
        swift.store()


def test_a_bad_tls_switch_and_spark_conf_name_their_settings():
    with pytest.raises(ValueError, match="MATOS_SWIFT_VERIFY_TLS"):
        SwiftResource(auth_url="http://x", verify_tls="maybe").params()
    with pytest.raises(ValueError, match="MATOS_SPARK_CONF"):
        SparkResource(conf="spark.ui.enabled").spark_config()


@pytest.mark.timeout(180)  # the Connect client alone would retry for over 5 minutes
def test_an_unreachable_spark_connect_server_names_the_setting_and_does_not_hang():
    with pytest.raises(ConnectionError, match="MATOS_SPARK_MASTER"):
        SparkResource(master=f"sc://127.0.0.1:{free_port()}").spark_session
    with pytest.raises(ValueError, match="MATOS_SPARK_MASTER"):
        SparkResource(master="sc://:15002").spark_session


def test_the_definitions_refuse_a_broken_topics_file_naming_it(tmp_path):
    bad = tmp_path / "topics.yaml"
    bad.write_text("topics:\n  - name: t\n    format: csv\n")
    p = subprocess.run([sys.executable, "-c", "import matos_dagster.definitions"], capture_output=True, text=True,
                       env={**os.environ, "MATOS_TOPICS_FILE": str(bad)}, timeout=120)
    assert p.returncode != 0 and f"{bad}: topics[0] (t): format must be one of" in p.stderr


def test_secrets_never_show_in_a_resources_repr():
    kafka = KafkaResource(bootstrap_servers="b:1", password="kafka-secret-123")
    swift = SwiftResource(auth_url="http://x", key="swift-secret-456")
    for text in (repr(kafka), str(kafka), repr(swift), str(swift), repr(swift.params())):
        assert "secret-123" not in text and "secret-456" not in text
