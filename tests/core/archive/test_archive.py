"""Archiving ranges exactly once, on the real Kafka, Swift and Spark.

Each test ends with `check_archive`: every offset in [log start, committed) is in exactly
one manifest, and every object listed is in Swift with its size, md5 and record count.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import check_archive, delete_records, killed_run, manifests, produce, read_archive, read_kafka
from samples import awkward_rows, config

from matos_dagster.core.archive.range_run import DataLoss, RangeRefused, archive_range
from matos_dagster.core.kafka.errors import UnknownPartition, UnknownTopic
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.manifest import ManifestError
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify import MISSING, SIZE, verify_topic


def test_archived_records_equal_kafkas_field_by_field_over_several_partitions(kafka, swift, spark, new_topic):
    topic = new_topic(partitions=3)
    produce(kafka, topic, awkward_rows(900, 3))
    cfg = config(topic, slice_records=70, object_bytes=4096)  # many slices, many objects
    with swift.store() as store:
        for p in range(3):
            high = kafka.watermarks(topic, [p])[p][1]
            done = archive_range(OffsetRange(topic, p, 0, high), cfg, kafka, store, spark)
            assert done.manifest["records"] == 300
            assert len(done.manifest["objects"]) > 1
            assert read_archive(store, done.manifest) == read_kafka(kafka, topic, p)
            assert done.committed_after == high
        committed = check_archive(kafka, store, topic, cfg.group)
    assert committed == {0: 300, 1: 300, 2: 300}


def test_jsonl_keeps_every_field_too(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, awkward_rows(50, 1))
    cfg = config(topic, format="jsonl")
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 50), cfg, kafka, store, spark)
        assert done.manifest["objects"][0]["name"].endswith(".jsonl.gz")
        assert read_archive(store, done.manifest) == read_kafka(kafka, topic, 0)
        check_archive(kafka, store, topic, cfg.group)


def test_the_layout_and_manifest_are_the_documented_contract(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 10)
    cfg = config(topic, slice_records=4)
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 10), cfg, kafka, store, spark)
        d = f"kafka/topic={topic}/partition=0/00000000000000000000-00000000000000000010"
        assert done.manifest_name == f"{d}/_manifest.json"
        assert [o["name"] for o in done.manifest["objects"]] == [
            f"{d}/part-00000000000000000000.parquet",
            f"{d}/part-00000000000000000004.parquet",
            f"{d}/part-00000000000000000008.parquet",
        ]
        m = store.get_json(done.manifest_name)
        assert {k: m[k] for k in ("topic", "partition", "start", "end", "records", "format")} == {
            "topic": topic, "partition": 0, "start": 0, "end": 10, "records": 10, "format": "parquet"}
        assert set(m["objects"][0]) >= {"name", "records", "bytes", "md5", "first_offset", "last_offset"}


def test_rearchiving_an_archived_range_only_verifies_it_and_never_moves_the_offset_back(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, awkward_rows(200, 1))
    cfg = config(topic, slice_records=50)
    with swift.store() as store:
        first = archive_range(OffsetRange(topic, 0, 0, 100), cfg, kafka, store, spark)
        archive_range(OffsetRange(topic, 0, 100, 200), cfg, kafka, store, spark)
        before = {o["name"]: store.get(o["name"]) for o in first.manifest["objects"]}
        manifest_before = store.get(first.manifest_name)

        again = archive_range(OffsetRange(topic, 0, 0, 100), cfg, kafka, store, spark)

        assert again.already_archived and again.records_written == 0  # tests/end_to_end/test_one_run_per_range.py: no PUT
        assert {o["name"]: store.get(o["name"]) for o in again.manifest["objects"]} == before
        assert store.get(first.manifest_name) == manifest_before
        assert again.committed_after == 200  # not back to 100
        assert kafka.committed(topic, [0], cfg.group) == {0: 200}
        check_archive(kafka, store, topic, cfg.group)


def transactions(kafka, topic: str, outcomes: list[bool]) -> None:
    """Five records a transaction, committed or aborted in turn, each followed by its marker."""
    tx = kafka.producer(**{"transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    tx.init_transactions(30)
    for i, commit in enumerate(outcomes):
        tx.begin_transaction()
        for j in range(5):
            tx.produce(topic, key=f"{i}-{j}".encode(), value=b"committed" if commit else b"aborted", partition=0)
        tx.flush(30)  # else abort_transaction purges the records before the broker sees them
        tx.commit_transaction(30) if commit else tx.abort_transaction(30)


def test_aborted_transactions_are_not_archived(kafka, swift, spark, new_topic):
    topic = new_topic()
    transactions(kafka, topic, [True, False, True, False])
    # Offsets: 0-4 committed, 5 marker, 6-10 aborted, 11 marker, 12-16 committed, 17 marker,
    # 18-22 aborted, 23 marker: the log ends in records nobody may read.
    assert kafka.watermarks(topic, [0])[0][1] == 24
    cfg = config(topic, slice_records=7)
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 12), cfg, kafka, store, spark)
        assert [r["offset"] for r in read_archive(store, done.manifest)] == [0, 1, 2, 3, 4]
        tail = archive_range(OffsetRange(topic, 0, 12, 24), cfg, kafka, store, spark)
        assert [r["offset"] for r in read_archive(store, tail.manifest)] == [12, 13, 14, 15, 16]
        assert tail.committed_after == 24
        check_archive(kafka, store, topic, cfg.group)


def test_a_range_of_only_markers_and_aborted_records_archives_as_an_empty_range(kafka, swift, spark, new_topic):
    topic = new_topic()
    transactions(kafka, topic, [True, False])  # 0-4 committed, 5 marker, 6-10 aborted, 11 marker
    cfg = config(topic)
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 6), cfg, kafka, store, spark)
        empty = archive_range(OffsetRange(topic, 0, 6, 12), cfg, kafka, store, spark)
        assert empty.manifest["records"] == 0 and empty.manifest["objects"] == []
        assert store.get_json(empty.manifest_name)["records"] == 0
        assert empty.committed_after == 12
        check_archive(kafka, store, topic, cfg.group)


def test_a_compacted_topic_archives_exactly_its_surviving_records(kafka, swift, spark, new_topic):
    topic = new_topic(**{"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                         "delete.retention.ms": "100", "min.compaction.lag.ms": "0"})
    for round_ in range(3):
        produce(kafka, topic, [(f"k{i}".encode(), f"r{round_}".encode(), []) for i in range(20)])
        time.sleep(0.3)  # let each round roll a segment
    deadline = time.monotonic() + 90
    while True:
        survivors = read_kafka(kafka, topic, 0)
        if len(survivors) < 60 or time.monotonic() > deadline:
            break
        produce(kafka, topic, [(b"roll", b"x", [])])  # a new record rolls the active segment
        time.sleep(1)
    assert len(survivors) < 60, "the broker did not compact the topic within 90s"
    high = kafka.watermarks(topic, [0])[0][1]
    cfg = config(topic, slice_records=9)
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, high), cfg, kafka, store, spark)
        assert read_archive(store, done.manifest) == read_kafka(kafka, topic, 0)
        check_archive(kafka, store, topic, cfg.group)


def test_a_5_mb_record_archives_intact(kafka, swift, spark, new_topic):
    topic = new_topic(**{"max.message.bytes": str(8 * 1024**2)})
    big = bytes(range(256)) * (5 * 1024**2 // 256)
    produce(kafka, topic, [(b"small", b"1", []), (b"big", big, [("h", b"x")]), (b"small", b"2", [])],
            **{"message.max.bytes": 8 * 1024**2})
    cfg = config(topic, object_bytes=1024**2, max_record_bytes=1024**2)
    with swift.store() as store, pytest.raises(Exception, match="above the topic's max_record_bytes"):
        archive_range(OffsetRange(topic, 0, 0, 3), cfg, kafka, store, spark)
    cfg = config(topic, object_bytes=8 * 1024**2, max_record_bytes=6 * 1024**2)
    with swift.store() as store:
        assert not manifests(store, topic), "a failed range must leave no manifest"
        done = archive_range(OffsetRange(topic, 0, 0, 3), cfg, kafka, store, spark)
        rows = read_archive(store, done.manifest)
        assert rows[1]["value"] == big and rows == read_kafka(kafka, topic, 0)
        check_archive(kafka, store, topic, cfg.group)


# -- refusals: a clear error, no manifest, no committed offset ------------------------------


def _refused(kafka, swift, spark, r, cfg, error, message):
    with swift.store() as store:
        with pytest.raises(error, match=message):
            archive_range(r, cfg, kafka, store, spark)
        assert not manifests(store, r.topic)
    if error not in (UnknownTopic, UnknownPartition):
        assert kafka.committed(r.topic, [r.partition], cfg.group)[r.partition] is None


def test_a_range_past_the_log_end_is_refused(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 5)
    _refused(kafka, swift, spark, OffsetRange(topic, 0, 0, 6), config(topic), RangeRefused, "past the log end offset 5")


def test_an_unknown_topic_or_partition_is_refused(kafka, swift, spark, new_topic):
    topic = new_topic()
    _refused(kafka, swift, spark, OffsetRange("no-such-topic", 0, 0, 1), config("no-such-topic"), UnknownTopic, "does not exist")
    _refused(kafka, swift, spark, OffsetRange(topic, 7, 0, 1), config(topic), UnknownPartition, "has no partition 7")


def test_records_deleted_before_archiving_are_reported_as_loss_naming_the_offsets(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 10)
    delete_records(kafka, topic, 0, 4)
    assert kafka.watermarks(topic, [0])[0][0] == 4
    _refused(kafka, swift, spark, OffsetRange(topic, 0, 0, 10), config(topic), DataLoss, r"offsets \[0, 4\).*lost")


def test_an_archived_range_whose_records_expired_is_verified_not_failed(kafka, swift, spark, new_topic):
    """An archived and committed range rerun after its records expired is verified, not refused.

    (Its offset is committed, so the rerun returns as "already archived": a range whose run died
    before its commit is the next test.)"""
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 10)
    cfg = config(topic)
    r = OffsetRange(topic, 0, 0, 10)
    with swift.store() as store:
        archive_range(r, cfg, kafka, store, spark)
        delete_records(kafka, topic, 0, 10)
        again = archive_range(r, cfg, kafka, store, spark)
        assert again.verified_only and again.manifest["records"] == 10
        check_archive(kafka, store, topic, cfg.group)


def audit(kafka, store, cfg: TopicConfig, sample: int | None = 0):
    """The verifier (`matos verify --audit-all`) over the topic's whole archive."""
    return verify_topic(kafka, store, layout.join(store.params.prefix, cfg.prefix), cfg, sample)


