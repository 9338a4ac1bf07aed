"""Random schemas and values for the typed-columns fidelity proofs (tests/end_to_end/test_typed_fidelity.py).

For each schema language, a hypothesis strategy draws a whole schema and, with it, what the
test needs to judge an archived record without the product's code:

- `values`: a strategy of values the confluent-kafka serializer of that language writes;
- `arrow`: the Arrow type the documented mapping gives the schema (core/schemas/arrow_types.py);
- `expect(decoded)`: a value as the matching confluent-kafka deserializer returns it, turned
  into what that Arrow type's `to_pylist()` must give, by the documented conversions only
  (maps -> (key, value) pairs, a multi-branch Avro union -> a struct with the written member
  set, a Protobuf enum -> its name, a Timestamp -> nanoseconds since the epoch, a JSON value
  an untyped JSON Schema node holds -> its JSON text).

`canon` makes values comparable EXACTLY: a Decimal by its digits and exponent (so its scale
counts), a timestamp by its nanoseconds since the epoch and whether it has a time zone, a
float by its bits. The Avro value strategies (text, datetimes, decimals) are the ones of
tests/core/schemas/test_schema_avro_properties.py, whose fixed rich schema this generalises.
"""

from __future__ import annotations

import datetime
import decimal
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
from hypothesis import strategies as st

sys.path.append(str(Path(__file__).parent / "core" / "schemas"))  # not a package: its folder
from test_schema_avro_properties import DATETIMES, TEXT, decimals

UTC = datetime.timezone.utc
INT32, INT64 = (-2**31, 2**31 - 1), (-2**63, 2**63 - 1)
_EPOCH = datetime.datetime(1970, 1, 1)


# --------------------------------------------------------------------------- exact comparison


def canon(v: Any) -> Any:
    """`v` in a form whose == is exact: Decimal('1.0') != Decimal('1.00'), a millisecond
    timestamp == the same instant in microseconds (the Arrow type is compared on its own),
    an aware timestamp != a naive one, 0.0 != -0.0, True != 1."""
    if v is None or isinstance(v, (str, bytes)):
        return v
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, Nanos):
        return (v.kind, v.value, True) if v.kind == "timestamp" else (v.kind, v.value)
    if isinstance(v, decimal.Decimal):
        return ("decimal", v.as_tuple())
    if isinstance(v, datetime.datetime):  # pandas' Timestamp (nanosecond units) is one too
        nanos = getattr(v, "value", None) if type(v).__name__ == "Timestamp" else None
        if nanos is None:
            naive = v.astimezone(UTC).replace(tzinfo=None) if v.tzinfo is not None else v
            nanos = (naive - _EPOCH) // datetime.timedelta(microseconds=1) * 1000
        return ("timestamp", nanos, v.tzinfo is not None)
    if isinstance(v, datetime.timedelta):  # and pandas' Timedelta
        nanos = getattr(v, "value", None) if type(v).__name__ == "Timedelta" else None
        return ("duration", nanos if nanos is not None else v // datetime.timedelta(microseconds=1) * 1000)
    if isinstance(v, (datetime.date, datetime.time)):
        return v
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    raise TypeError(f"no exact form for {type(v).__name__}")


@dataclass(frozen=True)
class Nanos:
    """A Protobuf Timestamp (since the epoch, in UTC) or Duration, counted in nanoseconds: what
    `canon` makes of Arrow's timestamp('ns', 'UTC') and duration('ns') values."""

    kind: str  # timestamp | duration
    value: int

    @classmethod
    def of(cls, kind: str, message) -> "Nanos":
        return cls(kind, message.seconds * 10**9 + message.nanos)


def as_spark(t: pa.DataType, v: Any) -> Any:
    """A value of Arrow type `t` as a DataFrame of it gives it back (reader.read_dataframe's
    documented widening, core/spark/frames.py): a decimal past 38 digits as its text; every other
    value is the same (time32 -> time64, ms -> us timestamps and unsigned -> wider signed keep it)."""
    if v is None:
        return None
    if pa.types.is_decimal(t) and t.precision > 38:
        return str(v)  # Arrow's text of a decimal is Python's: digits and exponent, the scale kept
    if pa.types.is_struct(t):
        return {f.name: as_spark(f.type, v[f.name]) for f in t}
    if pa.types.is_map(t):
        return [(k, as_spark(t.item_type, x)) for k, x in v]
    if pa.types.is_list(t):
        return [as_spark(t.value_type, x) for x in v]
    return v


@dataclass
class Typed:
    """One node of a schema: its schema text, values, Arrow type and how a decoded value maps to it."""

    schema: Any  # the node's schema (JSON-able); a Protobuf file is built apart
    values: st.SearchStrategy
    arrow: pa.DataType
    nullable: bool
    expect: Callable[[Any], Any]
    kind: str = ""  # Avro: the Python class of the deserializer's value, one branch a kind in a union
    base: str = ""  # Avro: the unnamed base type (a union holds one of each)
    name: str | None = None  # Avro: a named type's full name
    fields: tuple = ()  # Avro: a record's (name, Typed) of each field


def _same(v: Any) -> Any:
    return v


# --------------------------------------------------------------------------- Avro


class _Names:
    """The named types drawn so far in one schema (a later field may use one by its name)."""

    def __init__(self):
        self.count = 0
        self.defined: list[Typed] = []

    def new(self, ns: str) -> tuple[str, str]:
        """A fresh name, and its full name in the enclosing namespace `ns`."""
        self.count += 1
        return f"N{self.count}", (f"{ns}.N{self.count}" if ns else f"N{self.count}")


def _primitive(kind: str, base: str, arrow: pa.DataType, values, schema=None, expect=_same) -> Typed:
    return Typed(schema or base, values, arrow, False, expect, kind, base)


def _times(unit: str):
    if unit == "ms":
        return st.times().map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))
    return st.times()


