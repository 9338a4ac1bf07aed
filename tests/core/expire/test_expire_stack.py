"""Expiry by age on the real stack (Kafka, Swift, Spark): records stamped before the retention leave the archive.

Each test produces records with explicit timestamps (a year old, and now; not monotonic), archives
them with the product's own archive_range, runs expiry (core/expire/run.py) and checks every object
in the container, the reader, the verifier's full comparison with Kafka, the monitor and a restore.
"""

from __future__ import annotations

import time
import uuid

import pytest
from helpers import killed_script, read_kafka, table_rows

from matos_dagster.assets.windows import rules
from matos_dagster.core import reader
from matos_dagster.core.days import evaluate
from matos_dagster.core.archive.range_run import Overlaps, archive_range
from matos_dagster.core.compact.run import compact_topic
from matos_dagster.core.expire.run import expire_topics
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode
from matos_dagster.core.restore.plan import Request as RestoreRequest
from matos_dagster.core.restore.run import restore
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import EXPIRED, RANGE, PartitionArchive
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import verify_topic

DAY = 86_400_000
NOW = int(time.time() * 1000)
RANGE_SIZE = 10
# Each range's records' ages in days, in offset order: a range a year old, a new one, an old one
# between new ones (timestamps are not monotonic: a producer replaying old events), a range half old
# and half new, a new one.
OLD, NEW, OLDER, HALF = [400] * 10, [0] * 10, [380] * 10, [370] * 5 + [0] * 5
AGES = [OLD, NEW, OLDER, HALF, NEW]
KEPT = list(range(10, 20)) + list(range(35, 50))


def config(topic: str, **kw) -> TopicConfig:
    kw.setdefault("archive_retention_days", 365.0)
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", **kw)


def topic(new_topic) -> str:
    return new_topic(**{"retention.ms": "-1"})  # Kafka keeps the year-old records: the verifier compares


def load(kafka, name: str, ages: list[list[int]], first: int = 0) -> None:
    """Records `first`, `first + 1`, ... stamped `ages` days ago, in that order, by one producer."""
    p = kafka.producer()
    for i, age in enumerate((a for block in ages for a in block), first):
        p.produce(name, key=f"k{i}".encode(), value=f"value {i} ".encode() * 8, partition=0,
                  timestamp=NOW - age * DAY + i)
    assert p.flush(30) == 0, "records left unsent"


def prefix(store, cfg) -> str:
    return layout.join(store.params.prefix, cfg.prefix)


def archive(kafka, store, spark, cfg, start: int, end: int) -> None:
    for a in range(start, end, RANGE_SIZE):
        archive_range(OffsetRange(cfg.name, 0, a, min(a + RANGE_SIZE, end)), cfg, kafka, store, spark)


def entries(store, cfg) -> list[tuple[int, int, str]]:
    return [(e.start, e.end, e.kind) for e in PartitionArchive(store, prefix(store, cfg), cfg.name, 0).all()]


def data_objects(store, cfg) -> list[str]:
    base = layout.topic_dir(prefix(store, cfg), cfg.name) + "/"
    return [o["name"] for o in store.list(base) if not layout.is_bookkeeping(o["name"])
            and any(o["name"].endswith(ext) for ext in layout.EXTENSIONS.values())]


def assert_expired(kafka, store, cfg, kept: list[int], cutoff_ms: int) -> None:
    """No object holds a record stamped before the cutoff; the reader gives Kafka's kept records; verify
    (every record compared with Kafka) and the monitor are clean: the expired spans are neither gaps nor lost."""
    for name in data_objects(store, cfg):
        stamps = decode(store.get(name), cfg.format)["timestamp"].cast("int64").to_pylist()
        assert min(stamps) >= cutoff_ms, name
    want = [r for r in read_kafka(kafka, cfg.name, 0) if r["offset"] in set(kept)]
    got = table_rows(reader.read_table(store, prefix(store, cfg), cfg.name, partitions=[0]))
    assert [(r["offset"], r["value"], r["timestamp"]) for r in got] == \
        [(r["offset"], r["value"], r["timestamp"]) for r in want]
    report = verify_topic(kafka, store, prefix(store, cfg), cfg, None)
    assert report.ok, report.render()
    assert report.compared == len(kept) and not report.loss
    end = kafka.watermarks(cfg.name, [0])[0][1]
    a = PartitionArchive(store, prefix(store, cfg), cfg.name, 0)
    judged = monitor.evaluate_partition(cfg, 0, 0, end, end, monitor.read_entries(a, None, end), None, [],
                                        time.time(), None)
    assert (judged.status, judged.ahwm, judged.gaps, judged.lost) == (monitor.OK, end, [], []), judged.reasons


