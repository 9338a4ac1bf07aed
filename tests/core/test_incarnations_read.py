"""A topic deleted and created again: its two incarnations read, verified, restored, monitored and
compacted as the two logs they are, on the real Kafka, Swift and Spark.

One scenario for the module: incarnation 1 of a topic archived to offset 30 and committed; the
topic deleted and created again (a new topic id), 15 other records in it, archived as
incarnation 2 under its own prefix (`<prefix>/incarnation=2`, as the lag sensor archives a new
log) and committed: the earlier log's offsets lie beyond the new log's end. Compaction, which
changes the archive, comes last.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
from dagster import instance_for_test
from helpers import produce, read_kafka, table_rows
from samples import delete_topic

from matos_dagster.assets.monitor import evaluate as monitor_evaluate
from matos_dagster.core import reader
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.days import evaluate, windows
from matos_dagster.core.days.completeness import Rules
from matos_dagster.core.days.read import WindowNotComplete, close, read_window
from matos_dagster.core.kafka import many
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.incarnations import Incarnation, IncarnationError
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import BEYOND_END, EVERYTHING, GAP, manifest_issues, verify_topic
from matos_dagster.jobs.compact import compact_job
from matos_dagster.jobs.restore import restore_job
from matos_dagster.resources import SwiftResource

FIELDS = ("offset", "key", "value", "headers", "timestamp")


def rows(prefix: str, n: int):
    return [(f"{prefix}k{i}".encode(), f"{prefix} value {i} ".encode() * 8, [("i", str(i).encode())])
            for i in range(n)]


class TwoLogs:
    def __init__(self, kafka, swift, spark):
        self.kafka, self.swift, self.spark = kafka, swift, spark
        self.name = f"inc-{uuid.uuid4().hex[:8]}"
        kafka.create_topic(self.name, 1)
        self.cfg = TopicConfig(name=self.name, group=f"g-{uuid.uuid4().hex[:8]}", slice_records=4,
                               compact_bytes=1600, compact_min_age_s=0.0, compact_grace_s=3600.0)
        self.store = swift.store()
        self.prefix = layout.join(self.store.params.prefix, self.cfg.prefix)
        produce(kafka, self.name, rows("first", 30), partition=0)
        self.first = read_kafka(kafka, self.name, 0)
        for start in (0, 10, 20):
            archive_range(OffsetRange(self.name, 0, start, start + 10), self.cfg, kafka, self.store, spark)
        self.id1 = many.topic_ids(kafka, [self.name])[self.name]
        delete_topic(kafka, self.name)
        kafka.create_topic(self.name, 1)
        self.id2 = many.topic_ids(kafka, [self.name])[self.name]
        assert None not in (self.id1, self.id2) and self.id1 != self.id2
        produce(kafka, self.name, rows("second", 15), partition=0)
        self.second = read_kafka(kafka, self.name, 0)
        # What the lag sensor records and archives for a new log: its own incarnation, its own prefix.
        incarnations.write(self.store, self.prefix, self.name,
                           [Incarnation(1, self.id1, 1), Incarnation(2, self.id2, 2)])
        self.cfg2 = dataclasses.replace(self.cfg, prefix=layout.join(self.cfg.prefix, "incarnation=2"))
        for start, end in ((0, 5), (5, 10), (10, 15)):  # as the archive writes them: manifests naming the log
            archive_range(OffsetRange(self.name, 0, start, end), self.cfg, kafka, self.store, spark,
                          incarnation=Incarnation(2, self.id2, 2))
        assert kafka.committed(self.name, [0], self.cfg.group) == {0: 15}

    def objects(self, incarnation: int) -> dict[str, str]:
        """name -> etag of every object of the incarnation's topic folder."""
        folder = layout.join(incarnations.prefix_of(self.prefix, incarnation), f"topic={self.name}") + "/"
        return {o["name"]: o["hash"] for o in self.store.list(folder)}

    def verify(self, **kw):
        return verify_topic(self.kafka, self.store, self.prefix, self.cfg, **{"since": EVERYTHING, **kw})


@pytest.fixture(scope="module")
def logs(kafka, swift_server, spark):
    swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key=swift_server.key,
                          container=f"test-{uuid.uuid4().hex[:10]}", prefix="kafka", retries=2)
    two = TwoLogs(kafka, swift, spark)
    yield two
    two.store.close()


def picked(table, *fields) -> list[dict]:
    return [{f: r[f] for f in fields} for r in table_rows(table)]


def test_verify_judges_the_current_incarnation_against_kafka_and_names_the_earlier_one(logs):
    report = logs.verify(sample=None)
    assert report.ok, report.render()
    assert report.incarnation == 2 and report.compared == 15, report.render()
    assert not [p for p in report.problems if p.kind == BEYOND_END]
    (line,) = [n for n in report.notes if "new log" in n]
    assert line == (f"Kafka's topic {logs.name} is a new log (topic id {logs.id2}) since incarnation 1: archived as "
                    "incarnation 2; verify the earlier one with --incarnation 1"), line


