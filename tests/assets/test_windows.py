"""A topic's days as Dagster partitions, on the real Kafka and Swift: a day is materialised when
every partition's archive has passed it, again when a late record of it is archived, never by a
producer clock in the future; an idle partition holds back nothing; the summary that depends on
a day reads it straight from the ranges the day names, and automation runs it when the day
changes."""

import json
import time
import uuid
from types import SimpleNamespace

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    Definitions,
    build_sensor_context,
    evaluate_automation_conditions,
    instance_for_test,
    materialize,
)
from helpers import delete_records, read_kafka

from matos_dagster.assets.windows import summary_asset, windows_asset
from matos_dagster.core.archive.loss import acknowledge
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.days import evaluate, windows
from matos_dagster.core.days.read import read_window
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.jobs.restore import restore_job
from matos_dagster.sensors.days import days_sensor

TODAY = windows.start_of(int(time.time() * 1000), windows.DAY_MS)
D1, D2, D3 = TODAY - 3 * windows.DAY_MS, TODAY - 2 * windows.DAY_MS, TODAY - windows.DAY_MS
H = windows.HOUR_MS


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Days:
    """One topic's days: produce stamped records, archive what is new, evaluate, materialise."""

    def __init__(self, kafka, swift, spark, name: str, **kw):
        self.kafka, self.swift, self.spark, self.name = kafka, swift, spark, name
        self.topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", allowed_lateness_s=0, **kw)
        self.sensor = days_sensor(TopicSet([self.topic]), 30, rest_s=0)  # each tick evaluates the topic
        self.asset, self.summary = windows_asset(self.topic), summary_asset(self.topic)
        self.archived = {}
        self.cursor = None  # the sensor's, from tick to tick as the daemon keeps it

    def produce(self, partition: int, *stamps: int) -> None:
        p, failed = self.kafka.producer(), []
        for ts in stamps:
            p.produce(self.name, key=f"k{ts % 7}".encode(), value=str(ts).encode(), partition=partition, timestamp=ts,
                      on_delivery=lambda err, msg: err and failed.append(err))
        assert p.flush(30) == 0 and not failed, failed

    def archive(self) -> None:
        """What is new in each partition, from its log start (as the lag sensor) the first time."""
        marks = self.kafka.watermarks(self.name, self.kafka.partitions(self.name))
        with self.swift.store() as store:
            for p, (low, high) in marks.items():
                start = self.archived.get(p, low)
                if high > start:
                    archive_range(OffsetRange(self.name, p, start, high), self.topic, self.kafka, store, self.spark)
                    self.archived[p] = high

    def evaluate(self) -> list[tuple[str, str]]:
        """The windows the sensor reports as materialised: (day, data version)."""
        result = self.sensor(build_sensor_context(resources={"kafka": self.kafka, "swift": self.swift},
                                                  cursor=self.cursor))
        self.cursor = result.cursor
        assert not result.run_requests, "the days sensor launches no run"
        return [(e.partition, e.tags["dagster/data_version"]) for e in result.asset_events or []]

    def materialize(self, day: str, instance: DagsterInstance):
        result = materialize([self.asset], partition_key=day, resources={"swift": self.swift}, instance=instance)
        return result.asset_materializations_for_node(self.asset.op.name)[0]


def key(ms: int) -> str:
    return windows.key(ms, windows.DAY_MS)


