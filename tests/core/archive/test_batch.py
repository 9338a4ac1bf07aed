"""Many ranges in one run: of several topics and partitions, one Spark job, each range exactly once.

Each test ends with `check_archive`: every offset in [log start, committed) is in exactly one
manifest, and every object listed is in Swift with its size, md5 and record count.
"""

from __future__ import annotations

from helpers import check_archive, delete_records, produce, read_archive, read_kafka
from samples import awkward_rows, config

from matos_dagster.core.archive.batch import archive_batch
from matos_dagster.core.archive.tasks import pack
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.archive.slice_task import SliceJob
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store, SwiftParams


def test_ranges_of_several_topics_and_partitions_are_archived_and_committed_each_on_its_own(
        kafka, swift, spark, new_topic):
    a, b = new_topic(partitions=2), new_topic(partitions=3)
    produce(kafka, a, awkward_rows(60, 2))
    produce(kafka, b, awkward_rows(90, 3))
    delete_records(kafka, b, 1, 7)  # an archive that begins after offset 0, as retention leaves topics
    ca, cb = config(a, slice_records=8), config(b)
    items = [(OffsetRange(a, p, 0, 30), ca) for p in (0, 1)] + \
            [(OffsetRange(b, 0, 0, 30), cb), (OffsetRange(b, 1, 7, 30), cb), (OffsetRange(b, 2, 0, 30), cb)]
    said = []
    with swift.store() as store:
        done = archive_batch(items, kafka, store, spark, say=said.append)
        assert [o.error for o in done.outcomes] == [None] * 5
        for o in done.outcomes:
            r = o.range
            assert read_archive(store, o.archived.manifest) == read_kafka(kafka, r.topic, r.partition, r.start)
            assert o.archived.committed_after == 30
        assert check_archive(kafka, store, a, ca.group) == {0: 30, 1: 30}
        assert check_archive(kafka, store, b, cb.group) == {0: 30, 1: 30, 2: 30}
    assert done.tasks < 8 + 5  # a's slices of 8 offsets and b's ranges share tasks
    # Which reader read the records: one line for the batch (a run of 1,000 ranges said it 1,000 times),
    # and each range's own in its materialisation.
    readers = [line for line in said if "slice reader" in line]
    assert len(readers) == 1 and readers[0].startswith("5 range(s): records read by the "), said
    assert all(o.archived.reader for o in done.outcomes)


def test_a_range_that_cannot_be_archived_is_its_own_outcome_and_the_others_are_archived(
        kafka, swift, spark, new_topic):
    good, bad = new_topic(), new_topic(partitions=2)
    produce(kafka, good, [(None, b"v", [])] * 10)
    produce(kafka, bad, [(None, b"x" * 100, [], 0)] * 5 + [(None, b"y", [], 1)] * 5)
    cg, cb = config(good), config(bad, max_record_bytes=50, object_bytes=1000)
    items = [(OffsetRange(good, 0, 0, 10), cg), (OffsetRange(bad, 0, 0, 5), cb), (OffsetRange(bad, 1, 0, 5), cb),
             (OffsetRange(bad, 7, 0, 5), cb), (OffsetRange("no-such-topic", 0, 0, 5), cg)]
    with swift.store() as store:
        done = archive_batch(items, kafka, store, spark)
        ok, too_large, fine, no_partition, no_topic = done.outcomes
        assert ok.ok and fine.ok
        assert too_large.refused and "max_record_bytes" in too_large.error and "\n" not in too_large.error
        assert no_partition.refused and "has no partition 7" in no_partition.error
        assert no_topic.refused and "does not exist" in no_topic.error
        assert check_archive(kafka, store, good, cg.group) == {0: 10}
        # The refused range's partition is neither archived nor committed; its neighbour is both.
        assert check_archive(kafka, store, bad, cb.group) == {0: None, 1: 5}


def test_a_range_archived_already_is_verified_not_rewritten(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(None, b"v", [])] * 20)
    cfg = config(topic)
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 10), cfg, kafka, store, spark)
        done = archive_batch([(OffsetRange(topic, 0, 0, 10), cfg), (OffsetRange(topic, 0, 10, 20), cfg)],
                             kafka, store, spark)
        first, second = done.outcomes
        assert first.archived.already_archived and not second.archived.already_archived
        assert check_archive(kafka, store, topic, cfg.group) == {0: 20}


def _job(start: int, end: int) -> SliceJob:
    return SliceJob(OffsetRange("t", 0, start, end), "d", {}, "g", SwiftParams("http://x", "c"))