def test_verify_of_the_earlier_incarnation_checks_its_own_archive_and_says_kafka_no_longer_has_it(logs):
    for name in (1, "1", logs.id1):
        report = logs.verify(sample=3, incarnation=name)
        assert report.ok, report.render()
        assert report.incarnation == 1 and report.compared == 0
        assert report.totals()["records"] == 30 and not report.loss
        assert any(n.startswith(f"Kafka no longer has the log of {logs.name}'s incarnation 1 (topic id {logs.id1})")
                   for n in report.notes), report.render()
        (p0,) = report.partitions
        assert (p0.log_end, p0.committed, p0.first_archived, p0.archived_end) == (None, None, 0, 30)
    with pytest.raises(IncarnationError, match="no incarnation 3 of this topic: it has incarnation 1 \\(topic id "):
        logs.verify(incarnation=3)


def test_verify_of_the_earlier_incarnation_still_finds_a_hole_between_its_ranges(logs, kafka, swift, spark):
    # Its own contiguity is all that can be judged of a log Kafka no longer has: judged it is.
    prefix1 = logs.prefix
    name = layout.manifest_name(prefix1, OffsetRange(logs.name, 0, 10, 20))
    doc = logs.store.get(name)
    logs.store.delete(name)
    try:
        report = logs.verify(incarnation=1)
        assert [(p.kind, p.start, p.end) for p in report.problems] == [(GAP, 10, 20)], report.render()
    finally:
        logs.store.put(name, doc)


def test_a_manifest_that_names_another_incarnation_than_its_prefixes_is_reported():
    doc = {"topic": "t", "partition": 0, "start": 0, "end": 10, "format": "parquet", "records": 0, "objects": [],
           "topic_id": "B", "incarnation": 2}
    assert manifest_issues(doc, "t", 0, (0, 10), Incarnation(2, "B")) == ([], True)
    assert manifest_issues(dict(doc, topic_id=None), "t", 0, (0, 10), Incarnation(2, "B")) == ([], True)
    for under in (Incarnation(1, "A"), Incarnation(2, "C")):
        issues, usable = manifest_issues(doc, "t", 0, (0, 10), under)
        assert issues == [f"names incarnation 2 (topic id B), yet lies under {under}'s prefix: another log's range"]
    legacy = {k: v for k, v in doc.items() if k not in ("topic_id", "incarnation")}
    assert manifest_issues(legacy, "t", 0, (0, 10), Incarnation(1, "A")) == ([], True)


def test_read_table_reads_each_incarnation_its_own_records(logs):
    assert picked(reader.read_table(logs.store, logs.prefix, logs.name), *FIELDS) == \
        [{f: r[f] for f in FIELDS} for r in logs.second]
    for name in (1, logs.id1):
        earlier = reader.read_table(logs.store, logs.prefix, logs.name, incarnation=name)
        assert picked(earlier, *FIELDS) == [{f: r[f] for f in FIELDS} for r in logs.first]
    window = reader.read_table(logs.store, logs.prefix, logs.name, start=12, end=25, incarnation=1)
    assert [r["offset"] for r in table_rows(window)] == list(range(12, 25))


def test_the_monitor_judges_the_current_incarnation_ok_though_the_earlier_ends_past_the_new_log(logs, kafka):
    with instance_for_test() as instance:
        (e,) = monitor_evaluate(instance, kafka, logs.swift, [logs.cfg]).evaluations
        assert e.metadata["status"].value == monitor.OK, e.description
        (row,) = [r.data for r in e.metadata["partitions"].value.records]
        assert (row["log_end"], row["committed"], row["archived_hwm"]) == (15, 15, 15), row
        assert e.metadata["archive_state"].value["incarnation"] == {"number": 2, "topic_id": logs.id2}


def test_restore_of_the_earlier_incarnation_gives_its_records_exactly(logs, kafka, spark_resource):
    target = f"{logs.name}-restored"
    resources = {"kafka": kafka, "swift": logs.swift, "spark": spark_resource}
    run = restore_job([logs.cfg]).execute_in_process(run_config={"ops": {"restore_records": {"config": {
        "topic": logs.name, "target_topic": target, "incarnation": "1"}}}}, resources=resources)
    assert run.output_for_node("restore_records") == 30
    assert [{f: r[f] for f in ("key", "value", "headers", "timestamp")} for r in read_kafka(kafka, target, 0)] == \
        [{f: r[f] for f in ("key", "value", "headers", "timestamp")} for r in logs.first]
    # The current incarnation into the same target: its offsets 0-14 are not the first's, none skipped.
    run = restore_job([logs.cfg]).execute_in_process(run_config={"ops": {"restore_records": {"config": {
        "topic": logs.name, "target_topic": target}}}}, resources=resources)
    assert run.output_for_node("restore_records") == 15
    assert len(read_kafka(kafka, target, 0)) == 45