def _stamps(unit: str, aware: bool):
    out = DATETIMES
    if unit == "ms":
        out = out.map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))
    return out.map(lambda t: t.replace(tzinfo=UTC)) if aware else out


def _max_digits(size: int) -> int:
    """The most digits any number has that a fixed of `size` bytes holds (two's complement)."""
    return len(str(2 ** (8 * size - 1) - 1)) - 1


DECIMALS = ("decimal", "decimal-fixed")
TEMPORAL = ("date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
            "local-timestamp-micros")
LEAVES = ("boolean", "int", "long", "float", "double", "string", "bytes", "enum", "fixed", "uuid", *DECIMALS, *TEMPORAL)


@st.composite
def _avro_leaf(draw, names: _Names, ns: str, kinds: tuple[str, ...] = LEAVES) -> Typed:
    which = draw(st.sampled_from(kinds))
    if which == "boolean":
        return _primitive("bool", "boolean", pa.bool_(), st.booleans())
    if which in ("int", "long"):
        return _primitive("int", which, pa.int32() if which == "int" else pa.int64(),
                          st.integers(*(INT32 if which == "int" else INT64)))
    if which == "float":
        return _primitive("float", "float", pa.float32(), st.floats(width=32, allow_nan=False))
    if which == "double":
        return _primitive("float", "double", pa.float64(), st.floats(allow_nan=False))
    if which == "string":
        return _primitive("str", "string", pa.string(), TEXT)
    if which == "bytes":
        return _primitive("bytes", "bytes", pa.binary(), st.binary(max_size=12))
    if which in ("enum", "fixed", "decimal-fixed"):
        # A name in no namespace cannot be used from inside one (it would be read as relative to it).
        reused = [t for t in names.defined if t.schema["type"] == which.split("-")[0]
                  and ("logicalType" in t.schema) == (which == "decimal-fixed") and ("." in t.name or not ns)]
        if reused and draw(st.booleans()):  # by its name, as declared earlier in the schema
            t = draw(st.sampled_from(reused))
            return Typed(t.name, t.values, t.arrow, False, t.expect, t.kind, t.base, t.name)
        name, full = names.new(ns)
        if which == "enum":
            symbols = draw(st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True), min_size=1,
                                    max_size=4, unique=True))
            t = Typed({"type": "enum", "name": name, "symbols": symbols}, st.sampled_from(symbols), pa.string(),
                      False, _same, "str", "", full)
        elif which == "fixed":
            size = draw(st.integers(1, 16))
            t = Typed({"type": "fixed", "name": name, "size": size}, st.binary(min_size=size, max_size=size),
                      pa.binary(size), False, _same, "bytes", "", full)
        else:
            size = draw(st.integers(1, 16))
            precision = draw(st.integers(1, _max_digits(size)))
            scale = draw(st.integers(0, precision))
            t = Typed({"type": "fixed", "name": name, "size": size, "logicalType": "decimal", "precision": precision,
                       "scale": scale}, decimals(precision, scale), pa.decimal128(precision, scale), False, _same,
                      "decimal", "", full)
        names.defined.append(t)
        return t
    if which == "decimal":
        precision = draw(st.sampled_from([1, 5, 18, 19, 38]) | st.integers(1, 76))
        scale = draw(st.sampled_from([0, precision]) | st.integers(0, precision))
        arrow = (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
        return _primitive("decimal", "bytes", arrow, decimals(precision, scale),
                          {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale})
    if which == "date":
        return _primitive("date", "int", pa.date32(), st.dates(), {"type": "int", "logicalType": "date"})
    if which.startswith("time-"):
        unit = "ms" if which == "time-millis" else "us"
        return _primitive("time", "int" if unit == "ms" else "long", pa.time32("ms") if unit == "ms" else
                          pa.time64("us"), _times(unit), {"type": "int" if unit == "ms" else "long", "logicalType": which})
    if which == "uuid":
        return _primitive("uuid", "string", pa.string(), st.uuids(), {"type": "string", "logicalType": "uuid"},
                          expect=str)
    unit, aware = ("ms" if which.endswith("millis") else "us"), not which.startswith("local")
    return _primitive("timestamp" if aware else "local-timestamp", "long",
                      pa.timestamp(unit, "UTC" if aware else None), _stamps(unit, aware),
                      {"type": "long", "logicalType": which})


def _record(draw, names: _Names, ns: str, depth: int, always: tuple[tuple[str, ...], ...] = ()) -> Typed:
    """A record of 1 to 5 fields of any type, then one leaf of each of the kinds `always` lists."""
    name, full = names.new(ns)
    decl: dict = {"type": "record", "name": name}
    own = draw(st.sampled_from([None, "", "fid", "fid.deep"]))
    if own is not None:
        decl["namespace"] = own
        full = f"{own}.{name}" if own else name
    inner = full.rpartition(".")[0]
    types = [draw(avro_types(names, inner, depth + 1)) for _ in range(draw(st.integers(1, 5)))]
    types += [draw(_avro_leaf(names, inner, kinds)) for kinds in always]
    fields = [(f"f{i}", t) for i, t in enumerate(types)]
    decl["fields"] = [{"name": n, "type": t.schema} for n, t in fields]

    def expect(v: dict) -> dict:
        return {n: None if v[n] is None else t.expect(v[n]) for n, t in fields}

    return Typed(decl, st.fixed_dictionaries({n: t.values for n, t in fields}),
                 pa.struct([pa.field(n, t.arrow, nullable=t.nullable) for n, t in fields]), False, expect,
                 f"record {full}", "", full, tuple(fields))


def _union(draw, names: _Names, ns: str, depth: int) -> Typed:
    branches: list[Typed] = []
    for _ in range(draw(st.integers(1, 4))):
        b = draw(avro_types(names, ns, depth + 1, unions=False))
        if not any(_clash(b, o) for o in branches):
            branches.append(b)
    null_at = draw(st.sampled_from([None, 0, len(branches)]))
    schema = [b.schema for b in branches]
    if null_at is not None:
        schema.insert(null_at, "null")
    nullable = null_at is not None
    if len(branches) == 1:
        (b,) = branches
        values = b.values | st.none() if nullable else b.values

        def expect_one(v: Any) -> Any:  # a named branch's value may come tagged (name, value)
            return b.expect(v[1] if isinstance(v, tuple) else v)
        return Typed(schema, values, b.arrow, nullable, expect_one, b.kind, b.base)
    members = [f"member{i}" for i in range(len(branches))]
    # A record's value is written as (name, value), fastavro's notation for a union's branch
    # (it takes it for records only); every other branch is the only one of its kind.
    written = [b.values.map(lambda v, n=b.name: (n, v)) if b.kind.startswith("record") else b.values
               for b in branches]
    values = st.one_of(*written, *([st.none()] if nullable else []))

    def expect(v: Any) -> dict:
        out = dict.fromkeys(members)
        for member, b in zip(members, branches):
            if isinstance(v, tuple) and b.name == v[0] or not isinstance(v, tuple) and _is(b.kind, v):
                out[member] = b.expect(v[1] if isinstance(v, tuple) else v)
                return out
        raise AssertionError(f"no branch of {schema} for {v!r}")
    arrow = pa.struct([pa.field(m, b.arrow) for m, b in zip(members, branches)])
    return Typed(schema, values, arrow, nullable, expect, "union", "union")


def _clash(b: Typed, o: Typed) -> bool:
    """Whether two branches cannot be in one union: Avro allows one unnamed branch of a type, the
    deserializer's values tell one kind apart, and fastavro's writer would take a string for a
    logical type's text ("2020-01-01" for a date)."""
    if b.kind == o.kind or b.base and b.base == o.base:
        return True
    return "str" in (b.kind, o.kind) and bool({b.kind, o.kind} & {"decimal", "uuid", "date", "time", "timestamp",
                                                                 "local-timestamp"})


def _is(kind: str, v: Any) -> bool:
    """Whether the deserializer's value `v` is of a branch of this kind."""
    checks = {
        "bool": lambda: isinstance(v, bool), "int": lambda: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda: isinstance(v, float), "str": lambda: isinstance(v, str),
        "bytes": lambda: isinstance(v, bytes), "decimal": lambda: isinstance(v, decimal.Decimal),
        "uuid": lambda: isinstance(v, uuid.UUID),
        "date": lambda: isinstance(v, datetime.date) and not isinstance(v, datetime.datetime),
        "time": lambda: isinstance(v, datetime.time),
        "timestamp": lambda: isinstance(v, datetime.datetime) and v.tzinfo is not None,
        "local-timestamp": lambda: isinstance(v, datetime.datetime) and v.tzinfo is None,
        "list": lambda: isinstance(v, list), "map": lambda: isinstance(v, dict),
    }
    return kind in checks and checks[kind]()


def avro_types(names: _Names, ns: str = "", depth: int = 0, unions: bool = True) -> st.SearchStrategy[Typed]:
    """Any Avro type, nested up to three deep: primitives, logical types, named types, records,
    arrays, maps and unions (with null, and of several branches)."""

    @st.composite
    def draw_type(draw) -> Typed:
        shapes = ["leaf"] * 3 + (["record", "array", "map"] + ["union"] * unions if depth < 3 else [])
        shape = draw(st.sampled_from(shapes))
        if shape == "leaf":
            return draw(_avro_leaf(names, ns))
        if shape == "record":
            return _record(draw, names, ns, depth)
        if shape == "union":
            return _union(draw, names, ns, depth)
        inner = draw(avro_types(names, ns, depth + 1))
        item = pa.field("item" if shape == "array" else "value", inner.arrow, nullable=inner.nullable)

        def each(v: Any) -> Any:
            return None if v is None else inner.expect(v)
        if shape == "array":
            return Typed({"type": "array", "items": inner.schema}, st.lists(inner.values, max_size=3), pa.list_(item),
                         False, lambda vs: [each(v) for v in vs], "list", "array")
        return Typed({"type": "map", "values": inner.schema}, st.dictionaries(TEXT, inner.values, max_size=3),
                     pa.map_(pa.string(), item), False, lambda d: [(k, each(v)) for k, v in d.items()], "map", "map")
    return draw_type()


BARE_BYTES = Typed("bytes", st.binary(max_size=12), pa.binary(), False, _same, "bytes", "bytes")


@st.composite
def avro_schemas(draw, top: str = "record", always: tuple[tuple[str, ...], ...] = (DECIMALS, TEMPORAL)) -> Typed:
    """A whole Avro schema: a record (`top="record"`: whatever else it has, its last fields one
    leaf of each kind `always` lists: by default a decimal, and a date, time or timestamp), or any
    type at all (`top="any"`: a key's schema may be a union or a map as well as a record or a
    primitive)."""
    names = _Names()
    if top == "record":
        return _record(draw, names, "", 0, always=always)
    # Not a bare decimal of bytes: AvroSerializer writes a bare "bytes" schema's value as the
    # payload itself, and has no such case for a Decimal (it fails).
    return draw(avro_types(names).filter(lambda t: not (isinstance(t.schema, dict) and t.base == "bytes"
                                                         and t.kind == "decimal")))


# --------------------------------------------------------------------------- JSON Schema


def json_text(v: Any) -> str:
    """A value an untyped JSON Schema node holds, as the typed column keeps it: its JSON text
    (compact, UTF-8; a string quoted, so "5" and 5 stay apart)."""
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


JSON_ANY = st.recursive(st.none() | st.booleans() | st.integers(*INT64) | st.floats(allow_nan=False, allow_infinity=False)
                        | TEXT, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                        max_leaves=6)


def _json_leaf(draw) -> Typed:
    which = draw(st.sampled_from(["string", "date-time", "enum", "integer", "number", "boolean", "null", "any"]))
    if which in ("string", "date-time", "enum"):
        if which == "enum":
            symbols = draw(st.lists(TEXT, min_size=1, max_size=3, unique=True))
            return Typed({"enum": symbols}, st.sampled_from(symbols), pa.string(), True, _same)
        schema = {"type": "string"} | ({"format": "date-time"} if which == "date-time" else {})
        values = _stamps("us", True).map(lambda t: t.isoformat()) if which == "date-time" else TEXT
        return Typed(schema, values, pa.string(), True, _same)
    if which == "integer":  # 1.0 is an integer too (JSON Schema): the column holds 1
        values = st.integers(*INT64) | st.integers(-2**53, 2**53).map(float)
        return Typed({"type": "integer"}, values, pa.int64(), True, int)
    if which == "number":
        return Typed({"type": "number"}, st.floats(allow_nan=False, allow_infinity=False) | st.integers(*INT64),
                     pa.float64(), True, float)
    if which == "boolean":
        return Typed({"type": "boolean"}, st.booleans(), pa.bool_(), True, _same)
    if which == "null":
        return Typed({"type": "null"}, st.none(), pa.null(), True, _same)
    schema, values = draw(st.sampled_from([
        ({}, JSON_ANY), ({"type": ["string", "integer"]}, TEXT | st.integers(*INT64)),
        ({"oneOf": [{"type": "string"}, {"type": "boolean"}]}, TEXT | st.booleans()),
        ({"type": "object"}, st.dictionaries(TEXT, JSON_ANY, max_size=3)),
        ({"allOf": [{"type": "integer"}]}, st.integers(*INT64))]))
    return Typed(schema, values, pa.string(), True, json_text)


def json_types(defs: dict, depth: int = 0) -> st.SearchStrategy[Typed]:
    """Any JSON Schema node: typed shapes (objects with properties, arrays with items, scalars,
    a type or anyOf with null) and the rest (`{}`, unions, allOf) as JSON text; `$ref`s into
    `defs` (the root's definitions)."""

    @st.composite
    def draw_type(draw) -> Typed:
        shape = draw(st.sampled_from(["leaf"] * 3 + (["object", "array", "nullable", "ref"] if depth < 3 else [])))
        if shape == "leaf":
            return _json_leaf(draw)
        if shape == "object":
            return _json_object(draw, defs, depth)
        inner = draw(json_types(defs, depth + 1))
        if shape == "array" and inner.arrow == pa.null():
            # Not an array of nulls: pyarrow 26 casts a list<null> into an invalid array, so
            # read_dataframe's cast to Spark's types breaks it (a pyarrow bug; read_table is fine).
            inner = Typed({"type": "boolean"}, st.booleans(), pa.bool_(), True, _same)
        if shape == "array":
            return Typed({"type": "array", "items": inner.schema}, st.lists(inner.values, max_size=3),
                         pa.list_(inner.arrow), True, lambda vs: [None if v is None else inner.expect(v) for v in vs])
        if shape == "ref":
            name = f"d{len(defs)}"
            defs[name] = inner.schema
            return Typed({"$ref": f"#/definitions/{name}"}, inner.values, inner.arrow, True, inner.expect)
        if inner.arrow == pa.null():  # null or null: not a nullable type (the JSON text, documented)
            return inner
        if inner.schema.get("type") in ("string", "integer", "number", "boolean") and draw(st.booleans()):
            schema = {**inner.schema, "type": [inner.schema["type"], "null"]}
        else:
            schema = {"anyOf": [{"type": "null"}, inner.schema]}
        return Typed(schema, inner.values | st.none(), inner.arrow, True, inner.expect)
    return draw_type()


def _json_object(draw, defs: dict, depth: int) -> Typed:
    props = [(f"p{i}", draw(json_types(defs, depth + 1))) for i in range(draw(st.integers(1, 5)))]
    required = [n for n, _ in props if draw(st.booleans())]
    schema = {"type": "object", "properties": {n: t.schema for n, t in props}, "required": required}

    @st.composite
    def values(draw) -> dict:
        out = {n: draw(t.values) for n, t in props if n in required or draw(st.booleans())}
        if draw(st.integers(0, 3)) == 0:  # a property the schema does not name: kept in the bytes only
            out["extra"] = draw(JSON_ANY)
        return out

    def expect(v: dict) -> dict:
        return {n: None if v.get(n) is None else t.expect(v[n]) for n, t in props}
    return Typed(schema, values(), pa.struct([pa.field(n, t.arrow) for n, t in props]), True, expect)


@st.composite
def json_schemas(draw) -> Typed:
    """A whole JSON Schema (draft-07): an object at the top, its $ref targets in `definitions`."""
    defs: dict = {}
    t = _json_object(draw, defs, 0)
    t.schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Fidelity", **t.schema,
                **({"definitions": defs} if defs else {})}
    return t


