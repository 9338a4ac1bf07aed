"""Within `kept_clients` (a run, a sensor tick), the driver's questions to Kafka share clients.

A fresh client per committed() cost the broker 13.6 ms of CPU and the caller 19 ms (a connection,
metadata, the group coordinator); a kept one 0.6 and 0.5 ms. Real Kafka: the questions must still
get the broker's current answers, from several threads at once, after a failure, and the clients
must be closed when the scope ends (a kept client of a stopped broker would retry forever).
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from matos_dev.stack.process import free_port

from matos_dagster.core.kafka.errors import KafkaUnavailable
from matos_dagster.resources.kafka import KafkaResource


def kept(k: KafkaResource) -> dict:
    return dict(k._kept.clients) if k._kept is not None else {}


@pytest.fixture
def k(kafka_server) -> KafkaResource:
    return KafkaResource(bootstrap_servers=kafka_server.bootstrap_servers, timeout_s=10)


@pytest.fixture
def topic(kafka) -> str:
    name = f"kept-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(name, 2)
    return name


def test_questions_in_one_scope_share_one_admin_and_one_consumer_per_group(k, topic):
    with k.kept_clients():
        assert k.partitions(topic) == [0, 1]
        assert k.watermarks(topic, [0, 1]) == {0: (0, 0), 1: (0, 0)}
        assert k.committed(topic, [0], "g1") == {0: None}
        first = kept(k)

        k.commit(topic, {0: 0}, "g1")
        k.commit(topic, {1: 0}, "g2")
        assert k.committed(topic, [0, 1], "g1") == {0: 0, 1: None}
        assert k.committed(topic, [0, 1], "g2") == {0: None, 1: 0}

        clients = kept(k)
        assert set(clients) == {("admin",), ("consumer", k.group), ("consumer", "g1"), ("consumer", "g2")}
        assert all(clients[key] is c for key, c in first.items())  # the same clients, not new ones
    assert kept(k) == {}  # closed with the scope


def test_outside_a_scope_each_question_makes_and_closes_its_own_client(k, topic):
    assert k.committed(topic, [0], "g") == {0: None}
    assert k.partitions(topic) == [0, 1]
    assert kept(k) == {}


def test_scopes_nest_and_the_outer_one_closes(k, topic):
    with k.kept_clients():
        k.watermarks(topic, [0])
        with k.kept_clients():
            k.committed(topic, [0], "g")
        assert set(kept(k)) == {("consumer", k.group), ("consumer", "g")}  # still kept
    assert kept(k) == {}


def test_a_kept_consumer_answers_what_another_client_committed_since(kafka, k, topic):
    # committed() asks the coordinator every time: nothing is cached on our side.
    with k.kept_clients():
        assert k.committed(topic, [0], "g") == {0: None}
        kafka.commit(topic, {0: 0}, "g")  # another resource, its own client
        assert k.committed(topic, [0], "g") == {0: 0}


def test_threads_asking_at_once_each_get_their_own_answer(k, topic):
    groups = [f"t{i}" for i in range(4)]

    def ask(group: str) -> list:
        answers = []
        for _ in range(10):
            k.commit(topic, {0: 0}, group)
            answers.append(k.committed(topic, [0, 1], group))
            answers.append(k.watermarks(topic, [0]))
        return answers

    with k.kept_clients(), ThreadPoolExecutor(len(groups)) as pool:
        results = list(pool.map(ask, groups))
    for answers in results:
        assert answers[0::2] == [{0: 0, 1: None}] * 10
        assert answers[1::2] == [{0: (0, 0)}] * 10


def test_in_a_scope_a_question_that_fails_drops_its_client():
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    k = KafkaResource(bootstrap_servers=nobody, timeout_s=1)
    with k.kept_clients():
        with pytest.raises(KafkaUnavailable, match="did not answer"):
            k.partitions("any")
        with pytest.raises(KafkaUnavailable):
            k.watermarks("any", [0])
        assert kept(k) == {}  # the next question starts with a fresh client


def test_released_clients_are_closed_and_the_next_question_in_the_scope_makes_new_ones(k, topic):
    # archive_range releases them before its Spark job: an idle client of a broker that went
    # away would retry its connection every 12 ms, a log line each, for as long as the job runs.
    with k.kept_clients():
        k.commit(topic, {0: 0}, "g")
        before = kept(k)[("consumer", "g")]
        k.release_clients()
        assert kept(k) == {}
        assert k.committed(topic, [0], "g") == {0: 0}
        assert kept(k)[("consumer", "g")] is not before
    assert kept(k) == {}
