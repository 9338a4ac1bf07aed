"""Planning a read or a restore on a real Swift: bounded listings, losses and damage.

The archives here are written with the product's own encoder and manifest builder, straight
into Swift (no Kafka, no Spark): what is under test is which entries a read finds, how many
listing requests that costs, and what it does with what it meets. Reading archives that the
archive job wrote, compared with Kafka, is tests/core/test_reader.py's business.
"""

from __future__ import annotations

import hashlib
import math

import pyarrow as pa
import pytest

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import AcknowledgedLoss, Window, find_manifests, read_table
from matos_dagster.core.records.objects import encode
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.restore.plan import Request, plan
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.archived import PROBE

TOPIC = "orders"
T0 = 1_767_225_600_000  # 2026-01-01, ms


def put_range(store, prefix: str, lo: int, hi: int, stamp=lambda o: T0 + o * 1000, partition: int = 0,
              per_object: int = 5) -> dict:
    """Range [lo, hi) of one record an offset, `stamp(offset)` its timestamp (None: none)."""
    r = OffsetRange(TOPIC, partition, lo, hi)
    d = layout.range_dir(prefix, r)
    objects = []
    for first in range(lo, hi, per_object):
        offsets = range(first, min(first + per_object, hi))
        rows = [{"topic": TOPIC, "partition": partition, "offset": o, "timestamp": stamp(o),
                 "timestamp_type": "CreateTime" if stamp(o) is not None else "NotAvailable",
                 "key": f"k{o}".encode(), "value": f"v{o}".encode(), "headers": []} for o in offsets]
        data = encode(pa.Table.from_pylist(rows, schema=SCHEMA), "parquet")
        name = layout.object_name(d, first, "parquet")
        store.put(name, data)
        stamps = [s for s in (stamp(o) for o in offsets) if s is not None]
        objects.append({"name": name, "records": len(rows), "bytes": len(data), "md5": hashlib.md5(data).hexdigest(),
                        "first_offset": offsets[0], "last_offset": offsets[-1],
                        "min_timestamp": min(stamps) if stamps else None,
                        "max_timestamp": max(stamps) if stamps else None})
    doc = manifest.build(r, "parquet", objects)
    store.put_json(layout.manifest_name(prefix, r), doc)
    return doc


def put_history(store, prefix: str, n: int, size: int = 10) -> None:
    """`n` ranges of `size` offsets below offset n * size, listed but never read: manifests only."""
    for i in range(n):
        r = OffsetRange(TOPIC, 0, i * size, (i + 1) * size)
        store.put_json(layout.manifest_name(prefix, r), {"min_timestamp": T0 + i * size * 1000,
                                                         "max_timestamp": T0 + ((i + 1) * size - 1) * 1000})


def put_loss(store, prefix: str, lo: int, hi: int) -> None:
    r = OffsetRange(TOPIC, 0, lo, hi)
    store.put_json(layout.loss_name(prefix, r), {"topic": TOPIC, "partition": 0, "start": lo, "end": hi,
                                                 "reason": "retention before archiving", "acknowledged_at": "x"})


def gets(store) -> list[str]:
    """Every name `store.get` fetches from now on."""
    fetched: list[str] = []
    real = store.get

    def get(name):
        fetched.append(name)
        return real(name)

    store.get = get
    return fetched


def listed(store) -> list[int]:
    """The number of names each listing request returns from now on."""
    sizes: list[int] = []
    real = store.list_page

    def list_page(*args, **kw):
        items = real(*args, **kw)
        sizes.append(len(items))
        return items

    store.list_page = list_page
    return sizes


def offsets(table) -> list[int]:
    return table["offset"].to_pylist()


@pytest.fixture
def store(swift):
    with swift.store() as s:
        yield s


def test_a_recent_window_lists_as_much_with_1_or_200_ranges_below(swift):
    listings, names, found = {}, {}, {}
    for n in (1, 200):
        with swift.store() as store:
            prefix = f"h{n}"
            put_history(store, prefix, n)
            top = n * 10
            put_range(store, prefix, top, top + 10)
            put_range(store, prefix, top + 10, top + 20)
            fetched = gets(store)
            sizes = listed(store)
            before = store.listings
            table = read_table(store, prefix, TOPIC, partitions=[0], start=top + 5, end=top + 15)
            listings[n] = store.listings - before
            names[n] = sum(sizes)
            found[n] = sorted(name for name in fetched if name.endswith(layout.MANIFEST))
            assert offsets(table) == list(range(top + 5, top + 15))
            assert len(found[n]) == 2  # the two ranges of the window, nothing below
    assert listings[1] == listings[200], listings
    # and as many names: at most one more reverse page of the folders below (archived.PROBE)
    assert names[200] - names[1] <= PROBE, names


def test_a_time_window_finds_its_first_range_by_a_binary_search(store):
    n = 300
    put_history(store, "kafka", n)  # offsets [0, 3000), offset o stamped T0 + o s
    put_range(store, "kafka", n * 10, n * 10 + 10)
    fetched = gets(store)
    since, until = T0 + 3001 * 1000, T0 + 3008 * 1000
    before = store.listings
    table = read_table(store, "kafka", TOPIC, since_ms=since, until_ms=until)
    assert offsets(table) == list(range(3001, 3008))
    manifests = [name for name in fetched if name.endswith(layout.MANIFEST)]
    bound = 2 * math.ceil(math.log2(n * 10 + 10)) + 4
    assert len(set(manifests)) <= bound, (len(set(manifests)), bound)  # not the 301 manifests
    assert store.listings - before <= bound


