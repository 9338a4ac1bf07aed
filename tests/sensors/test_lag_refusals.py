"""The lag sensor after a refusal, on the real stack: a range of the sensor's refused because an
operator archived offsets of it by hand is planned anew from the archive, not requested again until
given up; and a partition given up on is reported by the monitor, with the command that goes on."""

from __future__ import annotations

import uuid

import pytest
from dagster import DagsterRunStatus, Definitions, build_sensor_context, instance_for_test
from dagster._core.test_utils import create_run_for_test
from helpers import check_archive, produce

from matos_dagster.assets.monitor import evaluate
from matos_dagster.core.offsets.ranges import OffsetRange, parse_key
from matos_dagster.core.runs.policy import MAX_ATTEMPTS
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dagster_compat import RUN_KEY_TAG, SENSOR_NAME_TAG
from matos_dagster.jobs.archive_ranges import JOB, archive_ranges_job, ranges_config
from matos_dagster.resources import SparkResource
from matos_dagster.sensors import stopped
from matos_dagster.sensors.lag import lag_sensor
from matos_dagster.turns import BATCH_OP


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Daemon:
    """What the Dagster daemon does with the lag sensor: ticks carrying the cursor, keys added, and each
    requested run executed (here, in this process, with the run key and sensor tags the daemon gives)."""

    def __init__(self, topic: TopicConfig, kafka, swift, spark_url: str, instance):
        self.topic, self.kafka, self.instance = topic, kafka, instance
        self.sensor = lag_sensor(TopicSet([topic]), 30)
        self.job = Definitions(jobs=[archive_ranges_job(TopicSet([topic]))], resources={
            "kafka": kafka, "swift": swift, "spark": SparkResource(master=spark_url)}).resolve_job_def(JOB)
        self.cursor: str | None = None

    def tick(self) -> list:
        """The tick's run requests, their keys added to the topic's asset as the daemon does first."""
        result = self.sensor(build_sensor_context(instance=self.instance, cursor=self.cursor,
                                                  sensor_name=self.sensor.name, resources={"kafka": self.kafka}))
        self.cursor = result.cursor
        for add in result.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
        self.said = getattr(result.skip_reason, "skip_message", "") if result.skip_reason else ""
        return result.run_requests

    def run(self, request) -> bool:
        return self.job.execute_in_process(run_config=request.run_config, instance=self.instance, raise_on_error=False,
                                           tags={RUN_KEY_TAG: request.run_key,
                                                 SENSOR_NAME_TAG: self.sensor.name}).success


def ranges(request) -> list[OffsetRange]:
    return sorted(parse_key(k) for k in request.run_config["ops"][BATCH_OP]["config"]["ranges"])


def test_a_range_the_operator_archived_with_another_cut_while_the_sensors_was_queued_is_planned_anew_not_repeated(
        kafka, swift, connect_server, instance, new_topic):
    name = new_topic(partitions=2)
    produce(kafka, name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(150)])
    topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", batch_records=10, batch_age_s=3600)
    daemon = Daemon(topic, kafka, swift, connect_server.url, instance)
    (queued,) = daemon.tick()
    assert ranges(queued) == [OffsetRange(name, p, 0, 150) for p in (0, 1)]
    # Meanwhile an operator archives by hand (an archive_ranges run of keys added by hand), cut
    # otherwise: partition 0 from its start (committed to 100), partition 1 above it (nothing
    # committed: [0, 50) is not archived).
    by_hand = [OffsetRange(name, 0, 0, 100), OffsetRange(name, 1, 50, 150)]
    instance.add_dynamic_partitions(topic.partitions_name, [r.key for r in by_hand])
    assert daemon.job.execute_in_process(run_config=ranges_config(by_hand), instance=instance).success
    assert not daemon.run(queued), "both of the sensor's ranges overlap the operator's: refused"

    (replanned,) = daemon.tick()
    assert ranges(replanned) == [OffsetRange(name, 0, 100, 150), OffsetRange(name, 1, 0, 50)]
    assert daemon.run(replanned)  # partition 1 committed to 150 now, through the operator's range
    assert not daemon.tick() and "failed" not in daemon.said
    with swift.store() as store:
        assert check_archive(kafka, store, name, topic.group) == {0: 150, 1: 150}  # each offset in one manifest
    assert not stopped.read(instance, daemon.sensor.name)


def test_a_partition_the_sensor_gave_up_on_is_a_monitor_warning_naming_it_and_the_command_that_goes_on(
        kafka, swift, instance, new_topic):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 120)
    topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", batch_records=100, batch_age_s=3600)
    sensor = lag_sensor(TopicSet([topic]), 30)
    cursor = None
    for attempt in range(MAX_ATTEMPTS + 1):
        result = sensor(build_sensor_context(instance=instance, cursor=cursor, sensor_name=sensor.name,
                                             resources={"kafka": kafka}))
        cursor = result.cursor
        for request in result.run_requests:  # its runs fail: a cause no retry cures
            create_run_for_test(instance, status=DagsterRunStatus.FAILURE,
                                tags={RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: sensor.name})
    assert not result.run_requests and f"failed {MAX_ATTEMPTS} times" in result.skip_reason.skip_message
    key = OffsetRange(name, 0, 0, 120).key

    (e,) = evaluate(instance, kafka, swift, [topic]).evaluations
    assert e.severity.value == "WARN" and not e.passed
    assert f"p0: the lag sensor stopped: {name}/0: range {key} failed {MAX_ATTEMPTS} times" in e.description
    assert e.description.endswith(f"-m matos_dagster archive {key}")

    # The command, run: the range archived and committed by hand; the sensor goes on, the warning goes.
    kafka.commit(name, {0: 120}, topic.group)
    result = sensor(build_sensor_context(instance=instance, cursor=result.cursor, sensor_name=sensor.name,
                                         resources={"kafka": kafka}))
    assert not stopped.read(instance, sensor.name)
    (e,) = evaluate(instance, kafka, swift, [topic]).evaluations
    assert "lag sensor" not in e.description
