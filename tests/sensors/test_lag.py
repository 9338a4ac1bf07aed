"""The lag sensor against a real broker and a real Dagster instance.

One sensor watches every topic of the topics file; the ranges a tick finds due are requested
as one run of `archive_ranges` (its run config lists them), and added as partition keys of
their topics' assets in the same tick.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka.admin import NewPartitions
from dagster import DagsterRunStatus, SkipReason, build_sensor_context, instance_for_test
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG
from dagster._core.test_utils import create_run_for_test
from helpers import produce

from matos_dagster.core.offsets.ranges import OffsetRange, parse_key
from matos_dagster.core.runs.policy import VANISHED_AFTER_MS
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.sensors import lag as lag_module
from matos_dagster.sensors.lag import BUSY_INTERVAL_S, lag_sensor
from matos_dagster.turns import BATCH_OP


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Sensor:
    """Ticks of the lag sensor watching `topic` (and `more`), carrying the cursor from tick to tick like the daemon."""

    def __init__(self, topic: TopicConfig, kafka, instance, *more: TopicConfig):
        self.topic, self.kafka, self.instance = topic, kafka, instance
        self.definition = lag_sensor(TopicSet([topic, *more]), 30)
        self.cursor: str | None = None

    def tick(self):
        context = build_sensor_context(
            instance=self.instance, cursor=self.cursor, sensor_name=self.definition.name,
            resources={"kafka": self.kafka},
        )
        result = self.definition(context)
        self.cursor = result.cursor
        return result

    def finish(self, run_key: str, status: DagsterRunStatus, commit_to: int | None = None, partition: int = 0):
        """What the daemon and an archive run would have done for a requested run."""
        create_run_for_test(self.instance, status=status,
                            tags={RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: self.definition.name})
        if commit_to is not None:
            self.kafka.commit(self.topic.name, {partition: commit_to}, self.topic.group)


def topic_config(name: str, **kw) -> TopicConfig:
    return TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", **{"batch_records": 100, "batch_age_s": 3600, **kw})


def requested(result) -> list[tuple[OffsetRange, str]]:
    """Each range the tick requested, with the run key of the run that carries it."""
    return [(parse_key(key), r.run_key) for r in result.run_requests
            for key in r.run_config["ops"][BATCH_OP]["config"]["ranges"]]


def states(cursor: str) -> dict:
    doc = json.loads(cursor)
    assert doc["v"] == 2
    return doc["p"]


def test_only_partitions_with_new_records_wake_one_range_each_added_as_keys_in_the_same_tick(kafka, instance, new_topic):
    name = new_topic(partitions=3)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 2) for _ in range(150)])
    sensor = Sensor(topic_config(name), kafka, instance)
    result = sensor.tick()
    got = sorted(r for r, _ in requested(result))
    assert got == [OffsetRange(name, 0, 0, 150), OffsetRange(name, 2, 0, 150)]
    (add,) = result.dynamic_partitions_requests
    assert add.partitions_def_name == f"archive_{name.replace('-', '_')}_ranges"
    assert sorted(add.partition_keys) == sorted(r.key for r in got)
    assert len(result.run_requests) == 1, "the ranges due in a tick go in one run"


def test_the_ranges_due_in_many_topics_go_in_one_run_and_each_topics_keys_to_its_own_asset(
        kafka, instance, new_topic):
    names = [new_topic(partitions=2) for _ in range(4)]
    for name in names:
        produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(120)])
    sensor = Sensor(topic_config(names[0]), kafka, instance, *[topic_config(n) for n in names[1:]])
    result = sensor.tick()
    (run,) = result.run_requests
    assert sorted(r for r, _ in requested(result)) == sorted(OffsetRange(n, p, 0, 120) for n in names for p in (0, 1))
    assert {a.partitions_def_name: len(a.partition_keys) for a in result.dynamic_partitions_requests} == {
        f"archive_{n.replace('-', '_')}_ranges": 2 for n in names}
    assert run.tags["matos/batch"] == "true" and run.tags["matos/ranges"] == "8"


def test_a_tick_evaluated_twice_asks_for_the_same_run(kafka, instance, new_topic):
    """The daemon may evaluate a tick again after a crash: Dagster drops a run key it has seen."""
    name = new_topic(partitions=2)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(150)])
    first, again = Sensor(topic_config(name), kafka, instance), None
    again = Sensor(first.topic, kafka, instance)
    assert [r.run_key for r in first.tick().run_requests] == [r.run_key for r in again.tick().run_requests]


def test_more_ranges_than_a_run_carries_go_in_several_runs(kafka, instance, new_topic, monkeypatch):
    monkeypatch.setenv("MATOS_RUN_MAX_RANGES", "2")
    name = new_topic(partitions=5)
    produce(kafka, name, [(b"k", b"v", [], p) for p in range(5) for _ in range(100)])
    result = Sensor(topic_config(name), kafka, instance).tick()
    assert [len(r.run_config["ops"][BATCH_OP]["config"]["ranges"]) for r in result.run_requests] == [2, 2, 1]


def test_nothing_new_launches_nothing_and_says_why(kafka, instance, new_topic):
    sensor = Sensor(topic_config(new_topic(partitions=2)), kafka, instance)
    result = sensor.tick()
    assert not result.run_requests and isinstance(result.skip_reason, SkipReason)
    assert "2 partition(s); 0 range(s) requested" in result.skip_reason.skip_message


def test_below_the_batch_policy_nothing_is_requested(kafka, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 10)
    result = Sensor(topic_config(name), kafka, instance).tick()
    assert not result.run_requests and "0 range(s) requested" in result.skip_reason.skip_message


def test_a_backlog_is_cut_into_ranges_archived_one_after_the_other(kafka, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 250)
    sensor = Sensor(topic_config(name, max_range_records=100), kafka, instance)
    (first, key1), = requested(sensor.tick())
    assert (first.start, first.end) == (0, 100)
    assert not sensor.tick().run_requests, "one range in flight per partition"
    sensor.finish(key1, DagsterRunStatus.SUCCESS, commit_to=100)
    (second, _), = requested(sensor.tick())
    assert (second.start, second.end) == (100, 200)


def test_records_left_after_a_range_are_requested_once_old_enough(kafka, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 150)
    sensor = Sensor(topic_config(name, max_range_records=100, batch_age_s=1), kafka, instance)
    (first, key1), = requested(sensor.tick())
    time.sleep(1.5)  # the 50 records after it are now older than the batch age
    sensor.finish(key1, DagsterRunStatus.SUCCESS, commit_to=100)
    # The same tick that sees the range succeed reads their age, and they are not left waiting.
    (rest, _), = requested(sensor.tick())
    assert (rest.start, rest.end) == (100, 150)


def test_a_failed_range_is_requested_again_not_skipped_until_a_bound(kafka, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 120)
    sensor = Sensor(topic_config(name), kafka, instance)
    (r, run_key), = requested(sensor.tick())
    seen = {run_key}
    for attempt in range(2, 6):
        sensor.finish(run_key, DagsterRunStatus.FAILURE)
        (again, run_key), = requested(sensor.tick())
        assert again == r and run_key not in seen
        seen.add(run_key)
    sensor.finish(run_key, DagsterRunStatus.FAILURE)
    result = sensor.tick()
    assert not result.run_requests and "failed 5 times" in result.skip_reason.skip_message


def test_a_range_a_failed_run_archived_is_done_and_the_runs_other_ranges_are_requested_again(
        kafka, instance, new_topic):
    """A batch run fails when one of its ranges could not be archived; the others it reported."""
    from dagster import AssetMaterialization
    from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData

    name = new_topic(partitions=2)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(150)])
    sensor = Sensor(topic_config(name), kafka, instance)
    got = requested(sensor.tick())
    (_, run_key), _ = got
    run = create_run_for_test(instance, status=DagsterRunStatus.FAILURE,
                              tags={RUN_KEY_TAG: run_key, SENSOR_NAME_TAG: sensor.definition.name})
    archived = OffsetRange(name, 0, 0, 150)
    instance.report_dagster_event(DagsterEvent(
        DagsterEventType.ASSET_MATERIALIZATION.value, job_name=run.job_name,
        event_specific_data=StepMaterializationData(
            AssetMaterialization(sensor.topic.asset_name, partition=archived.key))), run_id=run.run_id)
    sensor.kafka.commit(name, {0: 150}, sensor.topic.group)
    (again, _), = requested(sensor.tick())
    assert again == OffsetRange(name, 1, 0, 150)


def test_partitions_added_to_the_topic_are_picked_up(kafka, instance, new_topic):
    name = new_topic(partitions=1)
    sensor = Sensor(topic_config(name), kafka, instance)
    assert not sensor.tick().run_requests
    admin = kafka.admin()
    admin.create_partitions([NewPartitions(name, 2)])[name].result(30)
    produce(kafka, name, [(b"k", b"v", [], 1)] * 100)
    (r, _), = requested(sensor.tick())
    assert (r.partition, r.start, r.end) == (1, 0, 100)


def test_the_cursor_round_trips_and_stays_small(kafka, instance, new_topic):
    name = new_topic(partitions=2)
    produce(kafka, name, [(b"k", b"v", [], 0)] * 100)
    sensor = Sensor(topic_config(name), kafka, instance)
    sensor.tick()
    state = states(sensor.cursor)[name]
    assert state["0"]["key"] == OffsetRange(name, 0, 0, 100).key and state["0"]["done"] is False
    assert state["1"] is None or isinstance(state["1"], int), "a partition at rest is a number at most"
    assert len(sensor.cursor) < 500
    # A new sensor object given the cursor (as after a daemon restart) knows the range is in flight.
    again = Sensor(sensor.topic, kafka, instance)
    again.cursor = sensor.cursor
    assert "in flight" in again.tick().skip_reason.skip_message


def test_an_offset_moved_by_someone_else_is_noticed(kafka, instance, new_topic, capfd):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 100)
    sensor = Sensor(topic_config(name), kafka, instance)
    (r, key), = requested(sensor.tick())
    sensor.finish(key, DagsterRunStatus.SUCCESS, commit_to=100)
    sensor.tick()
    kafka.commit(name, {0: 30}, sensor.topic.group)
    produce(kafka, name, [(b"k", b"v", [])] * 100)
    capfd.readouterr()
    (r2, _), = requested(sensor.tick())
    assert "moved from 100 to 30 by someone else" in capfd.readouterr().err  # the tick's log
    assert r2.start == 100


def age_request(sensor: Sensor, partition: int = 0, ms: int = VANISHED_AFTER_MS) -> None:
    """Make the cursor's last request `ms` older, as if that much time had passed since."""
    doc = json.loads(sensor.cursor)
    doc["p"][sensor.topic.name][str(partition)]["requested_ms"] -= ms
    sensor.cursor = json.dumps(doc)