def test_a_time_window_never_selects_records_without_a_timestamp(store):
    put_range(store, "kafka", 0, 10)
    put_range(store, "kafka", 10, 20, stamp=lambda o: None)  # e.g. message format v0
    put_range(store, "kafka", 20, 30, stamp=lambda o: None if o % 2 else T0 + o * 1000)
    everything = read_table(store, "kafka", TOPIC)
    assert offsets(everything) == list(range(30))  # they are archived and readable by offset
    assert everything.slice(10, 10)["timestamp"].null_count == 10
    for scan_all in (False, True):
        table = read_table(store, "kafka", TOPIC, since_ms=T0, until_ms=T0 + 10**9, scan_all=scan_all)
        assert offsets(table) == list(range(10)) + list(range(20, 30, 2)), scan_all
        table = read_table(store, "kafka", TOPIC, until_ms=T0 + 10**9, scan_all=scan_all)
        assert table["timestamp"].null_count == 0


def test_out_of_order_timestamps_need_scan_all(store):
    # A producer that stamped a later range earlier: the binary search, like Kafka's
    # offsetsForTimes, assumes timestamps do not decrease; scan_all does not.
    put_range(store, "kafka", 0, 10)
    put_range(store, "kafka", 10, 20, stamp=lambda o: T0 + 100_000 + o * 1000)
    put_range(store, "kafka", 20, 30, stamp=lambda o: T0 + o * 1000)  # back in time
    window = {"since_ms": T0 + 20_000, "until_ms": T0 + 30_000}
    assert offsets(read_table(store, "kafka", TOPIC, scan_all=True, **window)) == list(range(20, 30))
    assert offsets(read_table(store, "kafka", TOPIC, **window)) == []


def test_a_folder_without_a_manifest_is_not_read(store):
    put_range(store, "kafka", 0, 10)
    unfinished = put_range(store, "kafka", 10, 20)
    store.delete(layout.manifest_name("kafka", OffsetRange(TOPIC, 0, 10, 20)))
    put_range(store, "kafka", 20, 30)
    fetched = gets(store)
    table = read_table(store, "kafka", TOPIC, start=5, end=25)
    assert offsets(table) == list(range(5, 10)) + list(range(20, 25))
    assert not {o["name"] for o in unfinished["objects"]} & set(fetched)
    assert not [name for name in fetched if "00000000000000000010-" in name]


def test_an_object_missing_from_swift_is_a_clear_error_naming_it(store):
    doc = put_range(store, "kafka", 0, 10)
    gone = doc["objects"][1]["name"]
    store.delete(gone)
    with pytest.raises(FileNotFoundError) as e:
        read_table(store, "kafka", TOPIC)
    assert str(e.value) == (f"object {gone} is listed in a manifest but missing from Swift container "
                            f"{store.container!r}: the archive is damaged there (`matos verify <topic> "
                            "--audit-all` lists every such object)")


def test_an_acknowledged_loss_is_skipped_with_a_note(store):
    put_range(store, "kafka", 0, 10)
    put_loss(store, "kafka", 10, 40)
    put_range(store, "kafka", 40, 50)
    with pytest.warns(AcknowledgedLoss, match=r"orders/0\[10, 40\): an acknowledged loss \(30 offsets"):
        table = read_table(store, "kafka", TOPIC, start=5)
    assert offsets(table) == list(range(5, 10)) + list(range(40, 50))
    notes: list[str] = []
    table = read_table(store, "kafka", TOPIC, since_ms=T0, say=notes.append)
    assert offsets(table) == list(range(10)) + list(range(40, 50)) and len(notes) == 1
    # A window that misses the loss says nothing about it.
    notes.clear()
    assert offsets(read_table(store, "kafka", TOPIC, start=40, say=notes.append)) == list(range(40, 50))
    assert notes == []


def test_restore_planning_skips_an_acknowledged_loss_with_a_note_and_reads_only_its_window(swift):
    listings = {}
    for n in (1, 200):
        with swift.store() as store:
            prefix = f"h{n}"
            put_history(store, prefix, n)
            top = n * 10
            put_range(store, prefix, top, top + 10)
            put_loss(store, prefix, top + 10, top + 20)
            put_range(store, prefix, top + 20, top + 30)
            notes: list[str] = []
            sizes = listed(store)
            before = store.listings
            units = plan(Request(TOPIC, prefix, partitions=(0,), start=top), store, {}, 10.0, say=notes.append)
            listings[n] = (store.listings - before, sum(sizes))
            assert [(u.lo, u.hi) for u in units] == [(top, top + 10), (top + 20, top + 30)]
            assert len(notes) == 1 and f"[{top + 10}, {top + 20}): an acknowledged loss" in notes[0]
    assert listings[1][0] == listings[200][0] and listings[200][1] - listings[1][1] <= PROBE, listings


def test_restore_keys_that_overlap_are_merged_into_one_window(store):
    key = lambda lo, hi: OffsetRange(TOPIC, 0, lo, hi).key  # noqa: E731
    req = Request(TOPIC, "kafka", keys=(key(0, 10), key(5, 20), key(30, 40)))
    assert req.windows(store) == [Window(0, 0, 20), Window(0, 30, 40)]


def test_find_manifests_takes_each_range_once_for_windows_that_share_it(store):
    put_range(store, "kafka", 0, 10)
    found = find_manifests(store, "kafka", TOPIC, [Window(0, 0, 4), Window(0, 6, 10)])
    assert [d["start"] for d in found.manifests] == [0] and found.notes == []