# --------------------------------------------------------------------------- Protobuf
# A random .proto file, built as a FileDescriptorProto (Python's protobuf has no .proto parser):
# messages nested or not, scalars of all 15 types, proto3 `optional`, enums (open: unknown
# numbers too), nested messages, oneofs, repeated fields, maps, and the well-known Timestamp,
# Duration and wrappers. A message refers only to messages drawn after it, so none contains itself.

SCALAR_TYPES = {
    "double": (pa.float64(), st.floats(allow_nan=False)), "float": (pa.float32(), st.floats(width=32, allow_nan=False)),
    "int64": (pa.int64(), st.integers(*INT64)), "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "int32": (pa.int32(), st.integers(*INT32)), "fixed64": (pa.uint64(), st.integers(0, 2**64 - 1)),
    "fixed32": (pa.uint32(), st.integers(0, 2**32 - 1)), "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), TEXT), "bytes": (pa.binary(), st.binary(max_size=12)),
    "uint32": (pa.uint32(), st.integers(0, 2**32 - 1)), "sfixed32": (pa.int32(), st.integers(*INT32)),
    "sfixed64": (pa.int64(), st.integers(*INT64)), "sint32": (pa.int32(), st.integers(*INT32)),
    "sint64": (pa.int64(), st.integers(*INT64)),
}
MAP_KEYS = ["int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string", "uint32", "sfixed32", "sfixed64",
            "sint32", "sint64"]