def test_a_day_is_materialised_once_every_partition_has_passed_it_and_again_when_a_late_record_comes(
        kafka, swift, spark, spark_resource, new_topic, instance):
    # Kafka 4 refuses a record stamped over an hour ahead unless the topic allows it (this one does).
    days = Days(kafka, swift, spark, new_topic(partitions=2, **{"message.timestamp.after.max.ms": str(2**62)}))
    defs = Definitions(assets=[days.asset, days.summary], resources={"swift": swift})
    automation = evaluate_automation_conditions(defs=defs, instance=instance)  # nothing yet: its first tick
    days.produce(0, D1 + H, D1 + 2 * H, D2 + H)
    days.produce(1, D1 + 3 * H)
    days.archive()
    assert days.evaluate() == []  # partition 1 has not passed D1 yet (nor is it idle: it just moved)

    days.produce(1, D2 + 5 * H, 4_102_444_800_000 + 365 * windows.DAY_MS)  # and one stamped 2101: no day moves
    days.archive()
    requested = days.evaluate()
    assert [d for d, _ in requested] == [key(D1)]  # D2 is not passed by partition 0 (D2 + 1 h)
    m = days.materialize(key(D1), instance)
    assert m.metadata["records"].value == 3 and m.metadata["late_records"].value == 0
    rows = {r.data["partition"]: r.data for r in m.metadata["partitions"].value.records}
    assert (rows[0]["records"], rows[0]["first_offset"], rows[0]["last_offset"]) == (2, 0, 1)
    assert (rows[1]["records"], rows[1]["first_offset"], rows[1]["last_offset"]) == (1, 0, 0)
    assert "partition=0/" in rows[0]["ranges"]
    with swift.store() as store:
        state = store.get_json(layout.event_time_state_name(store.params.prefix, days.name))
    assert state["partitions"]["1"][2] == 1  # the record from 2101 is counted, in its day, and moved D2 nowhere
    assert days.evaluate() == []  # nothing new: nothing requested again

    # A record of D1 archived after D1 completed: late, a new data version, a new run for D1.
    days.produce(0, D1 + 20 * H)
    days.archive()
    again = days.evaluate()
    assert [d for d, _ in again] == [key(D1)] and again[0][1] != requested[0][1]
    m2 = days.materialize(key(D1), instance)
    assert m2.metadata["records"].value == 4 and m2.metadata["late_records"].value == 1
    with swift.store() as store:  # what the monitor check shows of the topic's days
        assert evaluate.counts(store, store.params.prefix, days.name) == {
            "late_records": 1, "future_timestamps": 1, "untimed_records": 0, "outside_windows": 0,
            "complete_to_ms": D2}
    version = instance.get_latest_data_version_record(AssetKey(days.topic.windows_asset_name), partition_key=key(D1))
    assert version is not None

    # The summary depends on the day: automation asks for it, and it reads the day's four records.
    automation = evaluate_automation_conditions(defs=defs, instance=instance, cursor=automation.cursor)
    assert automation.get_requested_partitions(days.summary.key) == {key(D1)}
    done = materialize([days.asset, days.summary], partition_key=key(D1), resources={"swift": swift},
                       instance=instance, selection=[days.summary.key])
    summary = done.asset_materializations_for_node(days.summary.op.name)[0]
    assert summary.metadata["records"].value == 4 and summary.metadata["distinct_keys"].value >= 1
    automation = evaluate_automation_conditions(defs=defs, instance=instance, cursor=automation.cursor)
    assert automation.get_requested_partitions(days.summary.key) == set()  # done, until the day changes

    # The day read and restored straight from the offsets its record names: D1's four records only.
    with swift.store() as store:
        day = read_window(store, store.params.prefix, days.name, key(D1))
    assert sorted(day["value"].to_pylist()) == sorted(str(t).encode() for t in (D1 + H, D1 + 2 * H, D1 + 3 * H,
                                                                                 D1 + 20 * H))
    target = new_topic(partitions=2)
    restored = restore_job([days.topic]).execute_in_process(
        run_config={"ops": {"restore_records": {"config": {"topic": days.name, "window": key(D1),
                                                             "target_topic": target}}}},
        resources={"kafka": kafka, "swift": swift, "spark": spark_resource}, instance=instance)
    assert restored.success and restored.output_for_node("restore_records") == 4
    assert sorted(r["value"] for p in (0, 1) for r in read_kafka(kafka, target, p)) == sorted(
        day["value"].to_pylist())


def test_an_idle_partition_holds_back_no_day(kafka, swift, spark, new_topic, instance):
    days = Days(kafka, swift, spark, new_topic(partitions=2), idle_s=0)
    days.produce(0, D1 + H, D3 + H)
    days.produce(1, D1 + 2 * H)
    days.archive()
    days.produce(0, D3 + 2 * H)  # not archived yet: partition 0 is not idle, and has passed D2 only
    # Partition 1 is archived to its log end, which does not move (idle_s: 0): it holds back nothing,
    # and partition 0 has passed D2. D2 holds no record, and is complete all the same.
    requested = days.evaluate()
    assert [d for d, _ in requested] == [key(D1), key(D2)]
    m = days.materialize(key(D2), instance)
    assert m.metadata["records"].value == 0


