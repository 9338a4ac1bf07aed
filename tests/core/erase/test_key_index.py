"""The key index (core/erase/key_index.py) and a range's hours after a partial read (core/erase/hours.py): pure logic."""

from __future__ import annotations

import base64

import pyarrow as pa

from matos_dagster.core.days import buckets
from matos_dagster.core.days.windows import HOUR_MS
from matos_dagster.core.erase import key_index, keys
from matos_dagster.core.erase.hours import hours_after
from matos_dagster.core.erase.rewrite import encoded_hours
from matos_dagster.core.records.schema import SCHEMA

SECRET = b"an erasure key for the tests, 32b"
INDEXER = key_index.Indexer(SECRET, keys.key_id(SECRET))


def hashed(*raw: bytes) -> set[str]:
    return {keys.keyed_hash(SECRET, k) for k in raw}


def test_an_index_holds_every_key_of_its_object_and_few_others():
    present = [f"customer-{i}".encode() for i in range(2000)]
    index = INDEXER.of(pa.array(present + [None], pa.binary()))
    assert all(key_index.may_hold(index, INDEXER.key_id, hashed(k)) for k in present[::10])
    false = sum(key_index.may_hold(index, INDEXER.key_id, hashed(f"other-{i}".encode())) for i in range(500))
    assert false <= 3  # about 0.05 % by its size
    assert len(base64.b64decode(index["bits"])) == 2000 * key_index.BITS_PER_KEY // 8


def test_an_index_is_bounded_whatever_the_object_holds_and_says_nothing_without_the_erasure_key():
    many = INDEXER.of(pa.array([f"c{i}".encode() for i in range(20_000)], pa.binary()))
    assert len(base64.b64decode(many["bits"])) == key_index.MOST_BYTES
    assert key_index.may_hold(many, INDEXER.key_id, hashed(b"c12345"))
    # The same keys under another erasure key set other bits: the bits name no key by themselves.
    other = key_index.Indexer(b"another erasure key, 32 bytes ok", "x")
    few = [b"alice", b"bob"]
    assert INDEXER.of(pa.array(few, pa.binary()))["bits"] != other.of(pa.array(few, pa.binary()))["bits"]


def test_an_object_without_index_or_with_one_of_another_erasure_key_may_hold_any_key():
    empty = INDEXER.of(pa.array([b"alice"], pa.binary()))
    assert not key_index.may_hold(empty, INDEXER.key_id, hashed(b"bob"))
    assert key_index.may_hold({**empty, "key_id": "0123456789abcdef"}, INDEXER.key_id, hashed(b"bob"))
    assert key_index.may_hold(None, INDEXER.key_id, hashed(b"bob"))
    assert key_index.may_hold({"key_id": INDEXER.key_id, "k": 3, "bits": "not base64!"}, INDEXER.key_id, hashed(b"b"))


def table(offsets: list[int], stamps: list[int], key: bytes = b"k") -> pa.Table:
    n = len(offsets)
    return pa.table({"topic": ["t"] * n, "partition": pa.array([0] * n, pa.int32()), "offset": offsets,
                     "timestamp": pa.array(stamps, pa.timestamp("ms", tz="UTC")), "timestamp_type": ["CreateTime"] * n,
                     "key": pa.array([key] * n, pa.binary()), "value": pa.array([b"v" * 10] * n, pa.binary()),
                     "headers": pa.array([[]] * n, SCHEMA.field("headers").type)}, schema=SCHEMA)


def test_a_range_s_hours_after_an_erasure_that_skipped_objects_are_those_of_every_record_left():
    h = 10 * HOUR_MS
    # Three objects of one range; the erased records are the hour's first offset and its latest record.
    objects = [table([0, 1, 2], [h + 5, h + 9, h + 1]), table([3, 4, 5], [h + 2, h + 3, h + HOUR_MS + 1]),
               table([6, 7], [h + 4, h + 2 * HOUR_MS]), table([8, 9], [h + 6, h + 7])]
    doc = {"hours": buckets.to_json(buckets.merge(*(buckets.from_json(encoded_hours(t)) for t in objects)))}
    kept0 = objects[0].slice(2)  # offsets 0 (the hour's first) and 1 (its latest) erased
    entries = [{"name": "a", "hours": encoded_hours(kept0)},
               {"name": "b", "min_timestamp": h + 2, "max_timestamp": h + HOUR_MS + 1},
               {"name": "c", "min_timestamp": h + 4, "max_timestamp": h + 2 * HOUR_MS},
               {"name": "d", "min_timestamp": h + 6, "max_timestamp": h + 7, "first_offset": 8, "last_offset": 9}]
    read = []

    def read_hours(e):
        read.append(e["name"])
        return encoded_hours(objects["abcd".index(e["name"])])

    got = hours_after(doc, entries, entries[1:], objects[0].slice(0, 2), read_hours)
    want = buckets.to_json(buckets.merge(*(buckets.from_json(encoded_hours(t)) for t in (kept0, *objects[1:]))))
    assert got == want
    # b and c reach into the hour whose extremes went from others; d lies within it: its entry says enough.
    assert read == ["b", "c"]
    # An erased record that is none of its hour's extremes: nothing more is read.
    read.clear()
    entries = [{"name": "a", "hours": encoded_hours(objects[0])},
               {"name": "b", "hours": encoded_hours(objects[1].slice(0, 1).take([0]))},
               {"name": "c", "min_timestamp": h + 4, "max_timestamp": h + 2 * HOUR_MS},
               {"name": "d", "hours": encoded_hours(objects[3])}]
    kept1 = pa.concat_tables([objects[1].slice(0, 1), objects[1].slice(2)])
    entries[1]["hours"] = encoded_hours(kept1)
    got = hours_after(doc, entries, entries[2:], objects[1].slice(1, 1), read_hours)
    assert got == buckets.to_json(buckets.merge(*(buckets.from_json(encoded_hours(t))
                                                  for t in (objects[0], kept1, *objects[2:]))))
    assert read == []