def test_a_range_whose_run_was_deleted_by_run_retention_does_not_stall_its_partition(kafka, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 100)
    sensor = Sensor(topic_config(name), kafka, instance)
    (first, key1), = requested(sensor.tick())
    assert "in flight" in sensor.tick().skip_reason.skip_message, "the daemon has not created the run yet"
    sensor.finish(key1, DagsterRunStatus.SUCCESS, commit_to=100)
    for run in instance.get_runs():
        instance.delete_run(run.run_id)  # what run retention does to old runs
    produce(kafka, name, [(b"k", b"v", [])] * 100)
    age_request(sensor)
    (second, _), = requested(sensor.tick())
    assert (second.start, second.end) == (100, 200)


def test_a_range_whose_run_vanished_before_its_commit_is_requested_again(kafka, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 100)
    sensor = Sensor(topic_config(name), kafka, instance)
    (first, key1), = requested(sensor.tick())
    age_request(sensor)  # no run was ever created for it, and nothing was committed
    (again, run_key), = requested(sensor.tick())
    assert again == first and run_key != key1


def test_a_partition_another_run_is_archiving_gets_no_request_until_that_run_ends(kafka, instance, new_topic):
    """One run per range whatever starts it: a CLI or UI run archiving in a partition holds the sensor back there."""
    name = new_topic(partitions=2)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(150)])
    sensor = Sensor(topic_config(name), kafka, instance)
    cli_range = OffsetRange(name, 0, 0, 150)
    run = create_run_for_test(instance, status=DagsterRunStatus.STARTED, tags={"dagster/partition": cli_range.key})
    result = sensor.tick()
    assert [r for r, _ in requested(result)] == [OffsetRange(name, 1, 0, 150)]  # partition 1 is free
    instance.report_run_canceled(run)  # the CLI run ends (here without archiving anything)
    result = sensor.tick()
    assert [r for r, _ in requested(result)] == [cli_range]