def test_compaction_compacts_the_current_incarnation_and_leaves_the_earlier_untouched(logs, kafka, spark_resource):
    before = logs.objects(1)
    run = compact_job([logs.cfg]).execute_in_process(
        run_config={"ops": {"compact_archive": {"config": {"topic": logs.name}}}},
        resources={"kafka": kafka, "swift": logs.swift, "spark": spark_resource})
    assert run.output_for_node("compact_archive") >= 2, "no range of incarnation 2 was merged"
    assert logs.objects(1) == before
    merged = [m for m in (logs.store.get_json(o["name"]) for o in logs.store.list(
        layout.partition_dir(incarnations.prefix_of(logs.prefix, 2), logs.name, 0) + "/")
        if o["name"].endswith(layout.MANIFEST)) if "replaces" in m]
    assert merged and all((m["incarnation"], m["topic_id"]) == (2, logs.id2) for m in merged), merged
    assert picked(reader.read_table(logs.store, logs.prefix, logs.name), *FIELDS) == \
        [{f: r[f] for f in FIELDS} for r in logs.second]
    assert picked(reader.read_table(logs.store, logs.prefix, logs.name, incarnation=1), *FIELDS) == \
        [{f: r[f] for f in FIELDS} for r in logs.first]
    assert logs.verify(sample=None).ok and logs.verify(incarnation=1).ok


# -- days: each incarnation's evaluated from its own archive; a day's records are both's --------

H, DAY = windows.HOUR_MS, windows.DAY_MS
RULES = Rules(length_ms=DAY, allowed_lateness_ms=0, idle_ms=10**12)


def test_a_day_holds_the_records_of_both_incarnations_once_the_earlier_is_closed(kafka, swift, spark, new_topic):
    name = new_topic()
    d1 = windows.start_of(int(time.time() * 1000), DAY) - 3 * DAY
    first = [d1 + 20 * H + i * H for i in range(20)]  # D1 20:00 to D2 15:00: D2 still open when the log ends
    second = [d1 + DAY + 16 * H + i * H for i in range(20)]  # D2 16:00 to D3 11:00
    cfg = TopicConfig(name, group=f"g-{uuid.uuid4().hex[:6]}")
    cfg2 = dataclasses.replace(cfg, prefix="incarnation=2")
    key1, key2 = windows.key(d1, DAY), windows.key(d1 + DAY, DAY)

    def values(what: str, stamps: list[int], lo: int, hi: int) -> list[bytes]:
        return [f"{what} {i}".encode() for i, ts in enumerate(stamps) if lo <= ts < hi]

    with swift.store() as store:
        prefix = store.params.prefix
        stamp(kafka, name, "first", first)
        archive_range(OffsetRange(name, 0, 0, 20), cfg, kafka, store, spark)
        done = evaluate.evaluate(store, prefix, name, RULES, {0: 20}, int(time.time() * 1000))
        assert [w.key for w in done] == [key1]  # D2 waits for more records of the first log: none ever come
        id1 = many.topic_ids(kafka, [name])[name]
        delete_topic(kafka, name)
        kafka.create_topic(name, 1)
        stamp(kafka, name, "second", second)
        incarnations.write(store, prefix, name, [Incarnation(1, id1), Incarnation(2, many.topic_ids(kafka, [name])[name])])
        archive_range(OffsetRange(name, 0, 0, 20), cfg2, kafka, store, spark)
        done = evaluate.evaluate(store, incarnations.prefix_of(prefix, 2), name, RULES, {0: 20}, int(time.time() * 1000))
        assert [w.key for w in done] == [key2]
        with pytest.raises(WindowNotComplete, match="in incarnation 1"):
            read_window(store, prefix, name, key2)
        assert key2 in [w.key for w in close(store, prefix, name, RULES, int(time.time() * 1000))]
        assert close(store, prefix, name, RULES, int(time.time() * 1000)) == []  # closed: nothing more
        assert read_window(store, prefix, name, key2)["value"].to_pylist() == \
            values("first", first, d1 + DAY, d1 + 2 * DAY) + values("second", second, d1 + DAY, d1 + 2 * DAY)
        assert read_window(store, prefix, name, key1)["value"].to_pylist() == values("first", first, d1, d1 + DAY)
        assert read_window(store, prefix, name, key2, incarnation=2)["value"].to_pylist() == \
            values("second", second, d1 + DAY, d1 + 2 * DAY)


def stamp(kafka, topic: str, what: str, stamps: list[int]) -> None:
    p = kafka.producer()
    for i, ts in enumerate(stamps):
        p.produce(topic, key=b"k", value=f"{what} {i}".encode(), partition=0, timestamp=ts)
    assert p.flush(30) == 0