def test_a_year_old_archive_keeps_only_what_is_younger_than_its_retention_and_an_expired_span_between_kept_ranges_is_no_gap(
        kafka, swift, spark, new_topic):
    cfg = config(topic(new_topic))
    load(kafka, cfg.name, AGES)
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 50)

        done = expire_topics(store, [cfg], run_id="run-1")

        assert entries(store, cfg) == [(0, 10, EXPIRED), (10, 20, RANGE), (20, 30, EXPIRED), (30, 40, RANGE),
                                       (40, 50, RANGE)]
        assert done.records == 25
        partial = store.get_json(layout.manifest_name(prefix(store, cfg), OffsetRange(cfg.name, 0, 30, 40)))
        assert (partial["version"], partial["expired"], partial["records"]) == (4, [[30, 35]], 5)
        marker = store.get_json(layout.expired_name(prefix(store, cfg), OffsetRange(cfg.name, 0, 20, 30)))
        assert (marker["kind"], marker["records"], marker["retention_days"]) == ("expired", 10, 365.0)
        # The run's record, in the archive: per partition what went.
        record = store.get_json(done.record_name)
        part = record["topics"][cfg.name]["partitions"]["0"]
        assert (part["records_expired"], part["expired"]) == (25, [[0, 10], [20, 35]])
        cutoff = record["topics"][cfg.name]["stamped_before"]
        assert_expired(kafka, store, cfg, KEPT, cutoff)
        # A restore produces the kept records, in order.
        target = new_topic()
        restored = restore(RestoreRequest(cfg.name, prefix(store, cfg), target=target), kafka, store, spark)
        assert restored.records == len(KEPT)
        assert [r["value"] for r in read_kafka(kafka, target, 0)] == \
            [r["value"] for r in read_kafka(kafka, cfg.name, 0) if r["offset"] in set(KEPT)]
        # The days read past the expired spans: none of their offsets lost.
        evaluate.evaluate(store, prefix(store, cfg), cfg.name, rules(cfg), {0: 50}, int(time.time() * 1000))
        state = evaluate.state_from_json(store.get_json(layout.event_time_state_name(prefix(store, cfg), cfg.name)))
        assert (state.partitions[0].next_offset, state.partitions[0].lost) == (50, 0)
        # An expired span is not archived again (its records are older than the retention).
        with pytest.raises(Overlaps, match="expired by age"):
            archive_range(OffsetRange(cfg.name, 0, 20, 30), cfg, kafka, store, spark)


def test_compaction_of_a_half_expired_range_keeps_its_expired_offsets_expired(kafka, swift, spark, new_topic):
    # One group: the half-expired range (375 record bytes left) and the new one after it (750).
    cfg = config(topic(new_topic), compact_bytes=1000, compact_min_age_s=0.0)
    load(kafka, cfg.name, [HALF, NEW])
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 20)
        done = expire_topics(store, [cfg])

        compact_topic(cfg, kafka.committed(cfg.name, [0], cfg.group), store, spark)

        merged = store.get_json(layout.manifest_name(prefix(store, cfg), OffsetRange(cfg.name, 0, 0, 20)))
        assert (merged["expired"], merged["records"]) == ([[0, 5]], 15)
        assert_expired(kafka, store, cfg, list(range(5, 20)),
                       store.get_json(done.record_name)["topics"][cfg.name]["stamped_before"])


class Counting:
    """The store, counting the objects read (GET) by name."""

    def __init__(self, store):
        self._store, self.read = store, []

    def get(self, name, *a, **kw):
        self.read.append(name)
        return self._store.get(name, *a, **kw)

    def get_json(self, name, *a, **kw):
        self.read.append(name)
        return self._store.get_json(name, *a, **kw)

    def __getattr__(self, k):
        return getattr(self._store, k)


def test_the_expire_job_shows_the_days_before_the_cutoff_as_expired_and_its_next_run_reads_only_the_ranges_archived_since_and_those_come_due(
        kafka, swift, spark, new_topic, tmp_path):
    from dagster import DagsterEventType, DagsterInstance

    from matos_dagster.core.days import windows
    from matos_dagster.core.topic_set import TopicSet
    from matos_dagster.jobs.expire import expire_job

    old_day = windows.key(windows.start_of(NOW - 400 * DAY, DAY), DAY)
    cfg = config(topic(new_topic), windows_start=old_day)
    load(kafka, cfg.name, [OLD, NEW, HALF])
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 30)
        with DagsterInstance.local_temp(str(tmp_path)) as instance:
            keeps = config(topic(new_topic), archive_retention_days=None)  # no retention: not expired
            result = expire_job(TopicSet([cfg, keeps])).execute_in_process(
                run_config={"ops": {"expire_archive": {"config": {}}}}, instance=instance,
                resources={"kafka": kafka, "swift": swift})
            assert result.success
            assert result.output_for_node("expire_archive") == 15
            days = [e.event_specific_data.materialization for e in result.all_events
                    if e.event_type == DagsterEventType.ASSET_MATERIALIZATION]
        assert entries(store, cfg) == [(0, 10, EXPIRED), (10, 20, RANGE), (20, 30, RANGE)]
        # Every day from the first window up to the cutoff (35 days after the oldest records' day), expired.
        assert days[0].partition == old_day and len(days) == 400 - 365
        assert all(d.metadata["expired"].value is True for d in days)
        assert {d.asset_key.path[-1] for d in days} == {cfg.windows_asset_name}

        load(kafka, cfg.name, [NEW], first=30)
        archive(kafka, store, spark, cfg, 30, 40)
        counting = Counting(store)
        again = expire_topics(counting, [cfg])

        manifests = [n for n in counting.read if n.endswith(layout.MANIFEST)]
        # The new range only: neither the expired span below nor the kept ranges, which are not due yet.
        assert manifests == [layout.manifest_name(prefix(store, cfg), OffsetRange(cfg.name, 0, 30, 40))]
        assert again.records == 0 and not [n for n in counting.read if n.endswith(tuple(layout.EXTENSIONS.values()))]
        # A year on, the kept ranges are due: read again (their oldest record says so), and expired.
        later = expire_topics(store, [cfg], now=lambda: NOW / 1000 + 366 * 86400)
        assert later.records == 25
        assert [k for *_, k in entries(store, cfg)] == [EXPIRED] * 4
        assert data_objects(store, cfg) == []
        report = verify_topic(kafka, store, prefix(store, cfg), cfg, None)
        assert report.ok and not report.loss, report.render()