def test_a_tick_that_requests_runs_shows_why_it_skipped_the_other_partitions(kafka, instance, new_topic, capfd):
    """Dagster shows a skip reason only for a tick that requests nothing (SensorResult refuses both):
    a tick with runs says each partition's reason, the skipped ones' too, in the tick's log (the
    ticks table's "View logs")."""
    name = new_topic(partitions=3)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(150)] + [(b"k", b"v", [], 2)] * 5)
    sensor = Sensor(topic_config(name), kafka, instance)
    busy = create_run_for_test(instance, status=DagsterRunStatus.STARTED,
                               tags={"dagster/partition": OffsetRange(name, 0, 0, 150).key})
    capfd.readouterr()
    result = sensor.tick()
    assert result.skip_reason is None
    assert [r for r, _ in requested(result)] == [OffsetRange(name, 1, 0, 150)]
    log = capfd.readouterr().err
    assert f"{name}/0: run {busy.run_id} is archiving {name}/0[0, 150); waiting for it" in log
    assert f"{name}/1: 150 records waiting" in log


def test_a_batch_run_launched_by_hand_holds_the_sensor_back_in_its_partitions(kafka, instance, new_topic):
    from matos_dagster.jobs.archive_ranges import ranges_config
    from matos_dagster.turns import BATCH_TAG

    name = new_topic(partitions=2)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(150)])
    sensor = Sensor(topic_config(name), kafka, instance)
    create_run_for_test(instance, status=DagsterRunStatus.STARTED, tags={BATCH_TAG: "true"},
                        run_config=ranges_config([OffsetRange(name, 1, 0, 150)]))
    assert [r for r, _ in requested(sensor.tick())] == [OffsetRange(name, 0, 0, 150)]