def test_records_lost_before_they_were_archived_are_reported_on_the_days_they_may_have_held(
        kafka, swift, spark, new_topic, instance):
    days = Days(kafka, swift, spark, new_topic(partitions=1))
    days.produce(0, D1 + H)
    days.archive()
    days.produce(0, D1 + 2 * H, D2 + H)  # offsets 1 and 2: deleted by retention before they are archived
    delete_records(kafka, days.name, 0, 3)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, days.topic.prefix)
        acknowledge(kafka, store, prefix, days.topic, 0, "retention ran before the archive")
    days.archived[0] = 3
    days.produce(0, D3 + H)
    days.archive()
    assert [d for d, _ in days.evaluate()] == [key(D1), key(D2)]
    d1, d2 = days.materialize(key(D1), instance), days.materialize(key(D2), instance)
    # The lost offsets lie between D1's last archived record and D3's first: D1 and D2 may have held them.
    assert [(m.metadata["records"].value, m.metadata["lost_offsets"].value) for m in (d1, d2)] == [(1, 2), (0, 2)]
    assert [r.data["lost"] for r in d2.metadata["partitions"].value.records] == ["[1, 3)"]


def test_a_producer_stamping_two_hours_ahead_across_midnight_has_every_record_in_its_day(
        kafka, swift, spark, new_topic, instance, monkeypatch):
    """Partition 0's producer sends local time as UTC (+2 h, beyond the 1 h margin, at every tick):
    it holds the topic back to the margin, no further, and each of its records is in the day it is
    stamped, also those stamped past midnight while the clock was before it."""
    days = Days(kafka, swift, spark, new_topic(partitions=2))
    minute = 60_000
    clock = SimpleNamespace(ms=D1 + 21 * H + 45 * minute)  # the sensor's now
    days.sensor = days_sensor(TopicSet([days.topic]), 30, rest_s=0, clock=lambda: clock.ms / 1000)
    days.produce(0, D1 + 23 * H + H // 2, D2 + H // 2)  # D1 21:30 and 22:30, stamped +2 h
    days.produce(1, D1 + 21 * H + 40 * minute)
    days.archive()
    assert days.evaluate() == []
    clock.ms = D3 + H + 45 * minute
    days.produce(0, D3 + 3 * H + 40 * minute)  # D3 01:40 +2 h: past the margin again
    days.produce(1, D3 + H + 40 * minute)
    days.archive()
    assert [d for d, _ in days.evaluate()] == [key(D1), key(D2)]
    with swift.store() as store:
        prefix = store.params.prefix
        got = {d: sorted(read_window(store, prefix, days.name, d)["value"].to_pylist()) for d in (key(D1), key(D2))}
        assert evaluate.counts(store, prefix, days.name)["future_timestamps"] == 3
    assert got == {key(D1): sorted(str(t).encode() for t in (D1 + 23 * H + H // 2, D1 + 21 * H + 40 * minute)),
                   key(D2): [str(D2 + H // 2).encode()]}
    assert days.materialize(key(D2), instance).metadata["records"].value == 1


def test_a_first_record_stamped_in_1970_writes_no_window_before_windows_start_and_costs_one_bounded_evaluation(
        kafka, swift, spark, new_topic, monkeypatch):
    """A record stamped 1970-01-01 (a producer without a clock), then normal traffic: the record is
    counted and in no day (windows_start is 2024-01-01), and the first evaluation writes the one day
    complete and the one still open, not a day for every day since 1970."""
    days = Days(kafka, swift, spark, new_topic(partitions=1))
    days.produce(0, 1, D1 + H, D2 + H)
    days.archive()
    real_put, written = Store.put_json, []

    def put(store, name, doc):
        if "/_event_time/" in name and not name.endswith("/_state.json"):
            written.append(name.rpartition("/")[2])
            assert len(written) <= 10, f"the first evaluation writes window after window: {written[:3]}..."
        return real_put(store, name, doc)

    monkeypatch.setattr(Store, "put_json", put)
    assert [d for d, _ in days.evaluate()] == [key(D1)]
    assert sorted(written) == [f"{key(D1)}.json", f"{key(D2)}.json"]  # D1's record, D2 open
    with swift.store() as store:
        assert evaluate.counts(store, store.params.prefix, days.name)["outside_windows"] == 1


def test_a_busy_topics_days_are_evaluated_again_once_its_last_evaluation_is_moved_after_s_old(
        kafka, swift, spark, new_topic):
    """A busy estate's offsets move at every tick: a topic is evaluated again once its last evaluation is
    MATOS_REEVALUATE_S old, not at every tick (each evaluation then reads the ranges of several)."""
    days = Days(kafka, swift, spark, new_topic(partitions=1))
    clock = SimpleNamespace(s=time.time())
    days.sensor = days_sensor(TopicSet([days.topic]), 30, rest_s=3600, moved_after_s=120, clock=lambda: clock.s)
    days.produce(0, D1 + H)
    days.archive()
    assert days.evaluate() == []  # its first evaluation: the partition has not passed D1
    days.produce(0, D2 + H)
    days.archive()
    clock.s += 30
    assert days.evaluate() == []  # moved, but evaluated 30 s ago: held
    clock.s += 90
    assert [d for d, _ in days.evaluate()] == [key(D1)]


def test_a_topic_gone_quiet_is_evaluated_again_once_idle_s_after_its_last_move_then_only_at_rest_s(
        kafka, swift, spark, new_topic):
    """A partition is idle once its log end has not moved for idle_s since an evaluation saw it: the
    evaluation after the last move is followed by one idle_s later, which completes the days, not by
    one rest_s later."""
    days = Days(kafka, swift, spark, new_topic(partitions=1), idle_s=60)
    clock = SimpleNamespace(s=time.time())
    days.sensor = days_sensor(TopicSet([days.topic]), 30, rest_s=3600, moved_after_s=120, clock=lambda: clock.s)
    days.produce(0, D1 + H)
    days.archive()
    assert days.evaluate() == []  # the log end seen for the first time: not idle yet
    clock.s += 30
    assert days.evaluate() == [] and json.loads(days.cursor)[days.name]["at"] == clock.s - 30  # not idle_s yet
    clock.s += 30
    assert [d for d, _ in days.evaluate()] == [key(D1), key(D2), key(D3)]  # idle: every day up to today complete
    clock.s += 120
    days.evaluate()
    assert json.loads(days.cursor)[days.name]["at"] == clock.s - 120  # settled: next at rest_s


def test_a_busy_topic_in_the_middle_of_its_day_is_evaluated_every_rest_s_until_its_day_can_end(
        kafka, swift, spark, new_topic):
    """No window can complete before its end less the future margin (completeness.next_completion_ms):
    until then a busy topic's days are evaluated every rest_s (late records wait that long), not at
    every move, and from then on again once its last evaluation is moved_after_s old."""
    # The sensor's clock is noon whatever the time: Kafka 4 refuses a record stamped over an hour ahead unless allowed.
    days = Days(kafka, swift, spark, new_topic(partitions=1, **{"message.timestamp.after.max.ms": str(2**62)}))
    clock = SimpleNamespace(s=(TODAY + 12 * H) / 1000)
    days.sensor = days_sensor(TopicSet([days.topic]), 30, rest_s=300, moved_after_s=120, clock=lambda: clock.s)

    def moved_and_evaluated(after_s: float) -> bool:
        days.produce(0, int(clock.s * 1000))
        days.archive()
        clock.s += after_s
        days.evaluate()
        return json.loads(days.cursor)[days.name]["at"] == clock.s

    assert moved_and_evaluated(0)  # the first evaluation: today is open
    wake = (TODAY + windows.DAY_MS - days.topic.future_margin_s * 1000) / 1000
    assert json.loads(days.cursor)[days.name]["wake"] == wake
    assert not moved_and_evaluated(130) and moved_and_evaluated(170)  # every rest_s (300 s)
    clock.s = wake
    assert moved_and_evaluated(0) and moved_and_evaluated(130)  # today can end: every moved_after_s (120 s)
