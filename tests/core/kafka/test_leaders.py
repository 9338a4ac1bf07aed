"""A topic is ready for producers only when every partition it must have has a leader."""

from types import SimpleNamespace as NS

from matos_dagster.core.kafka.leaders import leaderless


def meta(*leaders, error=None):
    return NS(error=error, partitions={p: NS(leader=l, error=None) for p, l in enumerate(leaders)})


def test_a_topic_not_in_the_metadata_or_with_an_error_or_no_partitions_is_not_ready():
    assert leaderless(None) == ["the topic"]
    assert leaderless(meta(1, error="UNKNOWN_TOPIC")) == ["the topic"]
    assert leaderless(meta()) == ["the topic"]


def test_the_partitions_without_a_leader_are_named():
    assert leaderless(meta(1, -1, 2, -1)) == [1, 3]
    assert leaderless(meta(1, 1)) == []


def test_a_topic_with_fewer_partitions_than_it_must_have_is_not_ready():
    assert leaderless(meta(1, 1), partitions=3) == ["the topic"]
    assert leaderless(meta(1, 1, 1), partitions=3) == []
