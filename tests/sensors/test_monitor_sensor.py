"""The monitor sensor: every topic's verdict from one tick, without a run, on a real Kafka, Swift and
Dagster instance. The archive is written as manifests straight to Swift (the monitor lists them,
it never reads an untyped topic's manifests) and offsets committed in Kafka, as archive runs would."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import swiftclient.client
from confluent_kafka.admin import NewTopic
from dagster import Definitions, build_sensor_context, instance_for_test
from helpers import produce

from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import MONITOR_JOB, check_key, monitor_check, monitor_job
from matos_dagster.core import topics as topics_file
from matos_dagster.core.kafka import many
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store
from matos_dagster.sensors.monitor import monitor_sensor

RECORDS = 20  # per partition


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Estate:
    """Topics `<base>-<i>` of 2 partitions, each archived as [0, 10) and [10, 20) and committed at 20,
    named in a topics file by the pattern `<base>-.*`, beside a named topic Kafka does not have."""

    def __init__(self, kafka, swift, instance, n: int, partitions: int = 2):
        self.kafka, self.swift, self.instance = kafka, swift, instance
        self.base = f"mon-{uuid.uuid4().hex[:8]}"
        self.names = [f"{self.base}-{i:02d}" for i in range(n)]
        self.missing = f"{self.base}-named-but-never-created"
        self.group = f"g-{uuid.uuid4().hex[:6]}"
        self.cursor: str | None = None
        admin = kafka.admin()
        for f in admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1)
                                      for t in self.names]).values():
            f.result(timeout=30)
        self.topics = topics_file.parse({"topics": [{"name": self.missing}, {"pattern": f"{self.base}-\\d+"}]},
                                        default_group=self.group)
        producer = kafka.producer()  # one for every topic: a producer each costs most of a second
        for t in self.names:
            for p in range(partitions):
                for _ in range(RECORDS):
                    producer.produce(t, key=b"k", value=b"v", partition=p)
        assert producer.flush(30) == 0
        self.archive([(t, p, a, a + 10) for t in self.names for p in range(partitions) for a in (0, 10)],
                     {(t, p): RECORDS for t in self.names for p in range(partitions)})

    def archive(self, ranges, commit: dict | None = None):
        """Manifests of `ranges` (topic, partition, start, end), then the group's `commit` offsets."""
        with self.swift.store() as store:
            for t, p, a, b in ranges:
                store.put_json(layout.manifest_name(store.params.prefix, OffsetRange(t, p, a, b)),
                               {"topic": t, "partition": p, "start": a, "end": b, "objects": []})
        if commit:
            many.commit(self.kafka, self.group, commit)

    def tick(self, interval_s: int = 300, tick_s: int = 30, budget_s: float = 30.0, keep: int = 300,
             moved_after_s: float = 0.0) -> dict:
        """One sensor evaluation, its verdicts reported and its cursor kept as the daemon does: by topic."""
        sensor = monitor_sensor(self.topics, interval_s, tick_s, budget_s, keep, moved_after_s=moved_after_s)
        result = sensor(build_sensor_context(instance=self.instance, sensor_name=sensor.name, cursor=self.cursor,
                                             resources={"kafka": self.kafka, "swift": self.swift}))
        self.cursor = result.cursor
        for e in result.asset_events:
            self.instance.report_runless_asset_event(e)
        return {_topic_of(e): e for e in result.asset_events}


def _topic_of(evaluation) -> str:
    """The topic of an evaluation's asset `archive_<topic>` (these topics' `-` became `_`)."""
    return evaluation.asset_key.path[-1].removeprefix("archive_").replace("_", "-")


def rows(evaluation) -> list[dict]:
    return [r.data for r in evaluation.metadata["partitions"].value.records]


class SwiftRequests:
    """Every request the code makes of Swift (authentication included), and its listings by topic."""

    def __init__(self, monkeypatch):
        self.requests = 0
        self.listed: list[str] = []
        self.got: list[str] = []
        real_retry, real_auth = swiftclient.client.Connection._retry, swiftclient.client.Connection.get_auth
        real_list, real_get = Store.list_page, Store.get

        def retry(conn, *a, **kw):
            self.requests += 1
            return real_retry(conn, *a, **kw)

        def auth(conn, *a, **kw):
            self.requests += 1
            return real_auth(conn, *a, **kw)

        def list_page(store, prefix, *a, **kw):
            self.listed.append(prefix)
            return real_list(store, prefix, *a, **kw)

        def get(store, name, *a, **kw):
            self.got.append(name)
            return real_get(store, name, *a, **kw)

        monkeypatch.setattr(swiftclient.client.Connection, "_retry", retry)
        monkeypatch.setattr(Store, "get", get)
        monkeypatch.setattr(swiftclient.client.Connection, "get_auth", auth)
        monkeypatch.setattr(Store, "list_page", list_page)

    def topics_listed(self) -> set[str]:
        return {p.split("topic=")[1].split("/")[0] for p in self.listed if "topic=" in p}