def test_the_projects_sensor_asks_kafka_every_30_s_and_at_the_first_10_s_tick_after_a_run_of_its_ranges_ended(
        kafka, instance, new_topic, monkeypatch):
    """A run's end is followed by the next range within a tick (BUSY_INTERVAL_S, 10 s), not up to a
    whole interval later; the ticks between cost a query of the runs in flight, or nothing at rest."""
    name = new_topic()
    cfg, now = topic_config(name), [1000.0]
    sensor = Sensor(cfg, kafka, instance)
    sensor.definition = lag_sensor(TopicSet([cfg]), 30, busy_interval_s=BUSY_INTERVAL_S, clock=lambda: now[0])
    assert sensor.definition.minimum_interval_seconds == BUSY_INTERVAL_S == 10
    looks, watermarks = [], lag_module.many.watermarks

    def looked(*args):  # the tick's request to Kafka for every partition's offsets
        looks.append(now[0])
        return watermarks(*args)

    monkeypatch.setattr(lag_module.many, "watermarks", looked)

    def tick():
        now[0] += 10
        context = build_sensor_context(instance=instance, cursor=sensor.cursor, sensor_name=sensor.definition.name,
                                       resources={"kafka": kafka})
        result = sensor.definition(context)
        if not isinstance(result, SkipReason):  # a tick that did not look leaves the cursor as it was
            sensor.cursor = result.cursor
        return result

    tick()  # 1010: nothing to archive
    produce(kafka, name, [(b"k", b"v", [])] * 100)
    assert all("at rest" in tick().skip_message for _ in range(2))  # 1020, 1030: the records wait
    (first, key), = requested(tick())  # 1040: 30 s after the last look
    sensor.finish(key, DagsterRunStatus.STARTED)
    assert "1 range(s) in flight, no run of them ended" in tick().skip_message  # 1050
    sensor.finish(key, DagsterRunStatus.SUCCESS, commit_to=100)
    produce(kafka, name, [(b"k", b"v", [])] * 100)
    (second, key), = requested(tick())  # 1060: the run ended
    sensor.finish(key, DagsterRunStatus.STARTED)
    assert "in flight" in tick().skip_message and "in flight" in tick().skip_message  # 1070, 1080
    assert not tick().run_requests  # 1090: 30 s after the last look, asked, its range still in flight
    assert [(first.start, first.end), (second.start, second.end)] == [(0, 100), (100, 200)]
    assert looks == [1010.0, 1040.0, 1060.0, 1090.0]
