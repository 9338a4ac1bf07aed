"""The monitor check's OK, WARN and ERROR, each from a real situation on Kafka and Swift."""

from __future__ import annotations

import uuid

import pytest
from dagster import Definitions, instance_for_test
from helpers import delete_records, produce

from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import MONITOR_JOB, monitor_check, monitor_job
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


class Monitor:
    def __init__(self, topic: TopicConfig, kafka, swift, spark_resource, instance):
        check = monitor_check(topic)
        self.defs = Definitions(
            assets=[archive_asset(topic)], asset_checks=[check], jobs=[monitor_job([check])],
            resources={"kafka": kafka, "swift": swift, "spark": spark_resource},
        )
        self.job = self.defs.resolve_job_def(MONITOR_JOB)
        self.instance = instance

    def evaluate(self):
        result = self.job.execute_in_process(instance=self.instance)
        (evaluation,) = result.get_asset_check_evaluations()
        return evaluation


def setup(kafka, swift, spark_resource, instance, new_topic, **kw):
    name = new_topic()
    topic = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}", **kw)
    return name, topic, Monitor(topic, kafka, swift, spark_resource, instance)


def table(evaluation) -> list[dict]:
    return [r.data for r in evaluation.metadata["partitions"].value.records]


def test_an_archive_that_keeps_up_is_ok(kafka, swift, spark_resource, instance, new_topic):
    name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic)
    produce(kafka, name, [(b"k", b"v", [])] * 20)
    with swift.store() as store:
        archive_range(OffsetRange(name, 0, 0, 20), topic, kafka, store, spark_resource.spark_session)
    e = monitor.evaluate()
    assert e.passed and e.metadata["status"].value == "OK"
    row = table(e)[0]
    assert (row["log_end"], row["committed"], row["archived_hwm"], row["lag_records"]) == (20, 20, 20, 0)


def test_a_typed_topics_records_that_did_not_decode_are_shown_not_judged(kafka, swift, spark_resource, instance,
                                                                         new_topic):
    """Schemaless JSON values, two of them not JSON: the check counts them per side (from the ranges'
    manifests), in the partition's row and its description, and stays OK: their raw bytes are archived.
    The second evaluation lists nothing below what it knows, and still shows them."""
    name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic, value_format="json")
    produce(kafka, name, [(b"k", b'{"n": %d}' % i if i not in (3, 11) else b"not json", []) for i in range(20)])
    with swift.store() as store:
        for a in (0, 10):
            archive_range(OffsetRange(name, 0, a, a + 10), topic, kafka, store, spark_resource.spark_session)
    for e in (monitor.evaluate(), monitor.evaluate()):
        assert e.passed and e.metadata["status"].value == "OK"
        assert (e.metadata["value_decoded"].value, e.metadata["value_not_decoded"].value) == (18, 2)
        assert table(e)[0]["not_decoded"] == 2 and "2 records did not decode" in e.description
        assert e.metadata["late_records"].value == 0  # the topic's days: none evaluated yet


def test_lag_growing_above_the_threshold_warns(kafka, swift, spark_resource, instance, new_topic):
    name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic, lag_warn_records=10)
    statuses = []
    for _ in range(5):  # the window: lag above 10 and growing at every evaluation
        produce(kafka, name, [(b"k", b"v", [])] * 15)
        statuses.append(monitor.evaluate().metadata["status"].value)
    # Every status: a trend needs the whole window (it warned from the second evaluation on).
    assert statuses == ["OK", "OK", "OK", "OK", "WARN"]
    e = monitor.evaluate()
    assert not e.passed and e.severity.value == "WARN" and "not shrinking" in table(e)[0]["why"]
    assert e.metadata["total_lag_records"].value == 75


def test_a_gap_between_archived_ranges_is_an_error(kafka, swift, spark_resource, instance, new_topic):
    name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic)
    produce(kafka, name, [(b"k", b"v", [])] * 30)
    with swift.store() as store:
        for start, end in [(0, 10), (20, 30)]:
            archive_range(OffsetRange(name, 0, start, end), topic, kafka, store, spark_resource.spark_session)
    e = monitor.evaluate()
    assert not e.passed and e.severity.value == "ERROR"
    assert table(e)[0]["gaps"] == "[10, 20)" and table(e)[0]["status"] == "ERROR"


def test_records_deleted_by_retention_before_archiving_are_an_error(kafka, swift, spark_resource, instance, new_topic):
    name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic)
    produce(kafka, name, [(b"k", b"v", [])] * 30)
    with swift.store() as store:
        archive_range(OffsetRange(name, 0, 0, 10), topic, kafka, store, spark_resource.spark_session)
    delete_records(kafka, name, 0, 15)
    e = monitor.evaluate()
    assert not e.passed and e.severity.value == "ERROR"
    assert table(e)[0]["lost"] == "[10, 15)"


