"""A broker that has just created a topic answers 'not the leader' for a moment: the product waits it out.

`make run` once failed when its demo loader met NOT_LEADER_FOR_PARTITION right after creating
the demo topic (issue 12.8). These run on the real broker, right after CreateTopics.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import NewTopic
from dagster import DagsterInstance
from helpers import read_kafka

from matos_dagster.core.kafka.errors import KafkaUnavailable
from matos_dagster.jobs.load import load


def fresh_name() -> str:
    return f"fresh-{uuid.uuid4().hex[:10]}"


def test_offsets_are_read_right_after_a_topic_is_created(kafka):
    # Without the retry, ListOffsets right after CreateTopics fails with NOT_LEADER_FOR_PARTITION
    # or an unknown partition on most of these topics.
    for _ in range(5):
        name = fresh_name()
        admin = kafka.admin()
        admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=1)])[name].result(30)
        assert kafka.watermarks(name, [0, 1, 2, 3]) == {p: (0, 0) for p in range(4)}
        assert kafka.partitions(name) == [0, 1, 2, 3]


def test_create_topic_returns_once_every_partition_has_a_leader(kafka):
    name = fresh_name()
    assert kafka.create_topic(name, 4) is True
    topic = kafka.admin().list_topics(name, timeout=10).topics[name]
    assert sorted(topic.partitions) == [0, 1, 2, 3]
    assert all(m.leader >= 0 and m.error is None for m in topic.partitions.values())
    assert kafka.create_topic(name, 4) is False  # exists already: nothing changes
    assert kafka.watermarks(name, [0, 1, 2, 3]) == {p: (0, 0) for p in range(4)}


def test_the_load_job_produces_into_a_topic_it_has_just_created(kafka):
    name = fresh_name()
    with DagsterInstance.ephemeral() as instance:
        result = load.execute_in_process(
            run_config={"ops": {"produce": {"config": {"topic": name, "count": 400, "value_bytes": 8,
                                                       "create_partitions": 4, "partitions": [0, 1, 2, 3]}}}},
            resources={"kafka": kafka}, instance=instance, raise_on_error=False)
    assert result.success, result.failure_data_for_node("produce")
    assert [len(read_kafka(kafka, name, p)) for p in range(4)] == [100, 100, 100, 100]


def test_a_partition_that_never_gets_a_leader_fails_with_a_clear_error_after_the_timeout(kafka):
    # Partition 9 of a 1-partition topic never appears: the wait is bounded and says what it waited for.
    name = fresh_name()
    kafka.create_topic(name, 1)
    short = kafka.model_copy(update={"timeout_s": 2})
    with pytest.raises(KafkaUnavailable, match=r"Kafka at .* did not answer within 2s"):
        short.watermarks(name, [9])