def no_spark():
    """What the tests pass as `spark` where the archive must be verified only: no Spark task may run."""
    raise AssertionError("archive_range asked for Spark: it was about to read the range from Kafka again")


def test_a_range_killed_after_its_manifest_whose_records_then_expired_is_verified_and_committed(
        kafka, kafka_server, swift, spark, connect_server, new_topic):
    """A run killed between its manifest and its offset commit, then retention deleted the range's
    records: the rerun finds the manifest in Swift, the group's offset below the range and the
    records gone. The range is archived, so this is no loss: the rerun verifies the objects
    against the manifest, runs no Spark task, and commits past the range. While an object is
    damaged it refuses instead (nothing can rewrite it now) and commits nothing."""
    topic = new_topic()
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode() * 20, []) for i in range(30)))
    cfg = config(topic, slice_records=5)
    first, second = OffsetRange(topic, 0, 0, 10), OffsetRange(topic, 0, 10, 20)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        archive_range(first, cfg, kafka, store, spark)
        killed_run(second, cfg, kafka_server, swift, connect_server, "after-manifest")
        doc = store.get_json(layout.manifest_name(prefix, second))
        assert doc is not None and doc["records"] == 10 and len(doc["objects"]) == 2
        assert kafka.committed(topic, [0], cfg.group) == {0: 10}  # killed before its commit
        # Retention up to the range's end (not past it: records after it, unarchived, would be a real loss).
        delete_records(kafka, topic, 0, second.end)
        assert kafka.watermarks(topic, [0])[0][0] == 20

        # An object gone: the manifest can no longer vouch for the range, and Kafka cannot refill it.
        victim = doc["objects"][1]["name"]
        kept = store.get(victim)
        store.delete(victim)
        with pytest.raises(ManifestError, match=re.escape(victim)):
            archive_range(second, cfg, kafka, store, no_spark)
        assert kafka.committed(topic, [0], cfg.group) == {0: 10}
        store.put(victim, kept)  # put back as it was archived

        again = archive_range(second, cfg, kafka, store, no_spark)
        assert again.verified_only and again.already_archived and again.records_written == 0
        assert again.manifest == doc and store.get_json(layout.manifest_name(prefix, second)) == doc
        assert (again.committed_before, again.committed_after) == (10, 20)
        assert kafka.committed(topic, [0], cfg.group) == {0: 20}
        report = audit(kafka, store, cfg)
        assert report.ok, report.render()
        assert check_archive(kafka, store, topic, cfg.group) == {0: 20}


