"""Whether a topic's partitions have leaders yet (no Dagster: used by the resource and restore)."""

from __future__ import annotations


def leaderless(topic_metadata, partitions: int = 0) -> list:
    """What still lacks a leader in a topic's metadata: partition numbers, or ["the topic"].

    A broker answers CreateTopics before the leaders are known, and a producer that starts at
    once meets NOT_LEADER_FOR_PARTITION, which fails a transaction instead of waiting.
    `partitions` is how many the topic must have (0: any number, at least one).
    """
    t = topic_metadata
    if t is None or t.error is not None or not t.partitions or len(t.partitions) < partitions:
        return ["the topic"]
    return [p for p, m in sorted(t.partitions.items()) if m.leader < 0 or m.error is not None]
