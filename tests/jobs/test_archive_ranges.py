"""The `archive_ranges` job, the lag sensor's run: ranges of many topics in one run, each one its
topic's partition, exactly once even when the run is killed between two ranges' manifests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest
from dagster import AssetKey, Definitions, instance_for_test
from helpers import check_archive, delete_records, produce, read_archive, read_kafka
from samples import config

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.jobs.archive_ranges import JOB, archive_ranges_job, ranges_config
from matos_dagster.resources import SparkResource
from matos_dagster.turns import CLAIM_TAG


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


def launch(topics, ranges, instance, kafka, swift, connect_server):
    defs = Definitions(jobs=[archive_ranges_job(TopicSet(topics))], resources={
        "kafka": kafka, "swift": swift, "spark": SparkResource(master=connect_server.url)})
    for t in topics:
        instance.add_dynamic_partitions(t.partitions_name, [r.key for r in ranges if r.topic == t.name])
    return defs.resolve_job_def(JOB).execute_in_process(run_config=ranges_config(ranges), instance=instance,
                                                        raise_on_error=False)


def test_ranges_of_several_topics_in_one_run_are_each_a_materialised_partition_of_its_topic(
        kafka, swift, connect_server, instance, new_topic):
    a, b = config(new_topic(partitions=2)), config(new_topic())
    produce(kafka, a.name, [(b"k", b"v", [], p) for p in (0, 1) for _ in range(40)])
    produce(kafka, b.name, [(None, b"w", [])] * 25)
    delete_records(kafka, b.name, 0, 5)  # the archive of b starts after offset 0
    ranges = [OffsetRange(a.name, 0, 0, 40), OffsetRange(a.name, 1, 0, 40), OffsetRange(b.name, 0, 5, 25)]
    result = launch([a, b], ranges, instance, kafka, swift, connect_server)
    assert result.success
    assert instance.get_materialized_partitions(AssetKey(a.asset_name)) == {ranges[0].key, ranges[1].key}
    assert instance.get_materialized_partitions(AssetKey(b.asset_name)) == {ranges[2].key}
    event = instance.get_latest_materialization_event(AssetKey(b.asset_name))
    meta = event.asset_materialization.metadata
    assert meta["records"].value == 20 and meta["committed_offset"].value == 25
    assert meta["swift_location"].value.endswith(f"partition=0/{5:020d}-{25:020d}/")
    (run,) = instance.get_runs()
    assert run.tags["matos/batch"] == "true"
    with swift.store() as store:
        assert check_archive(kafka, store, a.name, a.group) == {0: 40, 1: 40}
        assert check_archive(kafka, store, b.name, b.group) == {0: 25}


def test_a_range_refused_fails_the_run_in_one_line_after_the_others_are_archived(
        kafka, swift, connect_server, instance, new_topic):
    ok, big = config(new_topic()), config(new_topic(), max_record_bytes=10, object_bytes=1000)
    produce(kafka, ok.name, [(None, b"v", [])] * 10)
    produce(kafka, big.name, [(None, b"x" * 50, [])] * 3)
    ranges = [OffsetRange(ok.name, 0, 0, 10), OffsetRange(big.name, 0, 0, 3)]
    result = launch([ok, big], ranges, instance, kafka, swift, connect_server)
    assert not result.success
    failure = result.failure_data_for_node("archive_batch").error
    assert "1 of 2 range(s) not archived (1 refused)" in failure.message
    assert "max_record_bytes" in failure.message and failure.message.count("\n") <= 1
    assert instance.get_materialized_partitions(AssetKey(ok.asset_name)) == {ranges[0].key}
    assert not instance.get_materialized_partitions(AssetKey(big.asset_name))


def test_a_key_of_a_topic_not_in_the_topics_file_refuses_the_run_before_anything_is_written(
        kafka, swift, connect_server, instance, new_topic):
    known = config(new_topic())
    produce(kafka, known.name, [(None, b"v", [])] * 10)
    result = launch([known], [OffsetRange(known.name, 0, 0, 10), OffsetRange("elsewhere", 0, 0, 5)], instance,
                    kafka, swift, connect_server)
    assert not result.success
    assert "topic 'elsewhere' is not in the topics file" in \
        result.failure_data_for_node("archive_batch").error.message
    with swift.store() as store:
        assert not list(store.list(""))
    assert kafka.committed(known.name, [0], known.group) == {0: None}


def test_ranges_of_one_partition_that_overlap_each_other_refuse_the_run_before_anything_is_written(
        kafka, swift, connect_server, instance, new_topic):
    """Each would pass the archive's check of overlaps (no manifest yet): both would be archived."""
    t = config(new_topic())
    produce(kafka, t.name, [(None, b"v", [])] * 150)
    result = launch([t], [OffsetRange(t.name, 0, 0, 100), OffsetRange(t.name, 0, 50, 150)], instance,
                    kafka, swift, connect_server)
    assert not result.success
    message = result.failure_data_for_node("archive_batch").error.message
    assert "1 of 2 range(s) refused, nothing archived" in message and "\n" not in message.strip()
    assert f"offsets [50, 100) of {t.name}/0 would be archived twice" in message
    with swift.store() as store:
        assert not list(store.list(""))
    assert kafka.committed(t.name, [0], t.group) == {0: None}
    (run,) = instance.get_runs()
    assert CLAIM_TAG not in run.tags, "refused before its claim: no other run waited for it"