def test_one_sensor_evaluation_reports_a_gap_in_one_topic_ok_for_the_others_and_a_named_topic_missing(
        kafka, swift, instance):
    estate = Estate(kafka, swift, instance, 6)
    gap = estate.names[3]
    produce(kafka, gap, [(b"k", b"v", [], 1)] * 10)  # partition 1: 30 records, [25, 30) archived, not [20, 25)
    estate.archive([(gap, 1, 25, 30)], {(gap, 1): 30})
    verdicts = estate.tick()
    assert sorted(verdicts) == sorted(estate.names + [estate.missing])
    for name in estate.names:
        e = verdicts[name]
        if name == gap:
            assert not e.passed and e.metadata["status"].value == "ERROR", e.description
            assert [r["gaps"] for r in rows(e)] == ["", "[20, 25)"] and "p1: gaps between" in e.description
        else:
            assert e.passed and e.metadata["status"].value == "OK", e.description
            assert [(r["committed"], r["archived_hwm"], r["ranges"]) for r in rows(e)] == [(20, 20, 2)] * 2
    missing = verdicts[estate.missing]
    assert not missing.passed and missing.severity.value == "WARN"
    assert "is not in Kafka" in missing.description and "remove it from the topics file" in missing.description
    # Reported without a run: each verdict is its check's latest execution.
    key = check_key(estate.topics.get(gap))
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    assert latest.run_id == "" and latest.evaluation.metadata["status"].value == "ERROR"


def test_a_quiet_re_evaluation_asks_swift_nothing_for_partitions_that_did_not_move(kafka, swift, instance,
                                                                                     monkeypatch):
    estate = Estate(kafka, swift, instance, 6)
    gap = estate.names[2]
    estate.archive([(gap, 0, 30, 40)])  # past the log end: a gap, looked at again every time
    first = estate.tick()
    assert not first[gap].passed and all(first[n].passed for n in estate.names if n != gap)
    counted = SwiftRequests(monkeypatch)
    again = estate.tick(interval_s=1, tick_s=1)  # every verdict due again at once
    assert sorted(again) == sorted(first)
    assert counted.topics_listed() == {gap}, counted.topics_listed()
    assert not [n for n in counted.got if "/_monitor/" in n], "a mark read where the last verdict knew the partition"
    for name in estate.names:
        e = again[name]
        assert [r["status"] for r in rows(e)] == [r["status"] for r in rows(first[name])]
        if name != gap:
            assert e.metadata["started_from"].value == {"0": "carried: nothing moved", "1": "carried: nothing moved"}
            assert e.metadata["swift_listing_requests"].value == 0 and e.passed
    # Without a topic to look at again, nothing at all is asked of Swift, not even authentication.
    with swift.store() as store:
        store.delete(layout.manifest_name(store.params.prefix, OffsetRange(gap, 0, 30, 40)))
    assert estate.tick(interval_s=1, tick_s=1)[gap].passed  # the gap mended: looked at, and settled
    estate.tick(interval_s=1, tick_s=1)  # the topic's days read once more after it was listed (core/days/)
    counted.requests = 0
    quiet = estate.tick(interval_s=1, tick_s=1)
    assert counted.requests == 0 and all(quiet[n].passed for n in estate.names)


def test_a_topic_whose_committed_offset_moved_is_evaluated_once_its_verdict_is_old_enough_though_fresh(
        kafka, swift, instance, monkeypatch):
    estate = Estate(kafka, swift, instance, 4)
    assert len(estate.tick(interval_s=3600)) == 5  # every topic's first verdict
    reads = []
    storage = type(instance.event_log_storage)
    real = storage.get_latest_asset_check_execution_by_key
    monkeypatch.setattr(storage, "get_latest_asset_check_execution_by_key",
                        lambda self, keys, *a, **kw: reads.append(len(keys)) or real(self, keys, *a, **kw))
    assert estate.tick(interval_s=3600) == {} and reads == []  # all fresh, nothing moved: no verdict even read
    moved = estate.names[1]
    produce(kafka, moved, [(b"k", b"v", [], 0)] * 10)
    estate.archive([(moved, 0, 20, 30)], {(moved, 0): 30})  # an archive run committed
    # Held while its verdict is younger than MATOS_REEVALUATE_S (a busy topic moves at every tick),
    # and looked at again at each tick until it is due.
    assert estate.tick(interval_s=3600, moved_after_s=3600) == {}
    assert estate.tick(interval_s=3600, moved_after_s=3600) == {}
    reads.clear()
    verdicts = estate.tick(interval_s=3600, moved_after_s=0)
    assert list(verdicts) == [moved] and reads == [5]  # every topic's last verdict, in one query
    assert [(r["committed"], r["archived_hwm"], r["ranges"]) for r in rows(verdicts[moved])] == [(30, 30, 3), (20, 20, 2)]


