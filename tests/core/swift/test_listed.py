"""A partition listed once answers a batch run's questions as the bounded listings do
(matos_dagster/core/swift/listed.py): the same entries, in two requests however many ranges ask.
"""

from matos_dagster.core.archive.commit import prefix_end
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import RANGE, Entry, PartitionArchive
from matos_dagster.core.swift.listed import REVERSE_PAGE, ListedPartition

TOPIC = "orders"


def _folder(store, a: int, b: int, *names: str) -> None:
    d = layout.range_dir("kafka", OffsetRange(TOPIC, 0, a, b))
    for n in names:
        store.put(layout.join(d, n), b"{}")


def _every_kind(store) -> None:
    """Ranges, a compacted range over three with one replaced folder half-deleted, a loss, an
    expired span, a folder of both a manifest and a loss record, unfinished attempts."""
    for a, b in ((0, 10), (10, 20), (20, 30), (0, 30), (30, 40)):
        _folder(store, a, b, "part-x.parquet", layout.MANIFEST)
    _folder(store, 12, 18, "part-y.parquet")
    _folder(store, 40, 45, layout.LOSS)
    _folder(store, 45, 60, layout.EXPIRED, layout.MANIFEST, "part-z.parquet")
    _folder(store, 60, 70, layout.MANIFEST, layout.LOSS, "part-w.parquet")
    _folder(store, 70, 90, "part-v.parquet")  # an attempt that never got its manifest
    _folder(store, 90, 95, "part-u.parquet", layout.MANIFEST)  # beyond a hole


def test_every_answer_from_the_listing_is_the_archives_own(swift):
    with swift.store() as store:
        store.check()
        _every_kind(store)
        archive = PartitionArchive(store, "kafka", TOPIC, 0)
        for start in (0, 25, 42, 60, 80):
            listed = ListedPartition(store, "kafka", TOPIC, 0, start)
            for o in range(start, 101, 10):
                assert listed.last_before(o) == archive.last_before(o), (start, o)
                assert list(listed.entries_from(o)) == list(archive.entries_from(o)), (start, o)
                assert listed.overlapping(o, o + 12) == archive.overlapping(o, o + 12), (start, o)
        listed = ListedPartition(store, "kafka", TOPIC, 0, 60)
        assert listed.has_manifest(OffsetRange(TOPIC, 0, 60, 70))
        assert not listed.has_manifest(OffsetRange(TOPIC, 0, 70, 90))
        assert listed.names(OffsetRange(TOPIC, 0, 70, 90)) == [
            layout.join(layout.range_dir("kafka", OffsetRange(TOPIC, 0, 70, 90)), "part-v.parquet")]
        assert listed.names(OffsetRange(TOPIC, 0, 95, 99)) == []


def test_two_requests_answer_every_range_of_the_partition_whatever_its_history(swift):
    with swift.store() as store:
        store.check()
        for i in range(150):
            _folder(store, i * 10, i * 10 + 10, "part-x.parquet", layout.MANIFEST)
        before = store.listings
        listed = ListedPartition(store, "kafka", TOPIC, 0, 1500)
        assert store.listings - before == 2
        for i in range(20):  # the ranges of a run, each written in turn
            r = OffsetRange(TOPIC, 0, 1500 + i, 1501 + i)
            assert listed.overlapping(r.start, r.end) == [] and not listed.has_manifest(r)
            listed.add(r)
        assert store.listings - before == 2
        # The prefix a commit moves to, from the listing and what was added, without asking again.
        assert list(listed.entries_from(1500)) == [Entry(1500 + i, 1501 + i, RANGE) for i in range(20)]
        assert prefix_end(listed, 1500) == 1520
        assert store.listings - before == 2


def test_a_folder_below_of_more_objects_than_a_page_is_found_all_the_same(swift):
    with swift.store() as store:
        store.check()
        _folder(store, 0, 10, layout.MANIFEST, *(f"part-{i:05d}.parquet" for i in range(REVERSE_PAGE + 5)))
        _folder(store, 10, 20, *(f"part-{i:05d}.parquet" for i in range(3)))  # unfinished
        listed = ListedPartition(store, "kafka", TOPIC, 0, 20)
        assert listed.last_before(20) == Entry(0, 10, RANGE)
        assert list(listed.entries_from(20)) == []
