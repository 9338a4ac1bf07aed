"""Finding archived ranges in a real Swift with bounded listings (matos_dagster/core/swift/archived.py).

A folder counts only with a manifest or a loss record; recurring lookups from an offset cost
the same number of listing requests whatever the history below that offset.
"""

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import LOSS, RANGE, Entry, PartitionArchive, archived_partitions

TOPIC = "orders"


def _folder(store, r: OffsetRange, *names: str) -> None:
    d = layout.range_dir("kafka", r)
    for n in names:
        store.put(layout.join(d, n), b"{}")


def _history(store, partition: int, n: int, size: int = 10) -> None:
    for i in range(n):
        _folder(store, OffsetRange(TOPIC, partition, i * size, (i + 1) * size), "part-x.parquet", layout.MANIFEST)


def test_only_folders_with_a_manifest_or_a_loss_record_are_entries(swift):
    with swift.store() as store:
        store.check()
        _folder(store, OffsetRange(TOPIC, 0, 0, 10), "part-00000000000000000000.parquet", layout.MANIFEST)
        _folder(store, OffsetRange(TOPIC, 0, 10, 20), "part-00000000000000000010.parquet")  # unfinished
        _folder(store, OffsetRange(TOPIC, 0, 10, 15), layout.LOSS)
        _folder(store, OffsetRange(TOPIC, 0, 15, 30), layout.MANIFEST)
        _folder(store, OffsetRange(TOPIC, 1, 0, 5), layout.MANIFEST)
        archive = PartitionArchive(store, "kafka", TOPIC, 0)
        assert list(archive.all()) == [Entry(0, 10, RANGE), Entry(10, 15, LOSS), Entry(15, 30, RANGE)]
        assert list(archive.entries_from(12)) == [Entry(10, 15, LOSS), Entry(15, 30, RANGE)]
        assert list(archive.entries_from(15)) == [Entry(15, 30, RANGE)]
        assert list(archive.entries_from(30)) == []
        assert archive.last_before(15) == Entry(10, 15, LOSS)
        assert archive.last_before(0) is None
        assert archive.overlapping(5, 16) == [Entry(0, 10, RANGE), Entry(10, 15, LOSS), Entry(15, 30, RANGE)]
        assert archive.entry_at_or_after(11) == Entry(15, 30, RANGE)
        assert archive.entry_at_or_after(31) is None
        assert archived_partitions(store, "kafka", TOPIC) == [0, 1]


def test_an_unfinished_folder_below_the_offset_is_passed_over(swift):
    with swift.store() as store:
        store.check()
        _folder(store, OffsetRange(TOPIC, 0, 0, 10), layout.MANIFEST)
        for i in range(20):  # more failed attempts than one reverse listing page
            _folder(store, OffsetRange(TOPIC, 0, 10 + i, 40), "part-y.parquet")
        archive = PartitionArchive(store, "kafka", TOPIC, 0)
        assert archive.last_before(40) == Entry(0, 10, RANGE)
        assert list(archive.entries_from(5)) == [Entry(0, 10, RANGE)]


def test_lookups_from_an_offset_list_as_much_at_any_history(swift):
    """The Day-365 property: the requests of a lookup do not grow with the ranges below it."""
    counts = {}
    for n in (1, 150):
        with swift.store() as store:
            store.container = f"{swift.container}-{n}"
            store.check()
            _history(store, 0, n)
            end = n * 10
            _folder(store, OffsetRange(TOPIC, 0, end, end + 10), layout.MANIFEST)  # not committed yet
            archive = PartitionArchive(store, "kafka", TOPIC, 0)
            before = store.listings
            found = list(archive.entries_from(end))
            found += archive.overlapping(end + 10, end + 20)
            found.append(archive.last_before(end))
            counts[n] = store.listings - before
            assert found == [Entry(end, end + 10, RANGE), Entry(end - 10, end, RANGE)]
    assert counts[1] == counts[150], counts


def test_a_compacted_folder_supersedes_the_folders_it_contains_in_every_lookup(swift):
    """Compaction's switch (compact.py): `[0, 30)` replaces `[0, 10)`, `[10, 20)`, `[20, 30)`,
    which stay in Swift until the grace period has passed."""
    with swift.store() as store:
        store.check()
        for a, b in ((0, 10), (10, 20), (20, 30), (0, 30), (30, 40)):
            _folder(store, OffsetRange(TOPIC, 0, a, b), "part-x.parquet", layout.MANIFEST)
        _folder(store, OffsetRange(TOPIC, 0, 12, 18), "part-y.parquet")  # half-deleted: objects only
        archive = PartitionArchive(store, "kafka", TOPIC, 0)
        assert list(archive.all()) == [Entry(0, 30, RANGE), Entry(30, 40, RANGE)]
        assert list(archive.entries_from(0)) == [Entry(0, 30, RANGE), Entry(30, 40, RANGE)]
        assert list(archive.entries_from(30)) == [Entry(30, 40, RANGE)]
        # From inside, before clean-up: the replaced folder holding 25 (the same records, intact
        # for the grace period), then what follows; never both it and [0, 30).
        assert list(archive.entries_from(25)) == [Entry(20, 30, RANGE), Entry(30, 40, RANGE)]
        assert archive.overlapping(0, 40) == [Entry(0, 30, RANGE), Entry(30, 40, RANGE)]
        assert archive.entry_at_or_after(0) == Entry(0, 30, RANGE)
        assert archive.last_before(10) == Entry(0, 30, RANGE)  # the longest of those starting at 0
        folders = list(archive.folders_from(0))
        assert [f.span for f in folders] == [(0, 10), (0, 30), (10, 20), (12, 18), (20, 30), (30, 40)]
        assert [f.entry is None for f in folders] == [False, False, False, True, False, False]
        assert all(f.entry is None or f.entry.modified for f in folders)  # Swift's Last-Modified
        # The replaced folders going away, in any order, changes nothing a lookup returns.
        for a, b in ((10, 20), (0, 10), (20, 30)):
            store.delete(layout.manifest_name("kafka", OffsetRange(TOPIC, 0, a, b)))
            assert list(archive.all()) == [Entry(0, 30, RANGE), Entry(30, 40, RANGE)]
            covering = list(archive.entries_from(25))
            assert covering[-1] == Entry(30, 40, RANGE) and covering[0].end == 30 and covering[0].start <= 25