WRAPPERS = {"DoubleValue": "double", "FloatValue": "float", "Int64Value": "int64", "UInt64Value": "uint64",
            "Int32Value": "int32", "UInt32Value": "uint32", "BoolValue": "bool", "StringValue": "string",
            "BytesValue": "bytes"}
WELL_KNOWN = ["google/protobuf/timestamp.proto", "google/protobuf/duration.proto", "google/protobuf/wrappers.proto"]
# Timestamps and Durations whose nanoseconds since the epoch fit the int64 of Arrow's 'ns'.
_SECONDS = 9_223_372_035


@st.composite
def proto_files(draw):
    """A FileDescriptorProto and the full name of the message the topic's records are."""
    from google.protobuf import descriptor_pb2

    FD = descriptor_pb2.FieldDescriptorProto
    uid = draw(st.integers(0, 10**9))
    file = descriptor_pb2.FileDescriptorProto(name=f"fidelity/f{uid}.proto", package=f"fid.p{uid}", syntax="proto3",
                                              dependency=WELL_KNOWN)
    count = draw(st.integers(1, 4))
    protos, full = [], []
    for i in range(count):  # message i nests in an earlier one, or is at the top
        parent = draw(st.sampled_from([None] + list(range(i))))
        where = file.message_type if parent is None else protos[parent].nested_type
        protos.append(where.add(name=f"M{i}"))
        full.append(f"{file.package}.M{i}" if parent is None else f"{full[parent]}.M{i}")
    enums = []
    for e in range(draw(st.integers(1, 2))):
        owner = draw(st.sampled_from([None] + list(range(count))))
        where = file.enum_type if owner is None else protos[owner].enum_type
        numbers = [0] + draw(st.lists(st.integers(1, 1000), max_size=3, unique=True))
        where.add(name=f"E{e}", value=[descriptor_pb2.EnumValueDescriptorProto(name=f"E{e}_V{n}", number=n)
                                       for n in numbers])
        enums.append(f"{file.package}.E{e}" if owner is None else f"{full[owner]}.E{e}")

    for i, m in enumerate(protos):
        later = full[i + 1:]

        def single() -> dict:
            """One value's type: scalar, enum, message (a later one), or well-known."""
            kinds = ["scalar"] * 3 + ["enum", "well-known"] + ["message"] * bool(later)
            kind = draw(st.sampled_from(kinds))
            if kind == "scalar":
                return {"type": getattr(FD, f"TYPE_{draw(st.sampled_from(sorted(SCALAR_TYPES))).upper()}")}
            if kind == "enum":
                return {"type": FD.TYPE_ENUM, "type_name": "." + draw(st.sampled_from(enums))}
            name = draw(st.sampled_from(later)) if kind == "message" else "google.protobuf." + draw(
                st.sampled_from(["Timestamp"] * 6 + ["Duration"] * 2 + list(WRAPPERS)))
            return {"type": FD.TYPE_MESSAGE, "type_name": "." + name}

        synthetic = []
        for n in range(1, draw(st.integers(1, 7)) + 1):
            name = f"f{n}"
            shape = draw(st.sampled_from(["single", "single", "optional", "repeated", "map", "oneof"]))
            if shape == "map":
                entry = m.nested_type.add(name=f"F{n}Entry")
                entry.options.map_entry = True
                key = getattr(FD, f"TYPE_{draw(st.sampled_from(MAP_KEYS)).upper()}")
                entry.field.add(name="key", number=1, label=FD.LABEL_OPTIONAL, type=key)
                entry.field.add(name="value", number=2, label=FD.LABEL_OPTIONAL, **single())
                m.field.add(name=name, number=n, label=FD.LABEL_REPEATED, type=FD.TYPE_MESSAGE,
                            type_name=f".{full[i]}.F{n}Entry")
            elif shape == "oneof":
                index = len(m.oneof_decl)
                m.oneof_decl.add(name=f"choice{n}")
                for k in range(draw(st.integers(1, 3))):
                    m.field.add(name=f"{name}_{k}", number=100 * n + k, label=FD.LABEL_OPTIONAL, oneof_index=index,
                                **single())
            else:
                spec = single()
                if shape == "optional" and spec["type"] != FD.TYPE_MESSAGE:
                    synthetic.append(m.field.add(name=name, number=n, label=FD.LABEL_OPTIONAL, proto3_optional=True,
                                                 **spec))
                else:
                    label = FD.LABEL_REPEATED if shape == "repeated" else FD.LABEL_OPTIONAL
                    m.field.add(name=name, number=n, label=label, **spec)
        for f in synthetic:  # synthetic oneofs come after the real ones
            f.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=f"_{f.name}")
    return file, draw(st.sampled_from(full))


