"""Avro read a column at a time (core/schemas/avro_columns.py) gives what fastavro's record at a
time gives: the same data, errors, ids and counts for any value of a rich schema, and for bytes
that are not one (cut short, too long, flipped, out of Python's date range, a map key twice):
those it hands to fastavro, which says why."""

from __future__ import annotations

import datetime
import io
import json
import math
import re
import struct

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_support import FakeSource, avro_framed, avro_schema, column

from matos_dagster.core.schemas import avro
from matos_dagster.core.schemas import writers
from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.errors import UndecodableRecord
from matos_dagster.core.schemas.wire import frame

UTC = datetime.UTC
COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
HASH = {"type": "fixed", "name": "Hash", "size": 4}
PT = {"type": "record", "name": "Pt", "fields": [{"name": "x", "type": "double"}, {"name": "tag", "type": "string"}]}
ITEM = {"type": "record", "name": "Item", "fields": [{"name": "n", "type": ["null", "int"]},
                                                     {"name": "t", "type": {"type": "map", "values": "Hash"}}]}
LOGICAL = [("day", "int", "date"), ("tmil", "int", "time-millis"), ("tmic", "long", "time-micros"),
           ("tms", "long", "timestamp-millis"), ("tus", "long", "timestamp-micros"),
           ("tns", "long", "timestamp-nanos"), ("local", "long", "local-timestamp-millis")]


def schema(logical: bool = True) -> dict:
    """A record of every type avro_columns reads; without `logical`, the same bytes as plain numbers."""
    fields = [("i", "int"), ("l", "long"), ("f", "float"), ("d", "double"), ("b", "boolean"), ("s", "string"),
              ("by", "bytes"), ("e", COLOR), ("fx", HASH)]
    fields += [(n, {"type": t, "logicalType": lt} if logical else t) for n, t, lt in LOGICAL]
    fields += [("opt", ["null", "string"]), ("pt", ["null", PT]), ("multi", ["null", "long", "string", "Color", "Pt"]),
               ("arr", {"type": "array", "items": ITEM}),
               ("m", {"type": "map", "values": {"type": "array", "items": ["null", "long"]}})]
    return {"type": "record", "name": "Root", "namespace": "p", "fields": [{"name": n, "type": t} for n, t in fields]}


SCHEMA = schema()
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
INTS, LONGS = st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)
PT_VALUES = st.fixed_dictionaries({"x": st.floats(allow_nan=False), "tag": TEXT})
ROOT = st.fixed_dictionaries({
    "i": INTS, "l": LONGS, "f": st.floats(width=32, allow_nan=False), "d": st.floats(allow_nan=False),
    "b": st.booleans(), "s": TEXT, "by": st.binary(max_size=6), "e": st.sampled_from(COLOR["symbols"]),
    "fx": st.binary(min_size=4, max_size=4), "day": st.integers(-800_000, 3_000_000),
    "tmil": st.integers(-10, 86_400_010), "tmic": st.integers(-10, 86_400_000_010),
    # Plain numbers (the schema without logical types writes them): some outside Python's datetime.
    "tms": st.integers(-63_000_000_000_000, 254_000_000_000_000), "tns": LONGS,
    "tus": st.integers(-63_000_000_000_000_000, 254_000_000_000_000_000),
    "local": st.integers(-63_000_000_000_000, 254_000_000_000_000),
    "opt": st.none() | TEXT, "pt": st.none() | PT_VALUES,
    "multi": st.one_of(st.none(), LONGS, TEXT, st.sampled_from(COLOR["symbols"]).map(lambda c: ("p.Color", c)),
                       PT_VALUES.map(lambda p: ("p.Pt", p))),
    "arr": st.lists(st.fixed_dictionaries({"n": st.none() | INTS, "t": st.dictionaries(
        TEXT, st.binary(min_size=4, max_size=4), max_size=3)}), max_size=3),
    "m": st.dictionaries(TEXT, st.lists(st.none() | LONGS, max_size=3), max_size=3),
})
PLAIN = fastavro.parse_schema(schema(logical=False))


def plain(value: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, PLAIN, value)
    return buf.getvalue()


def mutated(payload: bytes, how: tuple[int, int, int]) -> bytes:
    kind, at, byte = how
    at = at % (len(payload) + 1)
    return [payload, payload[:at], payload + bytes([byte]), payload[:at] + bytes([byte]) + payload[at + 1:]][kind]


