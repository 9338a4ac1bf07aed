"""The lag sensor's cursor when a topic is deleted and created again: pure, no Kafka, no Dagster.

Kafka's topic id tells the two logs of one name apart; the cursor keeps it per topic, and a
changed id restarts the topic's partitions from the new log instead of counting on from the
earlier log's offsets (which jumped over the new log's first offsets).
"""

from __future__ import annotations

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs import estate
from matos_dagster.core.runs.policy import Offsets, PartitionState, decide
from matos_dagster.core.topics import TopicConfig

OLD, NEW = "b21cxU9dT0GDsiOk/BPnAA", "KP4OXZckTgCidsZp99pVGg"


def test_a_changed_topic_id_is_a_topic_created_again_and_its_partitions_start_from_the_new_log():
    topic = TopicConfig("orders", group="g", batch_records=100, batch_age_s=3600)
    # The earlier log: 150 archived and committed in each partition, at rest.
    states = {("orders", p): PartitionState(next=150, committed=150) for p in (0, 1)}
    states[("other", 0)] = PartitionState(next=70, committed=70)
    known = estate.TopicIds({"orders": OLD, "other": "x"})
    now = {"orders": NEW, "other": "x"}

    again = estate.created_again(known, now)
    assert again == {"orders": (OLD, NEW)}
    states = estate.restart(states, again)
    assert set(states) == {("other", 0)}, "the earlier log's states are dropped, the other topics' kept"
    # The new log: 100 records in partition 0, the earlier log's offsets gone from the group (None).
    d = decide(topic, 0, states.get(("orders", 0), PartitionState()), Offsets(0, 100, None), None, 0)
    assert d.request == OffsetRange("orders", 0, 0, 100) and d.warning is None
    # Without the restart, the earlier log's `next` (150) hides the new log's first 100 records.
    stale = decide(topic, 0, PartitionState(next=150, committed=150), Offsets(0, 100, None), None, 0)
    assert stale.request is None

    known = estate.seen(known, now, again)
    assert known.ids == {"orders": NEW, "other": "x"} and known.earlier == {"orders"}
    text = estate.write_cursor(states, {}, known)
    back = estate.read_topics(text)
    assert (back.ids, back.earlier) == (known.ids, known.earlier)
    assert estate.read_cursor(text) == states


def test_a_topic_seen_missing_keeps_its_id_so_its_coming_back_is_told_from_a_first_sight():
    known = estate.TopicIds({"orders": OLD})
    gone = {}  # the tick did not find the topic: no id asked
    known = estate.seen(known, gone, estate.created_again(known, gone))
    assert known.ids == {"orders": OLD}
    assert estate.created_again(known, {"orders": NEW}) == {"orders": (OLD, NEW)}


def test_a_first_sight_or_a_broker_without_topic_ids_is_no_creation_again():
    known = estate.TopicIds({"orders": OLD})
    assert estate.created_again(estate.TopicIds(), {"orders": NEW}) == {}
    assert estate.created_again(known, {"orders": None}) == {}
    assert estate.seen(known, {"orders": None}, {}).ids == {"orders": OLD}
    # A cursor written before topic ids were kept reads as none known.
    assert estate.read_topics('{"v":2,"p":{"orders":{"0":150}}}') == estate.TopicIds()


def test_a_new_logs_range_gets_a_run_key_of_its_own_not_the_earlier_logs_which_dagster_would_drop():
    batch = [(OffsetRange("orders", 0, 0, 100), 1)]
    assert estate.batch_key(batch) == estate.batch_key(batch, {})
    assert estate.batch_key(batch, {"orders": NEW}) != estate.batch_key(batch)
    assert estate.batch_key(batch, {"orders": NEW}) == estate.batch_key(batch, {"orders": NEW})
