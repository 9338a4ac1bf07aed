"""Avro records as Arrow: each Avro type's Arrow type, and values that come out exactly as written
(decimals keep their scale, timestamps their precision)."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest
from schema_support import FakeSource, avro_framed, avro_schema, column

from matos_dagster.core.schemas.arrow_types import avro_type
from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.errors import SchemaError

UTC = datetime.timezone.utc


def record(*fields, name: str = "R") -> dict:
    return {"type": "record", "name": name, "namespace": "t", "fields": [{"name": n, "type": t} for n, t in fields]}


def one(schema: dict, value):
    """The value written with `schema`, decoded: (the Arrow type, the Python value back)."""
    out = decode(column([avro_framed(1, schema, value)]), Side("avro"), FakeSource({1: avro_schema(1, schema)}))
    assert out.errors.to_pylist() == [None]
    return out.data.type, out.data.to_pylist()[0]


@pytest.mark.parametrize("avro, arrow", [
    ("boolean", pa.bool_()), ("int", pa.int32()), ("long", pa.int64()), ("float", pa.float32()),
    ("double", pa.float64()), ("bytes", pa.binary()), ("string", pa.string()), ("null", pa.null()),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, pa.string()),
    ({"type": "fixed", "name": "F", "size": 4}, pa.binary(4)),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, pa.decimal128(10, 2)),
    ({"type": "fixed", "name": "D", "size": 20, "logicalType": "decimal", "precision": 40, "scale": 3},
     pa.decimal256(40, 3)),
    ({"type": "int", "logicalType": "date"}, pa.date32()),
    ({"type": "int", "logicalType": "time-millis"}, pa.time32("ms")),
    ({"type": "long", "logicalType": "time-micros"}, pa.time64("us")),
    ({"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("ms", "UTC")),
    ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us", "UTC")),
    ({"type": "long", "logicalType": "timestamp-nanos"}, pa.timestamp("ns", "UTC")),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("ms")),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, pa.timestamp("us")),
    ({"type": "string", "logicalType": "uuid"}, pa.string()),
    ({"type": "bytes", "logicalType": "decimal"}, pa.binary()),  # no precision: not a decimal, its bytes
    ({"type": "long", "logicalType": "no-such-type"}, pa.int64()),
    ({"type": "array", "items": "int"}, pa.list_(pa.field("item", pa.int32(), nullable=False))),
    ({"type": "map", "values": ["null", "long"]}, pa.map_(pa.string(), pa.field("value", pa.int64()))),
    (["null", "string"], pa.string()),
    (["string", "null"], pa.string()),
    (["int", "string"], pa.struct([pa.field("member0", pa.int32()), pa.field("member1", pa.string())])),
    (["null", "int", "string"], pa.struct([pa.field("member0", pa.int32()), pa.field("member1", pa.string())])),
])
def test_each_avro_type_has_its_arrow_type(avro, arrow):
    assert avro_type(_dumps(record(("f", avro)))) == pa.struct([
        pa.field("f", arrow, nullable=isinstance(avro, list) and "null" in avro or avro == "null")])


def test_a_record_is_a_struct_and_only_unions_with_null_are_nullable():
    assert avro_type(_dumps(record(("a", "int"), ("b", ["null", "int"])))) == pa.struct([
        pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.int32())])


def test_a_decimal_keeps_its_scale():
    schema = record(("price", {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}),
                    ("fixed", {"type": "fixed", "name": "P", "size": 8, "logicalType": "decimal", "precision": 18,
                               "scale": 4}))
    _, got = one(schema, {"price": Decimal("12.30"), "fixed": Decimal("-0.0100")})
    assert got == {"price": Decimal("12.30"), "fixed": Decimal("-0.0100")}
    assert str(got["price"]) == "12.30" and str(got["fixed"]) == "-0.0100"


def test_dates_and_times():
    schema = record(("d", {"type": "int", "logicalType": "date"}), ("tm", {"type": "int", "logicalType": "time-millis"}),
                    ("tu", {"type": "long", "logicalType": "time-micros"}))
    value = {"d": datetime.date(1969, 7, 20), "tm": datetime.time(23, 59, 59, 999000),
             "tu": datetime.time(0, 0, 0, 1)}
    assert one(schema, value)[1] == value


def test_timestamp_millis_and_micros_keep_their_precision():
    schema = record(("ms", {"type": "long", "logicalType": "timestamp-millis"}),
                    ("us", {"type": "long", "logicalType": "timestamp-micros"}),
                    ("local", {"type": "long", "logicalType": "local-timestamp-micros"}))
    at = datetime.datetime(2024, 2, 29, 12, 0, 0, 123456, tzinfo=UTC)
    arrow, got = one(schema, {"ms": at.replace(microsecond=123000), "us": at, "local": at.replace(tzinfo=None)})
    assert got == {"ms": at.replace(microsecond=123000), "us": at, "local": at.replace(tzinfo=None)}
    assert [f.type for f in arrow] == [pa.timestamp("ms", "UTC"), pa.timestamp("us", "UTC"), pa.timestamp("us")]


def test_timestamp_nanos_keep_every_nanosecond():
    schema = record(("ns", {"type": "long", "logicalType": "timestamp-nanos"}))
    out = decode(column([avro_framed(1, schema, {"ns": 1_709_208_000_123_456_789})]), Side("avro"),
                 FakeSource({1: avro_schema(1, schema)}))
    assert out.data.field("ns").cast(pa.int64()).to_pylist() == [1_709_208_000_123_456_789]


def test_enums_fixed_uuid_and_bytes():
    schema = record(("e", {"type": "enum", "name": "Suit", "symbols": ["HEARTS", "SPADES"]}),
                    ("f", {"type": "fixed", "name": "Four", "size": 4}), ("b", "bytes"),
                    ("u", {"type": "string", "logicalType": "uuid"}))
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert one(schema, {"e": "SPADES", "f": b"\x00\x01\x02\xff", "b": b"", "u": u})[1] == {
        "e": "SPADES", "f": b"\x00\x01\x02\xff", "b": b"", "u": str(u)}


def test_unions_with_null_are_nullable_values():
    schema = record(("s", ["null", "string"]), ("e", ["null", {"type": "enum", "name": "E", "symbols": ["X", "Y"]}]),
                    ("r", ["null", record(("v", "int"), name="Inner")]))
    assert one(schema, {"s": None, "e": "Y", "r": {"v": 5}})[1] == {"s": None, "e": "Y", "r": {"v": 5}}
    assert one(schema, {"s": "x", "e": None, "r": None})[1] == {"s": "x", "e": None, "r": None}


def test_a_multi_branch_union_is_a_struct_with_the_written_member_set():
    point = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}
    schema = record(("u", ["null", "int", "string", point, {"type": "enum", "name": "E", "symbols": ["A"]}]))
    none = {"member0": None, "member1": None, "member2": None, "member3": None}
    # fastavro is told a named branch by its name: ("t.Point", value)
    for written, member, value in [(7, "member0", 7), ("seven", "member1", "seven"),
                                   (("t.Point", {"x": 7}), "member2", {"x": 7}), (("t.E", "A"), "member3", "A")]:
        assert one(schema, {"u": written})[1] == {"u": {**none, member: value}}
    assert one(schema, {"u": None})[1] == {"u": None}


def test_int_and_long_branches_are_told_apart_by_range():
    schema = record(("n", ["int", "long"]))
    assert one(schema, {"n": 5})[1] == {"n": {"member0": 5, "member1": None}}
    assert one(schema, {"n": 2**40})[1] == {"n": {"member0": None, "member1": 2**40}}


def test_arrays_maps_and_nesting():
    line = {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}}]}
    schema = record(("lines", {"type": "array", "items": line}), ("tags", {"type": "map", "values": "long"}),
                    ("deep", {"type": "map", "values": {"type": "array", "items": ["null", "Line"]}}))
    value = {"lines": [{"sku": "a", "price": Decimal("1.50")}, {"sku": "b", "price": Decimal("0.05")}],
             "tags": {"x": 1, "y": -2}, "deep": {"k": [None, {"sku": "c", "price": Decimal("9.99")}], "e": []}}
    arrow, got = one(schema, value)
    assert got == {"lines": value["lines"], "tags": [("x", 1), ("y", -2)],
                   "deep": [("k", value["deep"]["k"]), ("e", [])]}
    assert arrow.field("deep").type.item_type.value_type == pa.struct(
        [pa.field("sku", pa.string(), nullable=False), pa.field("price", pa.decimal128(6, 2), nullable=False)])


def test_named_types_are_reused_by_name():
    schema = {"type": "record", "name": "Pair", "namespace": "geo", "fields": [
        {"name": "a", "type": {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "double"}]}},
        {"name": "b", "type": "Point"}, {"name": "c", "type": "geo.Point"}]}
    point = pa.struct([pa.field("x", pa.float64(), nullable=False)])
    assert avro_type(_dumps(schema)) == pa.struct([pa.field(n, point, nullable=False) for n in "abc"])


def test_a_recursive_record_is_refused_naming_it():
    node = {"type": "record", "name": "Node", "namespace": "list", "fields": [
        {"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}
    with pytest.raises(SchemaError, match=r"record list\.Node contains itself \(list\.Node -> list\.Node\)"):
        avro_type(_dumps(node))


def test_a_top_level_non_record_schema_is_its_type():
    assert one("string", "plain")[1] == "plain"
    assert one({"type": "array", "items": "int"}, [1, 2]) == (pa.list_(pa.field("item", pa.int32(), False)), [1, 2])


def _dumps(schema) -> str:
    import json

    return json.dumps(schema)