def test_an_archived_committed_range_with_a_damaged_or_missing_object_is_rewritten_from_kafka_to_the_same_bytes(
        kafka, swift, spark, new_topic):
    """Rerun while Kafka still has its records, an archived and committed range whose objects do
    not match its manifest (one deleted, one overwritten) is archived again: every object comes
    back byte for byte, the manifest is the same, the offset stays where it was."""
    topic = new_topic()
    produce(kafka, topic, awkward_rows(30, 1))
    cfg = config(topic, slice_records=10)
    r = OffsetRange(topic, 0, 0, 30)
    with swift.store() as store:
        done = archive_range(r, cfg, kafka, store, spark)
        names = [o["name"] for o in done.manifest["objects"]]
        assert len(names) == 3
        archived = {n: store.get(n) for n in names}
        manifest_bytes = store.get(done.manifest_name)
        store.delete(names[0])
        store.put(names[1], b"not what was archived")
        damaged = audit(kafka, store, cfg)
        assert sorted((p.kind, p.name) for p in damaged.problems) == sorted([(MISSING, names[0]), (SIZE, names[1])])

        again = archive_range(r, cfg, kafka, store, spark)
        assert not again.verified_only and not again.already_archived
        assert again.slices == 3 and again.records_written == 30
        assert {n: store.get(n) for n in names} == archived
        assert store.get(done.manifest_name) == manifest_bytes
        assert (again.committed_before, again.committed_after) == (30, 30)
        assert kafka.committed(topic, [0], cfg.group) == {0: 30}
        report = audit(kafka, store, cfg, sample=None)  # and every record compared with Kafka's
        assert report.ok and report.compared == 30, report.render()
        check_archive(kafka, store, topic, cfg.group)