def both(values: list, source: FakeSource):
    """decode column by column, and decode record by record (avro_columns switched off)."""
    side = Side("avro")
    fast = decode(column(values), side, source)
    saved = writers.columns
    writers.columns = lambda w: None
    try:
        slow = decode(column(values), side, source)
    finally:
        writers.columns = saved
    return fast, slow


def nan_free(v):
    """NaN (a flipped byte can make one) as a string: NaN == NaN is false."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, dict):
        return {k: nan_free(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [nan_free(x) for x in v]
    return v


def same(fast, slow) -> None:
    assert fast.data.type == slow.data.type
    assert nan_free(fast.data.to_pylist()) == nan_free(slow.data.to_pylist())
    # fastavro's messages can name an object by its address: that part differs between calls.
    assert [e and re.sub(" at 0x[0-9a-f]+", "", e) for e in fast.errors.to_pylist()] == [
        e and re.sub(" at 0x[0-9a-f]+", "", e) for e in slow.errors.to_pylist()]
    assert fast.schema_ids.to_pylist() == slow.schema_ids.to_pylist()
    assert (fast.decoded, fast.failed, fast.nulls, fast.reader_schema_id) == (
        slow.decoded, slow.failed, slow.nulls, slow.reader_schema_id)


def test_the_rich_schema_is_read_column_by_column():
    assert avro.compile(avro_schema(1, SCHEMA)).columns is not None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(ROOT, st.tuples(st.integers(0, 3), st.integers(0, 10_000), st.integers(0, 255))),
                min_size=1, max_size=12), st.lists(st.sampled_from([None, b"", b"\x01x", b"\x00\x00"]), max_size=3))
def test_any_value_or_broken_bytes_decode_as_fastavro_decodes_them(records, others):
    values = [frame(1, mutated(plain(v), how)) for v, how in records] + list(others)
    fast, slow = both(values, FakeSource({1: avro_schema(1, SCHEMA)}))
    same(fast, slow)
    pq.write_table(pa.table({"d": fast.data}), io.BytesIO())  # nulls in structs hold values Parquet takes


def test_a_map_key_twice_and_another_writer_go_to_fastavro():
    m = {"type": "record", "name": "M", "fields": [{"name": "m", "type": {"type": "map", "values": "int"}}]}
    v2 = {**m, "fields": m["fields"] + [{"name": "n", "type": "int", "default": 5}]}
    twice = frame(2, b"\x04\x02a\x02\x02a\x04\x00\x00")  # {"a": 1, "a": 2} as written, one block
    values = [avro_framed(2, v2, {"m": {"a": 1, "b": 2}, "n": 3}), twice, avro_framed(1, m, {"m": {"x": 7}}),
              frame(2, b"\x01\x06\x02a\x02\x00\x00")]  # a negative count: a block with its size
    fast, slow = both(values, FakeSource({1: avro_schema(1, m), 2: avro_schema(2, v2)}))
    same(fast, slow)
    # Each record read with its own writer: the older one has no `n` (null, not v2's default).
    assert fast.data.to_pylist() == [{"m": [("a", 1), ("b", 2)], "n": 3}, {"m": [("a", 2)], "n": 0},
                                     {"m": [("x", 7)], "n": None}, {"m": [("a", 1)], "n": 0}]


def test_a_union_of_one_family_keeps_the_branch_written_read_either_way():
    """0.1 and 1e300 written in the double branch of ["null", "float", "double"] are the double member's,
    and a small long the long member's of ["int", "long"]: the branch the bytes' index names, not the
    first one whose type takes the Python value (which put them in the float member, as
    0.10000000149011612 and inf)."""
    s = {"type": "record", "name": "U", "fields": [{"name": "f", "type": ["null", "float", "double"]},
                                                   {"name": "i", "type": ["int", "long"]}]}
    assert avro.compile(avro_schema(1, s)).columns is not None
    double = [frame(1, b"\x04" + struct.pack("<d", x) + b"\x02\x0a") for x in (0.1, 1e300)]  # i: long 5
    fast, slow = both(double + [frame(1, b"\x02" + struct.pack("<f", 0.5) + b"\x00\x0a")], FakeSource({1: avro_schema(1, s)}))
    same(fast, slow)
    assert fast.data.to_pylist() == [
        {"f": {"member0": None, "member1": 0.1}, "i": {"member0": None, "member1": 5}},
        {"f": {"member0": None, "member1": 1e300}, "i": {"member0": None, "member1": 5}},
        {"f": {"member0": 0.5, "member1": None}, "i": {"member0": 5, "member1": None}}]


def test_a_union_with_a_uuid_stays_with_fastavro():
    s = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["null", "string", {
        "type": "string", "logicalType": "uuid"}]}]}
    assert avro.compile(avro_schema(1, s)).columns is None


def test_strict_raises_for_the_first_bad_record_as_fastavro_does(monkeypatch):
    values = column([frame(1, plain_value(0)), frame(1, plain_value(1)[:-1]), frame(1, b"\x00")])
    source, strict = FakeSource({1: avro_schema(1, SCHEMA)}), Side("avro", strict=True)
    with pytest.raises(UndecodableRecord) as fast:
        decode(values, strict, source, offsets=[7, 8, 9])
    monkeypatch.setattr(writers, "columns", lambda w: None)
    with pytest.raises(UndecodableRecord) as slow:
        decode(values, strict, source, offsets=[7, 8, 9])
    assert (fast.value.index, fast.value.offset, fast.value.reason) == (slow.value.index, 8, slow.value.reason)


def plain_value(i: int) -> bytes:
    return plain({"i": i, "l": -i, "f": 0.5, "d": 1.5, "b": True, "s": "é", "by": b"\x00", "e": "RED",
                  "fx": b"abcd", "day": 1, "tmil": 2, "tmic": 3, "tms": 4, "tus": 5, "tns": 6, "local": 7,
                  "opt": None, "pt": {"x": 1.0, "tag": "t"}, "multi": ("p.Pt", {"x": 2.0, "tag": "u"}),
                  "arr": [{"n": None, "t": {"k": b"wxyz"}}], "m": {"a": [None, 1]}})


def test_a_chunk_of_the_bench_events_reads_in_one_pass():
    from matos_dev.bench.typed_workload import SCHEMA as EVENT
    from matos_dev.bench.typed_workload import Events

    events = Events()
    values = [events.avro(i, 3) for i in range(300)]
    fast, slow = both(values, FakeSource({3: avro_schema(3, EVENT)}))
    same(fast, slow)
    assert fast.decoded == 300 and json.loads(json.dumps(fast.data[5].as_py()["tags"])) == events.event(5)["tags"]


NO_PANDAS = """
import json, sys
from matos_dagster.core.records import arrays
from matos_dagster.core.records.objects import ObjectWriter
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.schemas.decode import Side
from matos_dagster.core.schemas.sources import AVRO, Schema
from matos_dagster.core.schemas.typed import ObjectTypes, Typing
from matos_dev.bench.typed_workload import SCHEMA as EVENT, Events
import pyarrow as pa

