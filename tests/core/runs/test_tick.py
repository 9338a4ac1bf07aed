"""The lag sensor's decisions of one tick (core/runs/tick.py), as sensors/lag.py and the model test
call them: pure, no Kafka, no Dagster."""

from __future__ import annotations

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs import policy, tick
from matos_dagster.core.runs.policy import FAILED, PartitionState
from matos_dagster.core.topics import TopicConfig

TOPIC = TopicConfig("orders", group="g", batch_records=10, max_range_records=100)
TOPICS = {"orders": TOPIC}


def test_a_partition_a_run_of_another_origin_archives_in_is_left_as_it_was_and_the_others_decided():
    tps = [("orders", 0), ("orders", 1)]
    marks = {tp: (0, 50) for tp in tps}
    t = tick.decide_all(TOPICS, tps, {}, marks, {tp: None for tp in tps}, {}, {},
                        {("orders", 1): "run r1 of the CLI archives here"}, now_ms=0)
    assert t.due == [(OffsetRange("orders", 0, 0, 50), 1)] and t.new == [OffsetRange("orders", 0, 0, 50)]
    assert t.kept[("orders", 1)] == PartitionState() and ("orders", 1) not in t.decisions
    assert "orders/1: run r1 of the CLI archives here" in t.reasons


def test_a_range_refused_as_archived_in_part_is_replanned_below_the_entry_and_a_given_up_one_recorded():
    refused = PartitionState(next=60, key=OffsetRange("orders", 0, 0, 60).key, attempt=1, done=False, run="k")
    tired = PartitionState(next=60, key=OffsetRange("orders", 1, 0, 60).key, attempt=policy.MAX_ATTEMPTS,
                           done=False, run="k")
    tps = [("orders", 0), ("orders", 1)]
    states = {("orders", 0): refused, ("orders", 1): tired}
    runs = {("k", s.key): FAILED for s in states.values()}
    t = tick.decide_all(TOPICS, tps, states, {tp: (0, 60) for tp in tps}, {tp: None for tp in tps}, runs,
                        {("k", refused.key): (35, 60)}, {}, now_ms=0)
    assert t.due == [(OffsetRange("orders", 0, 0, 35), 1)], "the offsets below the archived [35, 60)"
    assert t.new == [OffsetRange("orders", 0, 0, 35)]
    assert list(tick.gave_up(t.kept)) == [("orders", 1)]
    assert any("no longer requested automatically" in w for w in t.warnings)
