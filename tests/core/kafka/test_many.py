"""Asking Kafka about many partitions at once gives what asking about each one gives."""

import time
import uuid

from confluent_kafka.admin import NewTopic
from helpers import delete_records, produce

from matos_dagster.core.kafka import many


def _topics(kafka, n: int, partitions: int) -> list[str]:
    names = [f"many-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    for name in names:
        kafka.create_topic(name, partitions)
    return names


def test_the_cluster_lists_every_topic_with_its_partitions_and_none_of_its_internal_ones(kafka):
    names = _topics(kafka, 3, 2)
    found = many.topics(kafka)
    assert all(found[n] == [0, 1] for n in names)
    assert not [n for n in found if n.startswith("__")]


def test_log_start_and_end_offsets_of_many_partitions_are_each_partitions_own(kafka):
    a, b = _topics(kafka, 2, 3)
    produce(kafka, a, [(None, b"x", None, p) for p in (0, 0, 0, 1, 2, 2)])
    produce(kafka, b, [(None, b"y", None, 1) for _ in range(5)])
    delete_records(kafka, b, 1, 3)  # a log start past 0, as retention leaves it
    marks = many.watermarks(kafka, [(a, 0), (a, 1), (a, 2), (b, 0), (b, 1), (b, 2)])
    assert marks == {(a, 0): (0, 3), (a, 1): (0, 1), (a, 2): (0, 2), (b, 0): (0, 0), (b, 1): (3, 5), (b, 2): (0, 0)}
    for t in (a, b):
        assert kafka.watermarks(t, [0, 1, 2]) == {p: marks[(t, p)] for p in range(3)}


def test_committed_offsets_of_many_topics_come_from_one_group(kafka):
    a, b = _topics(kafka, 2, 2)
    produce(kafka, a, [(None, b"x", None, 0)] * 4)
    produce(kafka, b, [(None, b"x", None, 1)] * 4)
    group = f"g-{uuid.uuid4().hex[:6]}"
    kafka.commit(a, {0: 4}, group)
    kafka.commit(b, {1: 2}, group)
    assert many.committed(kafka, group, [(a, 0), (a, 1), (b, 0), (b, 1)]) == {
        (a, 0): 4, (a, 1): None, (b, 0): None, (b, 1): 2}


def test_the_first_waiting_records_timestamp_of_each_partition_or_none_where_nothing_is_there(kafka):
    (a,) = _topics(kafka, 1, 3)
    # Stamps of the last minutes: the broker's retention deletes records stamped in 1970 at its next check.
    now = int(time.time() * 1000)
    produce(kafka, a, [(None, b"x", None, 0)], timestamp=now - 3_000)
    produce(kafka, a, [(None, b"x", None, 0)], timestamp=now - 2_000)
    produce(kafka, a, [(None, b"x", None, 1)], timestamp=now - 1_000)
    got = many.first_timestamps(kafka, {(a, 0): 1, (a, 1): 0, (a, 2): 0})
    assert got == {(a, 0): now - 2_000, (a, 1): now - 1_000, (a, 2): None}
