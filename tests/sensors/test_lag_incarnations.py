"""A topic deleted and created again under the same name, on the real Kafka, Swift and Spark: the
lag sensor's ticks and the `archive_batch` runs they request, driven by hand (no daemon).

The new log is archived from its own offset 0 as a new incarnation, under a prefix of its own,
and committed; the earlier log's archive keeps its objects and manifests byte for byte; the
sensor and the run each say it once, in one line. Whether a tick saw the topic missing or not,
and whether the group's committed offset of the earlier log survived or not.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from confluent_kafka.admin import NewTopic
from dagster import DagsterRunStatus, build_sensor_context, instance_for_test
from dagster._core.storage.tags import RUN_KEY_TAG, SENSOR_NAME_TAG
from dagster._core.test_utils import create_run_for_test
from helpers import manifests, produce, read_archive, read_kafka
from samples import delete_topic

from matos_dagster.core.archive.batch import archive_batch
from matos_dagster.core.kafka import many
from matos_dagster.core.offsets.ranges import OffsetRange, parse_key
from matos_dagster.core.swift import incarnations
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.sensors.lag import lag_sensor
from matos_dagster.turns import BATCH_OP

OLD_RECORDS, NEW_RECORDS = 300, 200


class Estate:
    """The lag sensor's ticks, each requested run archived by `archive_batch` as the job would."""

    def __init__(self, topic: TopicConfig, kafka, store, spark, instance):
        self.topic, self.kafka, self.store, self.spark, self.instance = topic, kafka, store, spark, instance
        self.sensor = lag_sensor(TopicSet([topic]), 30)
        self.cursor = None

    def tick(self):
        context = build_sensor_context(instance=self.instance, cursor=self.cursor, sensor_name=self.sensor.name,
                                       resources={"kafka": self.kafka})
        result = self.sensor(context)
        self.cursor = result.cursor
        return result

    def run(self, request):
        config = request.run_config["ops"][BATCH_OP]["config"]
        batch = archive_batch([(parse_key(k), self.topic) for k in config["ranges"]], self.kafka, self.store,
                              self.spark, topic_ids=config.get("topic_ids"), earlier=set(config.get("earlier", [])))
        ok = all(o.ok for o in batch.outcomes)
        create_run_for_test(self.instance, status=DagsterRunStatus.SUCCESS if ok else DagsterRunStatus.FAILURE,
                            tags={RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: self.sensor.name})
        return batch

    def tick_and_run(self):
        result = self.tick()
        return result, [self.run(r) for r in result.run_requests]


def objects(store, topic: str) -> dict[str, str]:
    """Every object and manifest of the topic's first incarnation's ranges (the topic's own prefix), with its md5."""
    _, items = store._conn.get_container(store.container, full_listing=True)
    return {i["name"]: i["hash"] for i in items
            if f"/topic={topic}/partition=" in i["name"] and "/incarnation=" not in i["name"]}


def create(kafka, name: str, partitions: int = 2) -> None:
    admin = kafka.admin()
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=30)
    deadline = time.monotonic() + 30
    while many.topic_ids(kafka, [name])[name] is None:  # the broker's metadata catches up
        assert time.monotonic() < deadline, f"topic {name} has no topic id 30 s after its creation"
        time.sleep(0.2)


