"""Going on after a data loss (issue 12.4): one command acknowledges it, records it in the
archive, and the partition moves on by itself; nothing else moves the offset past a hole.

Real Kafka, Swift and Spark; the loss is made as retention makes it (the log start offset
moves past records not archived yet).
"""

from __future__ import annotations

import re
import sys
import uuid

import pytest
from dagster import Definitions, build_sensor_context, instance_for_test
from helpers import check_archive, delete_records, produce, requested_ranges

from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import MONITOR_JOB, monitor_check, monitor_job
from matos_dagster.core.archive import loss
from matos_dagster.core.archive.range_run import DataLoss, RangeRefused, archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.policy import Offsets, PartitionState, decide
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import LOSS, RANGE, Entry, PartitionArchive
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.jobs.loss import acknowledge_loss_job
from matos_dagster.jobs.ranges import add_ranges_job
from matos_dagster.sensors.lag import lag_sensor


def config(topic: str) -> TopicConfig:
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", batch_records=10)


def test_the_sensors_data_loss_warning_names_the_acknowledge_command():
    t = TopicConfig("orders", batch_records=100)
    d = decide(t, 3, PartitionState(committed=10), Offsets(50, 500, 10), None, 1_000_000_000)
    assert loss.command("orders", 3) in d.warning


def test_the_command_runs_as_printed_this_python_and_the_projects_cli():
    cmd = loss.command("orders", 3)
    assert cmd.startswith(f"{sys.executable} -m matos_dagster acknowledge-loss orders --partition 3 --reason ")


def test_after_retention_deleted_unarchived_records_one_acknowledgement_lets_the_partition_go_on(
        kafka, swift, spark, spark_resource, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(100)])
    cfg = config(topic)
    defs = Definitions(
        assets=[archive_asset(cfg)], asset_checks=[check := monitor_check(cfg)],
        jobs=[acknowledge_loss_job([cfg]), add_ranges_job([cfg]), monitor_job([check])],
        resources={"kafka": kafka, "swift": swift, "spark": spark_resource},
    )
    sensor = lag_sensor(TopicSet([cfg]), 30)

    def acknowledge(instance, **conf):
        return defs.resolve_job_def("acknowledge_loss").execute_in_process(
            run_config={"ops": {loss.OP: {"config": {"topic": topic, "partition": 0, **conf}}}},
            instance=instance, raise_on_error=False)

    def monitor(instance):
        (evaluation,) = defs.resolve_job_def(MONITOR_JOB).execute_in_process(
            instance=instance).get_asset_check_evaluations()
        return evaluation, evaluation.metadata["partitions"].value.records[0].data

    with swift.store() as store, instance_for_test() as instance:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        archive_range(OffsetRange(topic, 0, 0, 20), cfg, kafka, store, spark)
        delete_records(kafka, topic, 0, 60)  # retention took [20, 60) before its turn

        # Stuck, loudly, and every message names the one command.
        with pytest.raises(DataLoss, match=r"offsets \[20, 60\) .* lost") as refused:
            archive_range(OffsetRange(topic, 0, 20, 100), cfg, kafka, store, spark)
        assert loss.command(topic, 0) in str(refused.value)
        tick = sensor(build_sensor_context(instance=instance, sensor_name=sensor.name, resources={"kafka": kafka}))
        assert not tick.run_requests and "[20, 60) were deleted" in tick.skip_reason.skip_message
        added = defs.resolve_job_def("add_ranges").execute_in_process(
            run_config={"ops": {"add_range_keys": {"config": {"topic": topic}}}}, instance=instance,
            raise_on_error=False)
        assert not added.success  # it proposes no range the archive would refuse
        assert instance.get_dynamic_partitions(cfg.partitions_name) == []
        assert kafka.committed(topic, [0], cfg.group) == {0: 20}

        # Refusals change nothing: offsets still in Kafka, offsets archived, no reason.
        for conf, why in [({"start": 50, "end": 70}, r"\[60, 70\) of .* are still in Kafka"),
                          ({"start": 10, "end": 30}, r"\[10, 20\) .* already in the archive"),
                          ({"reason": " "}, "give a reason")]:
            result = acknowledge(instance, **{"reason": "test", **conf})
            assert not result.success
            (failure,) = [e for e in result.all_events if e.is_step_failure]
            assert re.search(why, failure.step_failure_data.error.message), failure
        assert list(PartitionArchive(store, prefix, topic, 0).all()) == [Entry(0, 20, RANGE)]
        assert kafka.committed(topic, [0], cfg.group) == {0: 20}

        result = acknowledge(instance, reason="retention ran during the broker outage of 23 Nov")
        assert result.success and result.output_for_node(loss.OP) == 40
        doc = store.get_json(layout.loss_name(prefix, OffsetRange(topic, 0, 20, 60)))
        assert {k: doc[k] for k in ("kind", "topic", "partition", "start", "end", "reason", "log_start")} == {
            "kind": "loss", "topic": topic, "partition": 0, "start": 20, "end": 60,
            "reason": "retention ran during the broker outage of 23 Nov", "log_start": 60}
        assert doc["acknowledged_at"].endswith("+00:00")
        assert kafka.committed(topic, [0], cfg.group) == {0: 60}  # past the acknowledged loss, no further
        assert acknowledge(instance, reason="again").output_for_node(loss.OP) == 0  # idempotent

        # The sensor goes on by itself from the log start; the next range archives and commits.
        tick = sensor(build_sensor_context(instance=instance, sensor_name=sensor.name, resources={"kafka": kafka},
                                           cursor=tick.cursor))
        ((nxt, _),) = requested_ranges(tick)
        assert (nxt.start, nxt.end) == (60, 100)
        with pytest.raises(RangeRefused, match=r"acknowledged as lost"):
            archive_range(OffsetRange(topic, 0, 50, 100), cfg, kafka, store, spark)
        assert archive_range(nxt, cfg, kafka, store, spark).committed_after == 100
        assert list(PartitionArchive(store, prefix, topic, 0).all()) == [
            Entry(0, 20, RANGE), Entry(20, 60, LOSS), Entry(60, 100, RANGE)]
        check_archive(kafka, store, topic, cfg.group)

        # The monitor shows the acknowledged loss: not an error, not a stall.
        evaluation, row = monitor(instance)
        assert evaluation.passed and evaluation.metadata["status"].value == "OK", evaluation.description
        assert (row["acknowledged_loss"], row["lost"], row["gaps"], row["archived_hwm"]) == ("[20, 60)", "", "", 100)
        assert "acknowledged loss: p0 [20, 60)" in evaluation.description
        assert evaluation.metadata["acknowledged_lost_offsets"].value == 40
        evaluation, row = monitor(instance)  # incremental: it still shows it from what it knows
        assert evaluation.passed and row["acknowledged_loss"] == "[20, 60)" and row["ranges"] == 2
