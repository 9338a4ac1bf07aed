"""The Kafka resource's KafkaUnavailable branches that no other test reaches, on the real broker
or on a port where nothing listens: each says what Kafka said, and ends the wait at once when
waiting cannot help, or after the resource's timeout when it might.

(The refused SASL login and TLS handshake are in test_security.py; a silent broker's
`partitions` and `watermarks` in test_kafka_kept_clients.py and test_bad_input.py.)
"""

from __future__ import annotations

import time
import uuid

import pytest
from matos_dev.stack.process import free_port

from matos_dagster.core.kafka.errors import KafkaUnavailable
from matos_dagster.resources import KafkaResource


def fresh_name() -> str:
    return f"fresh-{uuid.uuid4().hex[:10]}"


def test_a_topic_kafka_cannot_describe_fails_at_once_with_kafkas_reason(kafka):
    # The broker answers, with an error no wait can cure (the name is not a valid topic name):
    # the resource must not retry it until its timeout as it does a leader being elected.
    patient = kafka.model_copy(update={"timeout_s": 20})
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as e:
        patient.partitions("no spaces allowed")
    assert time.monotonic() - t0 < 10, "waited for an error that waiting cannot cure"
    assert str(e.value) == "Kafka could not describe topic 'no spaces allowed': Broker: Invalid topic"


def test_a_topic_whose_partitions_never_get_a_leader_fails_after_the_timeout_naming_the_topic(kafka):
    # A topic deleted while it was being made never gets its leaders: the wait ends at the
    # resource's timeout, saying what it waited for and where to look.
    short = kafka.model_copy(update={"timeout_s": 2})
    name = fresh_name()  # never created
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as e:
        short.wait_for_leaders(name)
    assert 2 <= time.monotonic() - t0 < 10
    assert str(e.value) == (f"Kafka topic {name!r} has no leader for partition(s) ['the topic'] after 2s on "
                            f"{kafka.bootstrap_servers}; check the brokers' logs")


def test_a_topic_kafka_refuses_to_create_fails_with_kafkas_reason(kafka):
    name = fresh_name()
    with pytest.raises(KafkaUnavailable) as e:
        kafka.create_topic(name, 1, {"cleanup.policy": "bogus"})
    assert "Invalid value bogus for configuration cleanup.policy" in str(e.value), str(e.value)
    assert name not in kafka.admin().list_topics(timeout=10).topics


def test_creating_a_topic_where_nothing_listens_fails_as_kafka_unavailable():
    nobody = KafkaResource(bootstrap_servers=f"127.0.0.1:{free_port()}", timeout_s=2)
    with pytest.raises(KafkaUnavailable, match="did not answer within 2s"):
        nobody.create_topic(fresh_name(), 1)


@pytest.mark.parametrize("question", ["committed", "wait_for_leaders"])
def test_questions_where_nothing_listens_fail_after_the_timeout_naming_the_setting(question):
    nobody = KafkaResource(bootstrap_servers=f"127.0.0.1:{free_port()}", timeout_s=2)
    ask = {"committed": lambda: nobody.committed("any", [0]),
           "wait_for_leaders": lambda: nobody.wait_for_leaders("any")}
    t0 = time.monotonic()
    with pytest.raises(KafkaUnavailable) as e:
        ask[question]()
    assert time.monotonic() - t0 < 10
    assert f"Kafka at {nobody.bootstrap_servers} (PLAINTEXT) did not answer within 2s" in str(e.value)
    assert "check MATOS_KAFKA_BOOTSTRAP_SERVERS and that the brokers run" in str(e.value)