@pytest.mark.parametrize("tick_between", [False, True], ids=["no-tick-between", "a-tick-saw-it-missing"])
def test_a_topic_created_again_is_archived_from_its_own_offset_0_apart_from_the_earlier_log_left_as_it_was(
        kafka, swift, spark, capfd, tick_between):
    name = f"again-{uuid.uuid4().hex[:8]}"
    create(kafka, name)
    topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", batch_records=100, batch_age_s=3600)
    produce(kafka, name, [(f"old{i}".encode(), b"earlier log", [], i % 2) for i in range(OLD_RECORDS)])
    with instance_for_test() as instance, swift.store() as store:
        estate = Estate(topic, kafka, store, spark, instance)
        _, runs = estate.tick_and_run()
        assert [o.ok for b in runs for o in b.outcomes] == [True, True]
        assert kafka.committed(name, [0, 1], topic.group) == {0: 150, 1: 150}
        old_id = many.topic_ids(kafka, [name])[name]
        before = objects(store, name)
        old_docs = sorted((d["partition"], d["start"], d["end"], d["topic_id"], d["incarnation"])
                          for d in manifests(store, name))
        assert old_docs == [(0, 0, 150, old_id, 1), (1, 0, 150, old_id, 1)]
        # A run requested for the earlier log, not run before the topic is deleted.
        old_config = {"ranges": [OffsetRange(name, 0, 150, 160).key], "topic_ids": {name: old_id}}

        delete_topic(kafka, name)
        if tick_between:
            estate.tick()
        create(kafka, name)
        new_id = many.topic_ids(kafka, [name])[name]
        assert new_id not in (None, old_id)
        # The group's offsets of the earlier log, as a broker may keep them (or not: then None).
        kafka.commit(name, {0: 150, 1: 150}, topic.group)
        produce(kafka, name, [(f"new{i}".encode(), b"new log", [], i % 2) for i in range(NEW_RECORDS)])

        # A run requested for the earlier log refuses to write its range into the new log's archive.
        refused = archive_batch([(parse_key(k), topic) for k in old_config["ranges"]], kafka, store, spark,
                                topic_ids=old_config["topic_ids"])
        (o,) = refused.outcomes
        assert o.refused and "was deleted and created again since this range was requested" in o.error

        capfd.readouterr()
        result, runs = estate.tick_and_run()
        said = capfd.readouterr()
        sensor_lines = [line for line in (said.out + said.err).splitlines() if "deleted and created again" in line]
        assert len(sensor_lines) == 1 and name in sensor_lines[0], said
        assert sorted(r for r, _ in [(parse_key(k), 0) for q in result.run_requests
                                     for k in q.run_config["ops"][BATCH_OP]["config"]["ranges"]]) == \
            [OffsetRange(name, 0, 0, 100), OffsetRange(name, 1, 0, 100)]
        (batch,) = runs
        assert [o.ok for o in batch.outcomes] == [True, True], [o.error for o in batch.outcomes]
        assert [n for n in batch.notes if "deleted and created again" in n] == [batch.notes[0]] and \
            "incarnation=2/topic=" in batch.notes[0]
        assert kafka.committed(name, [0, 1], topic.group) == {0: 100, 1: 100}

        # The new log's 200 records, from offset 0, under incarnation 2's prefix; the earlier log untouched.
        inc = incarnations.read(store, "kafka", name)
        assert [(i.number, i.topic_id) for i in inc][-1] == (2, new_id)
        for o in batch.outcomes:
            assert o.archived.manifest_name.startswith(f"kafka/incarnation=2/topic={name}/")
            assert (o.archived.manifest["topic_id"], o.archived.manifest["incarnation"]) == (new_id, 2)
            assert read_archive(store, o.archived.manifest) == read_kafka(kafka, name, o.range.partition, 0)
        assert sum(o.archived.manifest["records"] for o in batch.outcomes) == NEW_RECORDS
        assert objects(store, name) == before
        assert sorted((d["partition"], d["start"], d["end"], d.get("incarnation")) for d in manifests(store, name)) == \
            [(0, 0, 100, 2), (0, 0, 150, 1), (1, 0, 100, 2), (1, 0, 150, 1)]

        # The next tick goes on quietly: nothing new, no second line.
        capfd.readouterr()
        result, runs = estate.tick_and_run()
        said = capfd.readouterr()
        assert not result.run_requests and "deleted and created again" not in said.out + said.err


def test_a_run_of_one_range_of_a_topic_created_again_archives_it_into_the_new_incarnation(
        kafka, swift, spark_resource, tmp_path):
    """`matos archive KEY` or the UI: the asset's run looks the topic id up itself, records the new
    incarnation, and never writes the new log's range over the earlier log's range of the same span."""
    from dagster import DagsterInstance, materialize

    from matos_dagster.assets.archive import archive_asset

    name = f"again-{uuid.uuid4().hex[:8]}"
    create(kafka, name, partitions=1)
    topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}")
    first = OffsetRange(name, 0, 0, 40)
    resources = {"kafka": kafka, "swift": swift, "spark": spark_resource}
    with DagsterInstance.local_temp(str(tmp_path)) as instance, swift.store() as store:
        instance.add_dynamic_partitions(topic.partitions_name, [first.key])
        produce(kafka, name, [(f"old{i}".encode(), b"earlier log", [], 0) for i in range(40)])
        materialize([archive_asset(topic)], partition_key=first.key, instance=instance, resources=resources)
        before = objects(store, name)
        delete_topic(kafka, name)
        create(kafka, name, partitions=1)
        produce(kafka, name, [(f"new{i}".encode(), b"new log", [], 0) for i in range(40)])

        result = materialize([archive_asset(topic)], partition_key=first.key, instance=instance, resources=resources)
        (mat,) = result.asset_materializations_for_node(topic.asset_name)
        assert mat.metadata["manifest"].value.startswith(f"kafka/incarnation=2/topic={name}/")
        assert mat.metadata["records_written"].value == 40 and mat.metadata["committed_offset"].value == 40
        assert objects(store, name) == before, "the earlier log's range of the same span is untouched"
        (doc,) = [d for d in manifests(store, name) if d.get("incarnation") == 2]
        assert read_archive(store, doc) == read_kafka(kafka, name, 0, 0)
        warnings = [e.user_message for e in instance.all_logs(result.run_id) if e.level == logging.WARNING
                    and "deleted and created again" in (e.user_message or "")]
        assert len(warnings) == 1, warnings


def test_without_topic_ids_a_partition_whose_committed_offset_is_past_its_log_end_is_refused_not_guessed(
        kafka, swift, spark, new_topic, monkeypatch):
    """A broker that gives no topic id (the zero UUID, before Kafka 2.8): the archive cannot tell a log
    created again from the earlier one, so a partition that shows the sign of it (the group's offset
    past the log end) is refused in one line naming what to do, and nothing is written or committed."""
    name = new_topic()
    topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}")
    produce(kafka, name, [(b"k", b"v", [], 0)] * 20)
    kafka.commit(name, {0: 50}, topic.group)  # the earlier log's offset, kept by the group
    monkeypatch.setattr(many, "topic_ids", lambda kafka, names: {n: None for n in names})
    with swift.store() as store:
        (o,) = archive_batch([(OffsetRange(name, 0, 0, 20), topic)], kafka, store, spark).outcomes
        assert o.refused and "gives no topic id" in o.error and "prefix" in o.error and "\n" not in o.error
        assert manifests(store, name) == [] and kafka.committed(name, [0], topic.group) == {0: 50}