_KILLED = """
import json, os, sys
from matos_dagster.core.expire.run import expire_topics
from matos_dagster.core.topics import TopicConfig
from matos_dagster.resources import SwiftResource

a = json.loads(sys.argv[1])
swift = SwiftResource(auth_url=a["auth_url"], user=a["user"], key=os.environ["MATOS_SWIFT_KEY"],
                      container=a["container"], prefix="kafka", retries=2)
with swift.store() as store:
    expire_topics(store, [TopicConfig(name=a["topic"], archive_retention_days=365.0)])
print("not killed")
"""


def killed(swift, topic: str, point: str) -> None:
    killed_script(_KILLED, {"auth_url": swift.auth_url, "user": swift.user, "container": swift.container,
                            "topic": topic}, swift, point)


@pytest.mark.parametrize("point", [
    "expire-after-marker",  # the default suite's: a marker beside the manifest and every object
    pytest.param("expire-after-objects", marks=pytest.mark.slow),
    pytest.param("expire-after-replacements", marks=pytest.mark.slow),
    pytest.param("expire-after-manifest", marks=pytest.mark.slow),
    pytest.param("expire-after-record", marks=pytest.mark.slow),
])
def test_an_expiry_killed_at_a_step_then_run_again_ends_as_one_that_was_not(kafka, swift, spark, new_topic, point):
    cfg = config(topic(new_topic))
    load(kafka, cfg.name, [OLD, HALF])
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 20)
        killed(swift, cfg.name, point)
        done = expire_topics(store, [cfg])
        assert entries(store, cfg) == [(0, 10, EXPIRED), (10, 20, RANGE)]
        folder = layout.range_dir(prefix(store, cfg), OffsetRange(cfg.name, 0, 0, 10)) + "/"
        assert [o["name"].rpartition("/")[2] for o in store.list(folder)] == [layout.EXPIRED]
        for f in PartitionArchive(store, prefix(store, cfg), cfg.name, 0).folders_from(0):  # no stray left
            doc = store.get_json(layout.manifest_name(prefix(store, cfg), OffsetRange(cfg.name, 0, f.start, f.end)))
            if doc is not None:
                assert {n for n in f.names if not layout.is_bookkeeping(n)} == {o["name"] for o in doc["objects"]}
        assert_expired(kafka, store, cfg, list(range(15, 20)),
                       store.get_json(done.record_name)["topics"][cfg.name]["stamped_before"])



def test_the_iceberg_table_after_an_expiry_holds_only_the_kept_records_in_every_snapshot_kept_and_for_duckdb(
        kafka, swift, spark, new_topic, monkeypatch, tmp_path):
    from matos_dagster.core.iceberg.queries import duckdb_connection
    from matos_dagster.core.iceberg.table import Tables

    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    cfg = config(topic(new_topic))
    load(kafka, cfg.name, AGES)
    with swift.store() as store:
        archive(kafka, store, spark, cfg, 0, 50)
        tables = Tables(store)
        assert sorted(tables.table(cfg.name, create=False).scan().to_arrow()["offset"].to_pylist()) == list(range(50))

        t = tables.table(cfg.name, create=False)
        expire_topics(store, [cfg], run_id="run-1")

        t = tables.table(cfg.name, create=False)
        # The current snapshot and every one kept: the kept records only (no expired record, no deleted object).
        for s in t.snapshots():
            assert sorted(t.scan(snapshot_id=s.snapshot_id).to_arrow()["offset"].to_pylist()) == KEPT, s.snapshot_id
        con = duckdb_connection(tables.s3)
        try:
            got = sorted(o for (o,) in con.execute(f"SELECT \"offset\" FROM iceberg_scan('{t.metadata_location}')").fetchall())
        finally:
            con.close()
        assert got == KEPT
        assert tables.check(prefix(store, cfg), cfg.name).ok
        # Run again: nothing more to do, no commit.
        snapshot = t.current_snapshot().snapshot_id
        expire_topics(store, [cfg], run_id="run-2")
        assert tables.table(cfg.name, create=False).current_snapshot().snapshot_id == snapshot
