"""The lag sensor against a real broker and a real Dagster instance."""

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

from matos_dagster.assets.archive import ranges_partitions
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.policy import VANISHED_AFTER_MS
from matos_dagster.core.topics import TopicConfig
from matos_dagster.sensors.lag import lag_sensor


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Sensor:
    """Ticks of one topic's lag sensor, carrying the cursor from tick to tick like the daemon."""

    def __init__(self, topic: TopicConfig, kafka, instance):
        self.topic, self.kafka, self.instance = topic, kafka, instance
        self.definition = lag_sensor(topic, ranges_partitions(topic), 30)
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
    from matos_dagster.core.offsets.ranges import parse_key

    return [(parse_key(r.partition_key), r.run_key) for r in result.run_requests]


def test_only_partitions_with_new_records_wake_one_range_each_added_as_keys_in_the_same_tick(kafka, instance, new_topic):
    name = new_topic(partitions=3)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 2) for _ in range(150)])
    sensor = Sensor(topic_config(name), kafka, instance)
    result = sensor.tick()
    got = sorted(r for r, _ in requested(result))
    assert got == [OffsetRange(name, 0, 0, 150), OffsetRange(name, 2, 0, 150)]
    (add,) = result.dynamic_partitions_requests
    assert sorted(add.partition_keys) == sorted(r.key for r in got)
    assert all(run_key == r.key for r, run_key in requested(result))


def test_nothing_new_launches_nothing_and_says_why(kafka, instance, new_topic):
    sensor = Sensor(topic_config(new_topic(partitions=2)), kafka, instance)
    result = sensor.tick()
    assert not result.run_requests and isinstance(result.skip_reason, SkipReason)
    assert "p0: no new records" in result.skip_reason.skip_message


def test_below_the_batch_policy_nothing_is_requested(kafka, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 10)
    result = Sensor(topic_config(name), kafka, instance).tick()
    assert not result.run_requests and "below the batch policy" in result.skip_reason.skip_message


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
    for attempt in range(2, 6):
        sensor.finish(run_key, DagsterRunStatus.FAILURE)
        (again, run_key), = requested(sensor.tick())
        assert again == r and run_key == f"{r.key}#{attempt}"
    sensor.finish(run_key, DagsterRunStatus.FAILURE)
    result = sensor.tick()
    assert not result.run_requests and "failed 5 times" in result.skip_reason.skip_message


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
    state = json.loads(sensor.cursor)
    assert state["0"]["key"] == OffsetRange(name, 0, 0, 100).key and state["0"]["done"] is False
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
    state = json.loads(sensor.cursor)
    state[str(partition)]["requested_ms"] -= ms
    sensor.cursor = json.dumps(state)


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
    assert again == first and run_key == f"{first.key}#2"


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
    a tick with runs carries each run's reason as its `matos/reason` tag, and every partition's
    reason, the skipped ones' too, in the tick's log (the ticks table's "View logs")."""
    name = new_topic(partitions=3)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(150)] + [(b"k", b"v", [], 2)] * 5)
    sensor = Sensor(topic_config(name), kafka, instance)
    busy = create_run_for_test(instance, status=DagsterRunStatus.STARTED,
                               tags={"dagster/partition": OffsetRange(name, 0, 0, 150).key})
    capfd.readouterr()
    result = sensor.tick()
    assert result.skip_reason is None
    (request,) = result.run_requests
    assert request.partition_key == OffsetRange(name, 1, 0, 150).key
    assert request.tags["matos/reason"]  # why this range now, on the run itself
    log = capfd.readouterr().err
    assert f"p0: run {busy.run_id} is archiving {name}/0[0, 150); waiting for it" in log
    assert "p2: " in log and "below the batch policy" in log
    assert f"p1: {request.tags['matos/reason']}" in log
