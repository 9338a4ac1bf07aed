"""Dead archive runs (no heartbeat for MATOS_DEAD_RUN_AFTER_S) on a real Dagster instance: failed by
the lag sensor, their range requested again in the same tick, and their turn passed on."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from dagster import DagsterEventType, DagsterRunStatus, build_sensor_context, instance_for_test
from dagster._core.storage.tags import PARTITION_NAME_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG
from dagster._core.test_utils import create_run_for_test
from helpers import produce

from matos_dagster.assets.archive import CLAIM_TAG, TOPIC_PARTITION_TAG, take_turn
from matos_dagster.core.offsets.ranges import OffsetRange, parse_key
from matos_dagster.core.runs.heartbeat import TAG, Thresholds
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dead_runs import fail_dead_runs
from matos_dagster.sensors.lag import lag_sensor
from matos_dagster.turns import BATCH_OP, BATCH_TAG, TURN_TAG

T = Thresholds(every_s=15, dead_after_s=90)


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Log:
    def __init__(self):
        self.warnings: list[str] = []

    def warning(self, msg: str) -> None:
        self.warnings.append(msg)


def started_run(instance, key: str, beat_age_s: float | None, **tags):
    if beat_age_s is not None:
        tags[TAG] = f"{time.time() - beat_age_s:.3f}"
    return create_run_for_test(instance, status=DagsterRunStatus.STARTED, tags={PARTITION_NAME_TAG: key, **tags})


def status(instance, run) -> DagsterRunStatus:
    return instance.get_run_by_id(run.run_id).status


def test_only_started_runs_of_the_topic_that_stopped_beating_are_failed_saying_why(instance):
    key = OffsetRange("orders", 0, 0, 100).key
    dead = started_run(instance, key, beat_age_s=200)
    slow = started_run(instance, key, beat_age_s=10)  # a long Spark job: beating, however slow the work
    never = started_run(instance, key, beat_age_s=None)  # not at its first beat yet: not judged by beats
    other_topic = started_run(instance, OffsetRange("payments", 0, 0, 100).key, beat_age_s=200)
    log = Log()

    assert fail_dead_runs(instance, "orders", T, log) == [dead.run_id]

    assert status(instance, dead) == DagsterRunStatus.FAILURE
    assert {status(instance, r) for r in (slow, never, other_topic)} == {DagsterRunStatus.STARTED}
    (warning,) = log.warnings
    assert dead.run_id in warning and "MATOS_DEAD_RUN_AFTER_S" in warning
    failure = instance.all_logs(dead.run_id, of_type=DagsterEventType.RUN_FAILURE)
    assert failure and "has not written its heartbeat" in failure[-1].message
    # A second pass finds nothing more to fail (the dead run is no longer STARTED).
    assert fail_dead_runs(instance, "orders", T, Log()) == []


class Lag:
    """A lag sensor of a fresh topic with 120 records (batches of 100), ticked on a real instance."""

    def __init__(self, kafka, instance, name: str):
        self.kafka, self.instance = kafka, instance
        produce(kafka, name, [(b"k", b"v", [])] * 120)
        topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", batch_records=100, batch_age_s=3600)
        self.sensor = lag_sensor(TopicSet([topic]), 30)
        self.cursor = None

    def tick(self):
        """One evaluation, as the daemon's: the cursor carried from the last."""
        result = self.sensor(build_sensor_context(instance=self.instance, cursor=self.cursor,
                                                  sensor_name=self.sensor.name, resources={"kafka": self.kafka}))
        self.cursor = result.cursor
        return result

    def launched(self, request, beat_age_s: float):
        """The batch run the daemon launched for `request`, STARTED, its last beat `beat_age_s` ago."""
        tags = {RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: self.sensor.name, BATCH_TAG: "true",
                TAG: f"{time.time() - beat_age_s:.3f}"}
        return create_run_for_test(self.instance, status=DagsterRunStatus.STARTED, tags=tags,
                                   run_config=request.run_config)


def ranges(request) -> list[OffsetRange]:
    return [parse_key(k) for k in request.run_config["ops"][BATCH_OP]["config"]["ranges"]]


@pytest.fixture
def lag(kafka, instance, new_topic, monkeypatch):
    monkeypatch.setenv("MATOS_HEARTBEAT_S", "15")
    monkeypatch.setenv("MATOS_DEAD_RUN_AFTER_S", "90")
    return Lag(kafka, instance, new_topic())


def test_the_lag_sensor_fails_a_run_that_stopped_beating_and_requests_its_range_again_in_the_same_tick(
        lag, instance):
    (request,) = lag.tick().run_requests
    run = lag.launched(request, beat_age_s=100)  # it beat, then its process (and its code server) died

    result = lag.tick()

    assert status(instance, run) == DagsterRunStatus.FAILURE
    (again,) = result.run_requests
    assert ranges(again) == ranges(request) and again.run_key != request.run_key


def test_a_live_run_that_beats_stays_in_flight_however_long_it_runs(lag, instance):
    (request,) = lag.tick().run_requests
    run = lag.launched(request, beat_age_s=5)  # started long ago (an hour of Spark), still beating

    result = lag.tick()

    assert status(instance, run) == DagsterRunStatus.STARTED
    assert not result.run_requests and "is in flight" in result.skip_reason.skip_message


def _claiming_run(instance, r: OffsetRange, beat_age_s: float):
    where = f"{r.topic}/{r.partition}"
    return started_run(instance, r.key, beat_age_s, **{TOPIC_PARTITION_TAG: where, CLAIM_TAG: f"{time.time() - 300:.6f}",
                                                          TURN_TAG: "1"})


@pytest.mark.timeout(300)  # without the rule, take_turn would wait for the dead run for an hour
def test_a_run_waiting_for_its_turn_does_not_wait_for_a_dead_run_but_waits_for_a_live_one(instance):
    r = OffsetRange("orders", 3, 0, 100)
    _claiming_run(instance, r, beat_age_s=200)  # dead: claimed first, then stopped beating
    me = create_run_for_test(instance, status=DagsterRunStatus.STARTED)
    told: list[str] = []
    take_turn(instance, me.run_id, r, say=told.append, poll_s=0.05, thresholds=T)
    assert told == [], "the waiting run waited for a dead run"
    instance.report_run_failed(instance.get_run_by_id(me.run_id), "ended by the test")  # its turn is over

    live = _claiming_run(instance, r, beat_age_s=5)
    other = create_run_for_test(instance, status=DagsterRunStatus.STARTED)
    told.clear()
    done = threading.Event()
    waiter = threading.Thread(
        target=lambda: (take_turn(instance, other.run_id, r, say=told.append, poll_s=0.05, thresholds=T), done.set()))
    waiter.start()
    try:
        deadline = time.monotonic() + 60
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
        assert told and live.run_id in told[0], "the waiting run did not wait for a live run ahead of it"
        assert not done.is_set()
    finally:
        instance.report_run_failed(instance.get_run_by_id(live.run_id), "ended by the test")
        waiter.join(60)
    assert done.is_set(), "the waiting run did not take its turn once the live run ended"