def test_an_archived_committed_range_whose_object_is_gone_with_its_records_fails_loudly_and_keeps_the_offset(
        kafka, swift, spark, new_topic):
    """The same damage once retention deleted the records too: nothing can rewrite the object, so
    the rerun fails naming it (no Spark task, no "verified"), the committed offset does not move,
    and the verifier names the object."""
    topic = new_topic()
    produce(kafka, topic, awkward_rows(30, 1))
    cfg = config(topic, slice_records=10)
    r = OffsetRange(topic, 0, 0, 20)
    with swift.store() as store:
        done = archive_range(r, cfg, kafka, store, spark)
        victim = done.manifest["objects"][0]["name"]
        store.delete(victim)
        delete_records(kafka, topic, 0, r.end)

        with pytest.raises(ManifestError, match=rf"object {re.escape(victim)} of the manifest is missing"):
            archive_range(r, cfg, kafka, store, no_spark)
        assert kafka.committed(topic, [0], cfg.group) == {0: 20}
        assert store.get(victim) is None  # nothing written in its place
        report = audit(kafka, store, cfg)
        assert [(p.kind, p.name) for p in report.problems] == [(MISSING, victim)], report.render()
        assert victim in report.render()


def test_a_range_overlapping_an_archived_one_is_refused(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 10)
    cfg = config(topic)
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 6), cfg, kafka, store, spark)
        with pytest.raises(RangeRefused, match=r"overlaps the archived range \[0, 6\)"):
            archive_range(OffsetRange(topic, 0, 4, 10), cfg, kafka, store, spark)
        assert kafka.committed(topic, [0], cfg.group) == {0: 6}
        check_archive(kafka, store, topic, cfg.group)


def test_the_offset_is_committed_only_to_the_end_of_the_contiguous_archived_prefix(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 30)
    cfg = config(topic)
    with swift.store() as store:
        later = archive_range(OffsetRange(topic, 0, 10, 20), cfg, kafka, store, spark)
        assert later.committed_after is None  # [0, 10) is not archived yet
        first = archive_range(OffsetRange(topic, 0, 0, 10), cfg, kafka, store, spark)
        assert first.committed_after == 20  # both ranges now form one prefix
        check_archive(kafka, store, topic, cfg.group)


# How long a run held at a meeting point waits for the other run before the test fails.
HOLD_S = 180