def test_a_key_not_added_to_its_topics_asset_refuses_the_run_naming_the_command_that_adds_it(
        kafka, swift, connect_server, instance, new_topic):
    t = config(new_topic())
    produce(kafka, t.name, [(None, b"v", [])] * 20)
    added, not_added = OffsetRange(t.name, 0, 0, 10), OffsetRange(t.name, 0, 10, 20)
    instance.add_dynamic_partitions(t.partitions_name, [added.key])
    defs = Definitions(jobs=[archive_ranges_job(TopicSet([t]))], resources={
        "kafka": kafka, "swift": swift, "spark": SparkResource(master=connect_server.url)})
    result = defs.resolve_job_def(JOB).execute_in_process(run_config=ranges_config([added, not_added]),
                                                          instance=instance, raise_on_error=False)
    assert not result.success
    message = result.failure_data_for_node("archive_batch").error.message
    assert f"{not_added.key} is not a range of {t.asset_name} yet; add it first with: " in message
    assert f"-m matos_dagster add-ranges {t.name} --partition 0 --start 10 --end 20" in message
    with swift.store() as store:
        assert not list(store.list(""))


_KILLED = """
import json, os, sys
from dagster import DagsterInstance, Definitions
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.jobs.archive_ranges import JOB, archive_ranges_job, ranges_config
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

a = json.loads(sys.argv[1])
topics = [TopicConfig(**t) for t in a["topics"]]
defs = Definitions(jobs=[archive_ranges_job(TopicSet(topics))], resources={
    "kafka": KafkaResource(bootstrap_servers=a["bootstrap"], timeout_s=10),
    "swift": SwiftResource(auth_url=a["auth_url"], user=a["user"], key=os.environ["MATOS_SWIFT_KEY"],
                           container=a["container"], prefix="kafka", retries=2),
    "spark": SparkResource(master=a["spark"])})
ranges = [OffsetRange(**r) for r in a["ranges"]]
with DagsterInstance.ephemeral() as instance:
    for t in topics:
        instance.add_dynamic_partitions(t.partitions_name, [r.key for r in ranges if r.topic == t.name])
    defs.resolve_job_def(JOB).execute_in_process(run_config=ranges_config(ranges), instance=instance)
print("not killed")
"""


def test_a_run_killed_between_two_ranges_manifests_leaves_each_range_once_and_the_rerun_finishes_them(
        kafka_server, kafka, swift, connect_server, instance, new_topic):
    topics = [config(new_topic(partitions=2)) for _ in range(2)]
    for t in topics:
        produce(kafka, t.name, [(f"k{i}".encode(), f"v{i}".encode(), [], i % 2) for i in range(60)])
    # Three ranges a partition: a partition's manifests are written one after the other.
    ranges = [OffsetRange(t.name, p, a, a + 10) for t in topics for p in (0, 1) for a in (0, 10, 20)]
    args = {"bootstrap": kafka_server.bootstrap_servers, "auth_url": swift.auth_url, "user": swift.user,
            "container": swift.container, "spark": connect_server.url,
            "topics": [{"name": t.name, "group": t.group} for t in topics], "ranges": [dict(vars(r)) for r in ranges]}
    env = {**os.environ, "MATOS_SWIFT_KEY": swift.key, "MATOS_FAULT": "batch-after-manifest-2"}
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-c", _KILLED, json.dumps(args)], env=env, cwd=PROJECT_ROOT,
                                stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            code = proc.wait(300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
        out.seek(0)
        assert code == -signal.SIGKILL, f"the run was not killed between manifests: exit {code}\n{out.read()[-3000:]}"
    with swift.store() as store:
        manifests = [n["name"] for n in store.list("") if n["name"].endswith("_manifest.json")]
        assert 2 <= len(manifests) < len(ranges), "killed after some of the ranges' manifests, before the others"
        for t in topics:
            assert kafka.committed(t.name, [0, 1], t.group) == {0: None, 1: None}, "nothing committed yet"

    result = launch(topics, ranges, instance, kafka, swift, connect_server)  # the sensor's retry

    assert result.success
    with swift.store() as store:
        for t in topics:
            assert check_archive(kafka, store, t.name, t.group) == {0: 30, 1: 30}
        for r in ranges:
            doc = store.get_json(f"kafka/topic={r.topic}/partition={r.partition}/{r.start:020d}-{r.end:020d}/_manifest.json")
            assert read_archive(store, doc) == read_kafka(kafka, r.topic, r.partition, r.start, r.end)
    for t in topics:
        assert instance.get_materialized_partitions(AssetKey(t.asset_name)) == {r.key for r in ranges
                                                                               if r.topic == t.name}