def test_the_sensors_verdict_carries_the_table_and_metadata_of_the_check_run(kafka, swift, instance, spark_resource):
    """The check executed in a run (as `matos monitor TOPIC` runs it: the monitor job's subset of one
    topic) judges as the sensor does, and takes the sensor's verdict as its last."""
    estate = Estate(kafka, swift, instance, 2)
    name = estate.names[0]
    from_sensor = estate.tick()[name]
    topics = [estate.topics.get(n) for n in estate.names]
    checks = [monitor_check(t) for t in topics]
    defs = Definitions(assets=[archive_asset(t) for t in topics], asset_checks=checks, jobs=[monitor_job(checks)],
                       resources={"kafka": kafka, "swift": swift, "spark": spark_resource})
    job = defs.resolve_job_def(MONITOR_JOB).get_subset(asset_check_selection={check_key(topics[0])})
    (from_run,) = job.execute_in_process(instance=instance).get_asset_check_evaluations()
    assert from_run.asset_key == from_sensor.asset_key
    assert set(from_run.metadata) == set(from_sensor.metadata)
    assert rows(from_run) == rows(from_sensor) and from_run.description == from_sensor.description
    # The run's verdict followed the sensor's: its window holds both evaluations' samples.
    assert [len(s) for s in from_run.metadata["samples"].value.values()] == [2, 2]


def test_a_deleted_topic_is_no_longer_evaluated_and_a_new_one_a_pattern_matches_is(kafka, swift, instance):
    estate = Estate(kafka, swift, instance, 3)
    assert len(estate.tick()) == 4
    admin = kafka.admin()
    admin.delete_topics([estate.names[0]])[estate.names[0]].result(timeout=30)
    new = f"{estate.base}-99"
    admin.create_topics([NewTopic(new, num_partitions=1, replication_factor=1)])[new].result(timeout=30)
    deadline = time.monotonic() + 30
    while (estate.names[0] in (listed := many.topics(kafka)) or new not in listed) and time.monotonic() < deadline:
        time.sleep(0.2)  # the broker's metadata follows the controller's within moments
    verdicts = estate.tick(interval_s=1, tick_s=1)
    assert sorted(verdicts) == sorted(estate.names[1:] + [new, estate.missing])
    assert verdicts[new].passed and rows(verdicts[new])[0]["log_end"] == 0


def test_out_of_time_a_tick_evaluates_the_stalest_topic_and_leaves_the_rest_to_the_next_ticks(kafka, swift, instance):
    estate = Estate(kafka, swift, instance, 3)
    order = [list(estate.tick(interval_s=1, tick_s=1, budget_s=0)) for _ in range(5)]
    # Never-evaluated topics first (by name), then always the one whose verdict is oldest.
    assert order == [[n] for n in sorted(estate.names + [estate.missing])] + [[sorted(estate.names + [estate.missing])[0]]]


def test_each_topic_keeps_its_newest_verdicts_only_in_the_checks_history_and_the_event_log(kafka, swift, instance):
    import sqlalchemy
    from dagster import DagsterEventType
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable

    estate = Estate(kafka, swift, instance, 2)
    for _ in range(5):
        estate.tick(interval_s=1, tick_s=1, keep=3)
    assert len(instance.event_log_storage.get_asset_check_execution_history(
        check_key(estate.topics.get(estate.names[0])), limit=100)) == 5  # pruned once an hour
    estate.cursor = json.dumps({**json.loads(estate.cursor), "pruned": time.time() - 3600})  # an hour later
    estate.tick(interval_s=1, tick_s=1, keep=3)
    for topic in [estate.topics.get(n) for n in estate.names]:
        history = instance.event_log_storage.get_asset_check_execution_history(check_key(topic), limit=100)
        assert len(history) == 3 and all(h.run_id == "" for h in history)
        # The latest verdict's window is whole all the same: it carries its own samples.
        assert [len(s) for s in history[0].evaluation.metadata["samples"].value.values()] == [4, 4]
    # The events themselves: in the event log of no run, and SQLite's index of events across runs.
    kept = instance.all_logs("", of_type=DagsterEventType.ASSET_CHECK_EVALUATION)
    assert len(kept) == 3 * (len(estate.names) + 1), len(kept)
    with instance.event_log_storage.index_connection() as conn:
        indexed = conn.execute(sqlalchemy.select(sqlalchemy.func.count()).where(
            SqlEventLogStorageTable.c.dagster_event_type == "ASSET_CHECK_EVALUATION")).scalar()
    assert indexed == len(kept)