def test_an_evaluation_lists_as_much_with_200_ranges_below_what_it_knows_as_with_20(
        kafka, swift, spark_resource, instance, new_topic, monkeypatch):
    """Issue 13.2: the first evaluation reads a partition once; later ones list from what it knew."""
    from matos_dagster.core.swift.store import Store

    listed = {"requests": 0, "names": 0}
    real = Store.list_page

    def counted(store, *args, **kwargs):  # the real listing, counted: requests and names returned
        items = real(store, *args, **kwargs)
        listed["requests"] += 1
        listed["names"] += len(items)
        return items

    monkeypatch.setattr(Store, "list_page", counted)
    per_evaluation = {}
    for n in (20, 200):
        name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic)
        produce(kafka, name, [(b"k", b"v", [])] * (n + 10))
        with swift.store() as store:
            prefix = layout.join(store.params.prefix, topic.prefix)
            for i in range(n):  # history: one-offset ranges, manifests written straight to Swift
                r = OffsetRange(name, 0, i, i + 1)
                store.put_json(layout.manifest_name(prefix, r), {"topic": name, "partition": 0, "start": i,
                                                                   "end": i + 1, "objects": []})
            kafka.commit(name, {0: n}, topic.group)
            first = monitor.evaluate()
            assert first.metadata["archived_ranges"].value == n and table(first)[0]["archived_hwm"] == n
            archive_range(OffsetRange(name, 0, n, n + 10), topic, kafka, store, spark_resource.spark_session)
        before = dict(listed)
        e = monitor.evaluate()
        per_evaluation[n] = (listed["requests"] - before["requests"], listed["names"] - before["names"])
        assert e.passed and e.metadata["archived_ranges"].value == n + 1, e.description
        assert e.metadata["swift_listing_requests"].value == per_evaluation[n][0]
        row = table(e)[0]
        assert (row["committed"], row["archived_hwm"], row["ranges"], row["gaps"]) == (n + 10, n + 10, n + 1, "")
    print(f"monitor evaluation (listing requests, names listed) by ranges below: {per_evaluation}")
    assert per_evaluation[20] == per_evaluation[200], per_evaluation


def _history(store, topic: TopicConfig, start: int, end: int) -> None:
    """One-offset ranges, manifests written straight to Swift (the monitor lists, never reads, them)."""
    prefix = layout.join(store.params.prefix, topic.prefix)
    for i in range(start, end):
        r = OffsetRange(topic.name, 0, i, i + 1)
        store.put_json(layout.manifest_name(prefix, r), {"topic": topic.name, "partition": 0, "start": i,
                                                           "end": i + 1, "objects": []})


def _judgement(e) -> tuple:
    row = table(e)[0]
    return (e.metadata["status"].value, row["archived_hwm"], row["ranges"], row["gaps"],
            e.metadata["archived_offsets"].value)


def test_a_fresh_instances_first_evaluation_lists_from_the_archives_mark_as_much_at_200_ranges_as_at_20(
        kafka, swift, spark_resource, instance, new_topic, monkeypatch):
    """Issue 13: a new DAGSTER_HOME (or old evaluations removed) reads the mark the last evaluation
    left in Swift, checks it, and lists from it; it judges as a full read does."""
    from matos_dagster.core.swift.store import Store

    listed = {"requests": 0, "names": 0}
    real = Store.list_page

    def counted(store, *args, **kwargs):
        items = real(store, *args, **kwargs)
        listed["requests"] += 1
        listed["names"] += len(items)
        return items

    monkeypatch.setattr(Store, "list_page", counted)
    fresh_cost = {}
    for n in (20, 200):
        name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic)
        produce(kafka, name, [(b"k", b"v", [])] * (n + 10))
        with swift.store() as store:
            _history(store, topic, 0, n)
            kafka.commit(name, {0: n}, topic.group)
            first = monitor.evaluate()  # the first ever: no Known anywhere, the whole read; leaves the mark
            assert first.metadata["started_from"].value == {"0": "whole"} and _judgement(first)[:3] == ("OK", n, n)
            _history(store, topic, n, n + 10)  # a day later: more ranges past the mark
            kafka.commit(name, {0: n + 10}, topic.group)
        with instance_for_test() as new_home:
            before = dict(listed)
            e = Monitor(topic, kafka, swift, spark_resource, new_home).evaluate()
            fresh_cost[n] = (listed["requests"] - before["requests"], listed["names"] - before["names"])
        assert e.metadata["started_from"].value == {"0": "mark"}, e.description
        with swift.store() as store:  # the same archive read whole, as an instance without any mark would
            store.delete(layout.join(layout.topic_dir(layout.join(store.params.prefix, topic.prefix), name),
                                     "_monitor", "partition=0.json"))
        with instance_for_test() as other_home:
            whole = Monitor(topic, kafka, swift, spark_resource, other_home).evaluate()
        assert whole.metadata["started_from"].value == {"0": "whole"}
        assert _judgement(e) == _judgement(whole) == ("OK", n + 10, n + 10, "", n + 10)
    print(f"fresh instance's first evaluation (listing requests, names listed) by ranges archived: {fresh_cost}")
    assert fresh_cost[20] == fresh_cost[200], fresh_cost


def test_a_mark_that_no_longer_holds_is_not_trusted_the_fresh_instance_reads_whole_and_finds_the_gap(
        kafka, swift, spark_resource, instance, new_topic):
    """A range folder deleted by hand at the end of what the mark vouches for: no wrong OK."""
    name, topic, monitor = setup(kafka, swift, spark_resource, instance, new_topic)
    produce(kafka, name, [(b"k", b"v", [])] * 40)
    with swift.store() as store:
        _history(store, topic, 0, 30)
        kafka.commit(name, {0: 30}, topic.group)
        assert monitor.evaluate().passed  # leaves the mark: [0, 30) sound
        prefix = layout.join(store.params.prefix, topic.prefix)
        store.delete(layout.manifest_name(prefix, OffsetRange(name, 0, 29, 30)))
        _history(store, topic, 30, 40)
        kafka.commit(name, {0: 40}, topic.group)
    with instance_for_test() as new_home:
        e = Monitor(topic, kafka, swift, spark_resource, new_home).evaluate()
    assert not e.passed and table(e)[0]["gaps"] == "[29, 30)" and table(e)[0]["archived_hwm"] == 29, e.description
    assert e.metadata["started_from"].value == {"0": "whole: the mark no longer holds"}
