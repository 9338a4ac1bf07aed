"""The retention job on a real instance, Kafka and Swift: keys and runs go, the archive stays whole.

Ranges whose partition keys were pruned are still verified, read and restored, exactly:
none of those paths consults Dagster's keys.
"""

from __future__ import annotations

import os

import pytest
from dagster import DagsterRunStatus, Definitions, Failure, instance_for_test, job, op
from dagster._core.test_utils import create_run_for_test
from helpers import produce, read_kafka
from samples import archive_in_ranges, awkward_rows, config, fields, rows

from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import MONITOR_JOB, monitor_check, monitor_job
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import read_table
from matos_dagster.core.restore.plan import Request
from matos_dagster.core.restore.run import restore
from matos_dagster.core.runs.retention import Policy
from matos_dagster.core.swift import layout
from matos_dagster.core.verify import verify_topic
from matos_dagster.dagster_compat import PARTITION_NAME_TAG, event_log_shard
from matos_dagster.jobs.retention import delete_runs, retention_job


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def run_retention(instance, topic, kafka, swift, **cfg):
    result = retention_job([topic]).execute_in_process(
        instance=instance, resources={"kafka": kafka, "swift": swift},
        run_config={"ops": {"apply_retention": {"config": {"keep_runs": 1000, "keep_failed_days": 14, **cfg}}}},
    )
    assert result.success
    return result


def monitor_evaluation(instance, cfg, kafka, swift, spark_resource):
    """The monitor check, run alone: its evaluation."""
    check = monitor_check(cfg)
    defs = Definitions(assets=[archive_asset(cfg)], asset_checks=[check], jobs=[monitor_job([check])],
                       resources={"kafka": kafka, "swift": swift, "spark": spark_resource})
    result = defs.resolve_job_def(MONITOR_JOB).execute_in_process(instance=instance)
    (evaluation,) = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return evaluation


def test_pruned_ranges_are_still_verified_read_and_restored_exactly(kafka, swift, spark, spark_resource, new_topic,
                                                                     instance):
    name = new_topic()
    produce(kafka, name, awkward_rows(60, 1))
    cfg = config(name, slice_records=10, object_bytes=1024)
    with swift.store() as store:
        archive_in_ranges(kafka, store, spark, cfg, 1, 10)  # [0,10) ... [50,60), committed 60
    ranges = [OffsetRange(name, 0, a, a + 10) for a in range(0, 60, 10)]
    instance.add_dynamic_partitions(cfg.partitions_name, [r.key for r in ranges])
    # A run of [10, 20) still going: its key must stay whatever its age.
    create_run_for_test(instance, status=DagsterRunStatus.STARTED, tags={PARTITION_NAME_TAG: ranges[1].key})

    dry = run_retention(instance, cfg, kafka, swift, keep_keys=2, dry_run=True)
    assert dry.output_for_node("apply_retention") >= 3
    assert len(instance.get_dynamic_partitions(cfg.partitions_name)) == 6, "a dry run removes nothing"

    run_retention(instance, cfg, kafka, swift, keep_keys=2)
    left = instance.get_dynamic_partitions(cfg.partitions_name)
    assert sorted(left) == sorted(r.key for r in (ranges[1], ranges[4], ranges[5]))

    evaluation = monitor_evaluation(instance, cfg, kafka, swift, spark_resource)
    assert evaluation.passed and "gap" not in (evaluation.description or ""), evaluation.description

    with swift.store() as store:
        report = verify_topic(kafka, store, layout.join(store.params.prefix, cfg.prefix), cfg, None)
        assert report.ok, report.render()
        assert report.totals()["manifests"] == 6 and report.compared == 60
        table = read_table(store.params, "kafka", name, partitions=[0], start=5, end=35)
        assert rows(table) == read_kafka(kafka, name, 0, 5, 35)
        target, by_key = new_topic(), new_topic()
        restored = restore(Request(name, "kafka", target=target, partitions=(0,), start=0, end=40), kafka, store, spark)
        restored_by_key = restore(Request(name, "kafka", target=by_key, keys=(ranges[2].key,)), kafka, store, spark)
    assert restored.records == 40 and restored_by_key.records == 10
    assert fields(read_kafka(kafka, target, 0)) == fields(read_kafka(kafka, name, 0, 0, 40))
    assert fields(read_kafka(kafka, by_key, 0)) == fields(read_kafka(kafka, name, 0, 20, 30))


def test_a_committed_key_whose_range_has_no_manifest_in_swift_keeps_its_key(kafka, swift, new_topic, instance):
    name = new_topic()
    produce(kafka, name, [(b"k", b"v", [])] * 30)
    cfg = config(name)
    kafka.commit(name, {0: 30}, cfg.group)  # moved by someone: nothing of it is archived
    keys = [OffsetRange(name, 0, a, a + 10).key for a in (0, 10, 20)]
    instance.add_dynamic_partitions(cfg.partitions_name, keys)
    run_retention(instance, cfg, kafka, swift, keep_keys=1)
    assert sorted(instance.get_dynamic_partitions(cfg.partitions_name)) == sorted(keys)


@op
def say_something(context):
    context.log.info("something")


@op
def fail_here():
    raise Failure("on purpose")


@job
def small():
    say_something()


@job
def failing():
    fail_here()


def test_old_runs_go_with_their_events_and_event_log_file_and_the_newest_and_unfinished_stay(instance):
    old_started = create_run_for_test(instance, job_name="small", status=DagsterRunStatus.STARTED)
    ids = [small.execute_in_process(instance=instance).run_id for _ in range(13)]  # oldest first
    failed = [failing.execute_in_process(instance=instance, raise_on_error=False).run_id for _ in range(11)]
    shards = {i: event_log_shard(instance, i) for i in ids}
    assert all(os.path.exists(s) for s in shards.values())

    deleted = delete_runs(instance, Policy(keep_runs=10, keep_failed_days=14), dry_run=False)
    assert deleted == 3
    for gone in ids[:3]:
        # With SQLite a run's events are its own file: gone with it (asking for them would make it again).
        assert not os.path.exists(shards[gone])
        assert instance.get_run_by_id(gone) is None
    for kept in ids[3:] + failed:
        assert instance.get_run_by_id(kept) is not None and instance.all_logs(kept)
    assert instance.get_run_by_id(old_started.run_id) is not None, "a run not finished is never deleted"

    assert delete_runs(instance, Policy(keep_runs=10, keep_failed_days=0), dry_run=False) == 1
    assert instance.get_run_by_id(failed[0]) is None