def test_small_slices_share_a_task_and_a_large_one_has_its_own():
    jobs = [_job(0, 10), _job(10, 20), _job(20, 150_000), _job(150_000, 150_010)] + [_job(i, i + 1) for i in range(40)]
    tasks = pack(jobs, most_offsets=100_000, most_slices=32)
    assert [len(t) for t in tasks] == [2, 1, 32, 9]


def test_a_partitions_later_ranges_stop_at_its_first_range_not_archived(kafka, swift, spark, new_topic):
    """No manifest above a hole: the range the next run plans from the committed offset would overlap it."""
    topic = new_topic(partitions=2)
    # Partition 0: [5, 8) archived by another run, so [0, 10) is refused when checked.
    # Partition 1: a record above max_record_bytes at offset 2, so [0, 5)'s slice is refused when run.
    produce(kafka, topic, [(None, b"v", [], 0)] * 30 + [(None, b"v", [], 1)] * 2 + [(None, b"x" * 100, [], 1)]
            + [(None, b"v", [], 1)] * 27)
    cfg = config(topic, max_record_bytes=50, object_bytes=1000)
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 5, 8), cfg, kafka, store, spark)
        items = [(OffsetRange(topic, p, a, b), cfg) for p in (0, 1) for a, b in ((0, 10), (10, 20), (20, 30))]
        done = archive_batch(items, kafka, store, spark)
        first0, *later0, first1 = done.outcomes[:4]
        later1 = done.outcomes[4:]
        assert first0.refused and first0.archived_over == (5, 8)
        assert first1.refused and "max_record_bytes" in first1.error
        for first, later in ((first0, later0), (first1, later1)):
            for o in later:
                assert not o.ok and not o.refused, "a later run archives them"
                assert o.error.startswith(f"not archived: {first.range} before it in this run was not (")
        manifests = sorted(n["name"] for n in store.list("") if n["name"].endswith("_manifest.json"))
        assert manifests == [f"kafka/topic={topic}/partition=0/{5:020d}-{8:020d}/_manifest.json"]
        assert kafka.committed(topic, [0, 1], cfg.group) == {0: None, 1: None}


def test_ranges_of_one_partition_that_overlap_each_other_are_all_refused(kafka, swift, spark, new_topic):
    """As archive_batch is called by the job, which refuses such a run before it begins: the last guard."""
    topic = new_topic(partitions=2)
    produce(kafka, topic, [(None, b"v", [], p) for p in (0, 1) for _ in range(150)])
    cfg = config(topic)
    with swift.store() as store:
        done = archive_batch([(OffsetRange(topic, 0, 0, 100), cfg), (OffsetRange(topic, 0, 50, 150), cfg),
                              (OffsetRange(topic, 1, 0, 150), cfg)], kafka, store, spark)
        a, b, other = done.outcomes
        assert a.refused and b.refused and "overlap" in a.error and a.error == b.error
        assert other.ok
        assert check_archive(kafka, store, topic, cfg.group) == {0: None, 1: 150}


def test_a_batch_lists_each_partition_twice_and_reads_no_manifest_that_is_not_there(
        kafka, swift, spark, new_topic, monkeypatch):
    """A busy estate's batch is a range or two a partition: Swift is asked per partition, not per range
    (core/swift/listed.py); the commit's prefix comes from the same listing."""
    topic = new_topic(partitions=3)
    produce(kafka, topic, [(None, b"v", [], p) for p in range(3) for _ in range(20)])
    cfg = config(topic)
    with swift.store() as store:
        archive_batch([(OffsetRange(topic, p, 0, 10), cfg) for p in range(3)], kafka, store, spark)
        stray = layout.join(layout.range_dir("kafka", OffsetRange(topic, 1, 10, 15)), "part-00000000000000000010.jsonl.gz")
        store.put(stray, b"an earlier attempt's, with other settings")
        asked = {"listings": 0, "manifests read": 0}
        list_page, get = Store.list_page, Store.get

        def counted_list(self, *a, **k):
            asked["listings"] += 1
            return list_page(self, *a, **k)

        def counted_get(self, name, *a, **k):
            asked["manifests read"] += name.endswith(layout.MANIFEST)
            return get(self, name, *a, **k)

        monkeypatch.setattr(Store, "list_page", counted_list)
        monkeypatch.setattr(Store, "get", counted_get)
        done = archive_batch([(OffsetRange(topic, p, a, b), cfg) for p in range(3) for a, b in ((10, 15), (15, 20))],
                             kafka, store, spark)
        monkeypatch.undo()
        assert [o.error for o in done.outcomes] == [None] * 6
        assert asked == {"listings": 2 * 3, "manifests read": 0}
        assert store.head(stray) is None  # the earlier attempt's object, found in the same listing, removed
        assert check_archive(kafka, store, topic, cfg.group) == {0: 20, 1: 20, 2: 20}