def test_two_runs_of_the_same_range_at_once_cannot_corrupt_the_archive(kafka, swift, spark, new_topic):
    """Two runs of one range at once, each held at its manifest until the other is there too: both
    have written every object of the range and neither has written the manifest, a moment no single
    run goes through. Then both write the manifest, remove strays and commit. The archive is the one
    a single run leaves: objects are named after the range, not the run, so what one run's stray
    removal deletes is never what the other's manifest lists."""
    topic = new_topic()
    produce(kafka, topic, awkward_rows(600, 1))
    cfg = config(topic, slice_records=100)
    r = OffsetRange(topic, 0, 0, 600)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
    name, folder = layout.manifest_name(prefix, r), layout.range_dir(prefix, r) + "/"
    both_held: dict = {}

    def look():  # by the last run to arrive, while both are held: what Swift holds then
        with swift.store() as store:
            both_held.update(at=time.monotonic(), manifest=store.get(name),
                             objects=sorted(i["name"] for i in store.list(folder)))

    meeting = threading.Barrier(2, action=look, timeout=HOLD_S)

    def run():
        with swift.store() as store:
            put_json = store.put_json

            def held(n, doc):
                if n == name:
                    meeting.wait()
                return put_json(n, doc)

            store.put_json = held
            t0 = time.monotonic()
            try:
                return archive_range(r, cfg, kafka, store, spark), t0, time.monotonic()
            except BaseException:
                meeting.abort()  # the other run waits no longer: this one will never come
                raise

    with ThreadPoolExecutor(2) as pool:
        (a, a0, a1), (b, b0, b1) = [f.result() for f in [pool.submit(run), pool.submit(run)]]
    # The race happened: both runs read the range from Kafka (neither found it archived), and both
    # were under way, objects written and manifest not, at one moment.
    assert a.records_written == b.records_written == 600 and a.slices == b.slices == 6
    assert max(a0, b0) < both_held["at"] < min(a1, b1)
    assert both_held["manifest"] is None and len(both_held["objects"]) == 6, both_held
    assert a.manifest == b.manifest
    with swift.store() as store:
        listed = sorted(i["name"] for i in store.list(folder))
        assert listed == sorted([o["name"] for o in a.manifest["objects"]] + [name])
        assert read_archive(store, a.manifest) == read_kafka(kafka, topic, 0)
        assert check_archive(kafka, store, topic, cfg.group) == {0: 600}


# -- bounded work at any history (issue 13.1) -----------------------------------------------


def synthetic_history(store, prefix: str, topic: str, n: int) -> None:
    """`n` one-offset ranges [i, i+1) archived below offset n: manifests written straight to Swift."""
    for i in range(n):
        r = OffsetRange(topic, 0, i, i + 1)
        store.put_json(layout.manifest_name(prefix, r), {"topic": topic, "partition": 0, "start": i, "end": i + 1,
                                                           "format": "parquet", "records": 0, "objects": []})


class Listed:
    """Swift listing requests and the names they returned, counted around the real Store.list_page."""

    def __init__(self, monkeypatch):
        from matos_dagster.core.swift.store import Store

        self.requests = self.names = 0
        real = Store.list_page

        def counted(store, *args, **kwargs):
            items = real(store, *args, **kwargs)
            self.requests += 1
            self.names += len(items)
            return items

        monkeypatch.setattr(Store, "list_page", counted)

    def since(self, mark: tuple[int, int]) -> tuple[int, int]:
        return self.requests - mark[0], self.names - mark[1]

    def mark(self) -> tuple[int, int]:
        return self.requests, self.names


def test_an_archive_run_lists_as_much_with_200_ranges_archived_below_it_as_with_20(
        kafka, swift, spark, new_topic, monkeypatch):
    listed = Listed(monkeypatch)
    per_run = {}
    for n in (20, 200):
        topic = new_topic()
        produce(kafka, topic, [(b"k", b"v", [])] * (n + 10))
        cfg = config(topic)
        with swift.store() as store:
            prefix = layout.join(store.params.prefix, cfg.prefix)
            synthetic_history(store, prefix, topic, n)
            kafka.commit(topic, {0: n}, cfg.group)
            mark = listed.mark()
            done = archive_range(OffsetRange(topic, 0, n, n + 10), cfg, kafka, store, spark)
            per_run[n] = listed.since(mark)  # (requests, names returned)
            assert done.committed_after == n + 10
    # The overlap check, the stray check and the commit read from the committed offset on only:
    # the same requests and the same names, whatever lies below (a full listing returned every name).
    print(f"archive run (listing requests, names listed) by ranges below: {per_run}")
    assert per_run[20] == per_run[200], per_run