def proto_pool(file):
    """A pool holding the well-known files and `file`."""
    from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, timestamp_pb2, wrappers_pb2

    pool = descriptor_pool.DescriptorPool()
    for known in (timestamp_pb2, duration_pb2, wrappers_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(known.DESCRIPTOR.serialized_pb))
    pool.Add(file)
    return pool


def _scalar_name(fd) -> str:
    from google.protobuf.descriptor import FieldDescriptor

    return {v: k[len("TYPE_"):].lower() for k, v in vars(FieldDescriptor).items() if k.startswith("TYPE_")}[fd.type]


def _is_repeated(fd) -> bool:
    repeated = getattr(fd, "is_repeated", None)
    return repeated if repeated is not None else fd.label == fd.LABEL_REPEATED


def _is_map(fd) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _one(fd) -> tuple[pa.DataType, bool, st.SearchStrategy, Callable[[Any], Any]]:
    """One value of the field's type: (Arrow type, nullable, values to set, decoded -> expected)."""
    if fd.enum_type is not None:
        names = {v.number: v.name for v in fd.enum_type.values}
        # proto3 enums are open: a number the enum does not name is kept, and typed as its text.
        values = st.sampled_from(sorted(names)) | st.integers(*INT32)
        return pa.string(), False, values, lambda n: names.get(n, str(n))
    if fd.message_type is None:
        arrow, values = SCALAR_TYPES[_scalar_name(fd)]
        return arrow, False, values, _same
    kind = fd.message_type.full_name
    if kind == "google.protobuf.Timestamp":
        values = st.tuples(st.integers(-_SECONDS, _SECONDS), st.integers(0, 10**9 - 1))
        return pa.timestamp("ns", "UTC"), True, values, lambda t: Nanos.of("timestamp", t)
    if kind == "google.protobuf.Duration":
        values = st.tuples(st.integers(-_SECONDS, _SECONDS), st.integers(0, 10**9 - 1)).map(
            lambda sn: (sn[0], sn[1] if sn[0] >= 0 else -sn[1]))  # nanos take the seconds' sign
        return pa.duration("ns"), True, values, lambda d: Nanos.of("duration", d)
    if kind.removeprefix("google.protobuf.") in WRAPPERS:
        arrow, values = SCALAR_TYPES[WRAPPERS[kind.removeprefix("google.protobuf.")]]
        return arrow, True, values, lambda w: w.value
    arrow, values, expect = proto_message(fd.message_type)
    return arrow, True, values, expect