class Source:
    framed = True
    def get(self, schema_id, schema_type):
        return Schema(schema_id, AVRO, json.dumps(EVENT))

events, n = Events(), 500
values = arrays.binaries([events.avro(i, 3) for i in range(n)])
chunk = pa.RecordBatch.from_arrays([arrays.strings(["t"] * n), arrays.numbers([0] * n, pa.int32()),
                                    arrays.numbers(range(n), pa.int64()), arrays.numbers(range(n), pa.int64()).cast(SCHEMA.field("timestamp").type),
                                    arrays.strings(["CreateTime"] * n), arrays.binaries([b"k"] * n), values,
                                    pa.nulls(n, SCHEMA.field("headers").type)], schema=SCHEMA)
types = ObjectTypes(Typing(value=Side("avro"), value_source=Source()), "t", 0)
typed, rest = types.add(chunk)
assert rest is None
writer = ObjectWriter("parquet", typed.schema)
writer.write(typed)
writer.finish()
assert types.stats()["value"]["decoded"] == n, types.stats()
assert "pandas" not in sys.modules, "the typed path imported pandas"
"""


def test_a_typed_avro_object_is_written_without_importing_pandas():
    """pyarrow's first conversion of Python or numpy values (`pa.array`) imports pandas: a Spark
    worker's first typed task paid about 0.3 s of CPU and 30 MiB or more of memory for it."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", NO_PANDAS], check=True, timeout=120)