# -- stray removal, and different ranges racing to commit (issue 20.6) ------------------------


def test_objects_of_an_earlier_attempt_with_other_settings_are_removed_when_the_range_is_archived(
        kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, awkward_rows(100, 1))
    r = OffsetRange(topic, 0, 0, 100)
    with swift.store() as store:
        # An earlier attempt cut the range in slices of 30 and died before its manifest.
        earlier = archive_range(r, config(topic, slice_records=30), kafka, store, spark)
        store.delete(earlier.manifest_name)
        old = sorted(o["name"] for o in earlier.manifest["objects"])
        assert len(old) == 4
        cfg = config(topic, slice_records=50)  # now: slices of 50, objects at 0 and 50
        done = archive_range(r, cfg, kafka, store, spark)
        kept = sorted(o["name"] for o in done.manifest["objects"])
        strays = sorted(set(old) - set(kept))
        assert len(kept) == 2 and len(strays) == 3  # part-...30, 60, 90 were the earlier attempt's
        assert done.notes == [f"removed {n}: left by an earlier attempt, not in the manifest" for n in strays]
        folder = layout.range_dir(layout.join(store.params.prefix, cfg.prefix), r) + "/"
        assert sorted(i["name"] for i in store.list(folder)) == sorted(kept + [done.manifest_name])
        assert read_archive(store, done.manifest) == read_kafka(kafka, topic, 0)
        check_archive(kafka, store, topic, cfg.group)


def test_two_different_ranges_archived_at_once_both_finish_and_the_offset_ends_past_both(
        kafka, swift, spark, new_topic):
    """Two neighbouring ranges archived at once, their offset commits crossed as Kafka allows (its
    commit is not compare-and-set): the first range's run computes its commit, 300, before the
    second's manifest exists, and that commit lands only after the second run committed 600 and
    ended. The offset is back at 300 for a moment; the first run reads it back, finds the archive
    now reaching 600, and commits that again: the offset ends past both ranges."""
    topic = new_topic()
    produce(kafka, topic, awkward_rows(600, 1))
    cfg = config(topic, slice_records=100)
    first, second = OffsetRange(topic, 0, 0, 300), OffsetRange(topic, 0, 300, 600)
    first_committing, second_done = threading.Event(), threading.Event()
    commits: list[tuple[str, int, int]] = []  # (run, offset it committed, offset read right after)

    def wait(event: threading.Event, what: str) -> None:
        if not event.wait(HOLD_S):
            raise AssertionError(f"{what}: not within {HOLD_S}s")

    class Commits:
        """The run's Kafka resource: its commits recorded, the first run's first commit held."""

        def __init__(self, who: str):
            self.who = who

        def __getattr__(self, attr):
            return getattr(kafka, attr)

        def commit(self, topic_, offsets, group=None):
            if self.who == "first" and not first_committing.is_set():
                first_committing.set()
                wait(second_done, "the second run's end")
            kafka.commit(topic_, offsets, group)
            commits.append((self.who, offsets[0], kafka.committed(topic_, [0], group)[0]))

    def run(who: str, r: OffsetRange):
        with swift.store() as store:
            put_json = store.put_json

            def held(n, doc):
                # The second manifest waits until the first run has computed its commit without it.
                if who == "second" and n.endswith(layout.MANIFEST):
                    wait(first_committing, "the first run's commit")
                return put_json(n, doc)

            store.put_json = held
            t0 = time.monotonic()
            try:
                return archive_range(r, cfg, Commits(who), store, spark), t0, time.monotonic()
            finally:
                if who == "second":
                    second_done.set()
                else:
                    first_committing.set()  # if it failed before its commit: the second waits no longer

    with ThreadPoolExecutor(2) as pool:
        (a, a0, a1), (b, b0, b1) = pool.map(run, ["first", "second"], [first, second])
    assert max(a0, b0) < min(a1, b1)  # the runs overlapped, and their commits crossed:
    assert commits == [("second", 600, 600), ("first", 300, 300), ("first", 600, 600)], commits
    assert a.manifest["records"] == 300 and b.manifest["records"] == 300
    assert a.committed_after == b.committed_after == 600
    assert kafka.committed(topic, [0], cfg.group) == {0: 600}
    with swift.store() as store:
        assert check_archive(kafka, store, topic, cfg.group) == {0: 600}