def _set_one(fd, target, value) -> None:
    """Set a singular field (or the value at a message's map key, `target` then its container)."""
    kind = fd.message_type.full_name if fd.message_type is not None else None
    if kind in ("google.protobuf.Timestamp", "google.protobuf.Duration"):
        target.seconds, target.nanos = value
    elif kind is not None and kind.removeprefix("google.protobuf.") in WRAPPERS:
        target.value = value
    else:
        target.CopyFrom(value)


def proto_message(desc) -> tuple[pa.DataType, st.SearchStrategy, Callable[[Any], dict]]:
    """(Arrow type, messages, decoded message -> expected) of a message descriptor."""
    fields, plans, expects = [], [], []
    for fd in desc.fields:
        if _is_map(fd):
            k_arrow, _, k_values, _ = _one(fd.message_type.fields_by_name["key"])
            v_fd = fd.message_type.fields_by_name["value"]
            v_arrow, v_nullable, v_values, v_expect = _one(v_fd)
            fields.append(pa.field(fd.name, pa.map_(k_arrow, pa.field("value", v_arrow, nullable=v_nullable)),
                                   nullable=False))
            plans.append((fd, "map", st.dictionaries(k_values, v_values, max_size=3)))
            # Entries sorted by key: Protobuf maps have no order (upb's changes from process to process).
            expects.append((fd.name, lambda m, n=fd.name, e=v_expect: [(k, e(v)) for k, v in sorted(
                getattr(m, n).items(), key=lambda kv: kv[0])]))
            continue
        arrow, nullable, values, expect = _one(fd)
        if _is_repeated(fd):
            fields.append(pa.field(fd.name, pa.list_(pa.field("item", arrow, nullable=False)), nullable=False))
            plans.append((fd, "repeated", st.lists(values, max_size=3)))
            expects.append((fd.name, lambda m, n=fd.name, e=expect: [e(v) for v in getattr(m, n)]))
        elif fd.has_presence:
            fields.append(pa.field(fd.name, arrow, nullable=True))
            plans.append((fd, "single", values))
            expects.append((fd.name, lambda m, n=fd.name, e=expect: e(getattr(m, n)) if m.HasField(n) else None))
        else:
            fields.append(pa.field(fd.name, arrow, nullable=nullable))
            plans.append((fd, "single", values))
            expects.append((fd.name, lambda m, n=fd.name, e=expect: e(getattr(m, n))))
    cls = _message_class(desc)

    @st.composite
    def messages(draw):
        m = cls()
        chosen = {o.name: draw(st.sampled_from([None, *[f.name for f in o.fields]])) for o in desc.oneofs}
        for fd, shape, values in plans:
            oneof = fd.containing_oneof
            if oneof is not None and chosen[oneof.name] != fd.name:
                continue  # another member of its oneof, or none, is set
            if shape == "single" and fd.has_presence and oneof is None and not draw(st.booleans()):
                continue  # left unset
            value = draw(values)
            if shape == "map":
                container = getattr(m, fd.name)
                for k, v in value.items():
                    if fd.message_type.fields_by_name["value"].message_type is None:
                        container[k] = v
                    else:
                        _set_one(fd.message_type.fields_by_name["value"], container[k], v)
            elif shape == "repeated":
                container = getattr(m, fd.name)
                for v in value:
                    if fd.message_type is None:
                        container.append(v)
                    else:
                        _set_one(fd, container.add(), v)
            elif fd.message_type is None:
                setattr(m, fd.name, value)
            else:
                _set_one(fd, getattr(m, fd.name), value)
        return m

    def expect(m) -> dict:
        return {name: e(m) for name, e in expects}
    return pa.struct(fields), messages(), expect


def _message_class(desc):
    from google.protobuf import message_factory

    return message_factory.GetMessageClass(desc)

