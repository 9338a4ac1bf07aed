"""Avro: a schema's Arrow type, the converter from fastavro's values to it, and reading one record.

The type and the converter come from one walk of the schema (`compile`), so they cannot
disagree on a branch or a logical type. A record is read by fastavro's `schemaless_reader` with
the schema it was written with (decode.py never resolves it to another version: the record
keeps every field its writer set, union.py makes one type of several versions); named types in
unions come back as `(name, value)` pairs, so a union's branch is known by name. So that every
branch is known so, whatever its type: before fastavro parses a schema, each unnamed branch of
a union of several (`"int"`, `"double"`, a timestamp, an array) is wrapped in a record of one
field of its own (`matos_branch_<n>`, in the enclosing namespace), whose binary encoding is the
branch's own. A 0.1 written in the double branch of ["null", "float", "double"] is then read in
the double member, not guessed from its Python value (a float either way). The wrappers are
invisible in the Arrow type, and avro_columns.py reads them as their branch.

The mapping, and why where there was a choice:
    record -> struct; a field is nullable only if its type is a union with null
    ["null", T] (either order) -> T, nullable
    any other union -> struct<member0, member1, ...>, one nullable field per non-null branch,
        the one written set: Spark's Avro reader names them so (it also narrows [int, long] to
        long and [float, double] to double; we keep the struct, one rule for every union)
    enum -> string (the symbol); fixed -> fixed_size_binary(size); bytes -> binary
    string -> string; int -> int32; long -> int64; float -> float32; double -> float64
    decimal (bytes or fixed) -> decimal128(precision, scale), decimal256 past precision 38:
        the scale is the type's, so Decimal('12.30') stays 12.30
    date -> date32; time-millis -> time32('ms'); time-micros -> time64('us')
    timestamp-millis/micros/nanos -> timestamp('ms'/'us'/'ns', 'UTC'); local-timestamp-* -> no tz
    uuid -> string; array -> list; map -> map<string, T>
    a logical type that is not valid (a decimal without precision) or not known -> its base type
A record that contains itself (a linked list, a tree) has no Arrow type of finite depth: it is
refused with a SchemaError naming the record.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple

import fastavro
import pyarrow as pa

from matos_dagster.core.schemas import avro_columns as cols
from matos_dagster.core.schemas.errors import SchemaError
from matos_dagster.core.schemas.sources import AVRO, Schema, parse_json

__all__ = ["Compiled", "compile", "read"]

Convert = Callable[[Any], Any] | None  # None: the value is already what Arrow takes

PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_TIMESTAMPS = {
    "timestamp-millis": ("ms", "UTC"), "timestamp-micros": ("us", "UTC"), "timestamp-nanos": ("ns", "UTC"),
    "local-timestamp-millis": ("ms", None), "local-timestamp-micros": ("us", None),
    "local-timestamp-nanos": ("ns", None),
}
_NAMED = ("record", "error", "enum", "fixed")
BRANCH = "matos_branch_"  # the wrappers' names (see the module's doc)


class Compiled(NamedTuple):
    parsed: Any  # fastavro's parsed schema (unions' branches wrapped), for schemaless_reader
    type: pa.DataType
    convert: Convert
    columns: Any = None  # how avro_columns reads a chunk of its records at once; None: fastavro only
    bare_bytes: bool = False  # a bare "bytes" schema: see `read`
    name: str = ""  # the record's name without its namespace (a primitive's type name): what it is


@lru_cache(maxsize=256)
def compile(schema: Schema) -> Compiled:
    """The parsed schema, its Arrow type and converter (cached per process by the schema itself)."""
    if schema.schema_type != AVRO:
        raise SchemaError(f"schema {schema.id} is {schema.schema_type}, not AVRO")
    named: dict[str, Any] = {}
    parsed = _parse(schema, named, {})
    arrow, _, convert = _walk(parsed, named, ())
    bare = arrow == pa.binary() and (parsed == "bytes" or isinstance(parsed, dict) and parsed.get("type") == "bytes")
    return Compiled(parsed, arrow, convert, None if bare else _plan_columns(parsed, named, arrow), bare,
                    _record_name(parsed))


def read(payload: bytes, writer: Compiled, framed: bool = False) -> Any:
    """One record written with `writer`, converted for Arrow.

    `framed`: the payload came in Confluent's wire format. Confluent's serializers (Java's and
    Python's) write a value of a bare "bytes" schema as it is, not Avro-encoded, and their
    deserializers read it so: such a payload is the value.

    Raises ValueError (or what fastavro raises) for a corrupt payload.
    """
    if framed and writer.bare_bytes:
        return payload
    buf = io.BytesIO(payload)
    value = fastavro.schemaless_reader(buf, writer.parsed, None, return_named_type=True)
    left = len(payload) - buf.tell()
    if left:
        raise ValueError(f"{left} bytes left after the record")
    return value if writer.convert is None else writer.convert(value)


def _parse(schema: Schema, named: dict[str, Any], wrappers: dict) -> Any:
    # References first: they define the named types the schema uses.
    for ref in schema.references:
        _parse(ref.schema, named, wrappers)
    try:
        doc = _wrapped(parse_json(schema.text, f"schema {schema.id}"), "", wrappers)
        return fastavro.parse_schema(doc, named_schemas=named)
    except SchemaError:
        raise
    except Exception as e:  # fastavro's SchemaParseException, UnknownType, ...
        raise SchemaError(f"schema {schema.id} is not a valid Avro schema: {e}") from None


def _wrapped(node: Any, ns: str, wrappers: dict) -> Any:
    """The schema (its JSON) with each unnamed branch of a union of several wrapped in a record of
    one field (see the module's doc). `ns` is the enclosing namespace; `wrappers` the wrappers
    defined so far ((namespace, branch) -> name): one is defined once, then used by its name."""
    if isinstance(node, list):
        branches = [_wrapped(b, ns, wrappers) for b in node]
        if sum(b != "null" for b in branches) < 2:
            return branches
        return [b if b == "null" or _is_named(b) else _wrapper(b, ns, wrappers) for b in branches]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind in ("record", "error"):
        name = node.get("name", "")
        inner = node["namespace"] if "namespace" in node else (name.rpartition(".")[0] if "." in name else ns)
        fields = node.get("fields")
        if isinstance(fields, list):
            node = {**node, "fields": [{**f, "type": _wrapped(f.get("type"), inner or "", wrappers)}
                                       if isinstance(f, dict) else f for f in fields]}
        return node
    if kind == "array" and "items" in node:
        return {**node, "items": _wrapped(node["items"], ns, wrappers)}
    if kind == "map" and "values" in node:
        return {**node, "values": _wrapped(node["values"], ns, wrappers)}
    if isinstance(kind, (list, dict)):
        return {**node, "type": _wrapped(kind, ns, wrappers)}
    return node


def _is_named(branch: Any) -> bool:
    """A named type (record, enum, fixed) or a reference to one: fastavro tags its values itself."""
    if isinstance(branch, str):
        return branch not in PRIMITIVES
    kind = branch.get("type") if isinstance(branch, dict) else None
    return isinstance(kind, str) and (kind in _NAMED or kind not in PRIMITIVES and kind not in ("array", "map"))


def _wrapper(branch: Any, ns: str, wrappers: dict) -> Any:
    key = (ns, json.dumps(branch, sort_keys=True))
    if key in wrappers:
        return wrappers[key]
    name = wrappers[key] = f"{BRANCH}{len(wrappers)}"
    return {"type": "record", "name": name, "fields": [{"name": "v", "type": branch}]}


def _is_wrapper(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "record" and \
        str(node.get("name", "")).rpartition(".")[2].startswith(BRANCH)


def _record_name(parsed: Any) -> str:
    """What the schema's records are: a named type's name without its namespace, else its type."""
    if isinstance(parsed, dict):
        if parsed.get("type") in _NAMED:
            return str(parsed["name"]).rpartition(".")[2]
        return str(parsed.get("type")) if isinstance(parsed.get("type"), str) else "union"
    return parsed if isinstance(parsed, str) else "union"


def _walk(node: Any, named: dict, stack: tuple[str, ...]) -> tuple[pa.DataType, bool, Convert]:
    """(Arrow type, nullable, converter) of a schema node."""
    if isinstance(node, str):
        if node in PRIMITIVES:
            return PRIMITIVES[node], node == "null", None
        if node not in named:
            raise SchemaError(f"unknown Avro type {node}")
        node = named[node]
    if isinstance(node, list):
        return _union(node, named, stack)
    if _is_wrapper(node):  # a union's branch, as it is
        return _walk(node["fields"][0]["type"], named, stack)
    kind = node["type"]
    logical = _logical(node)
    if logical is not None:
        return logical
    if kind == "record" or kind == "error":
        name = node["name"]
        if name in stack:
            raise SchemaError(f"record {name} contains itself ({' -> '.join(stack + (name,))}): "
                              "a recursive record has no Arrow type")
        fields, converts = [], []
        for f in node["fields"]:
            t, nullable, c = _walk(f["type"], named, stack + (name,))
            fields.append(pa.field(f["name"], t, nullable=nullable))
            if c is not None:
                converts.append((f["name"], c))
        return pa.struct(fields), False, _record(converts) if converts else None
    if kind == "enum":
        return pa.string(), False, None
    if kind == "fixed":
        return pa.binary(node["size"]), False, None
    if kind == "array":
        t, nullable, c = _walk(node["items"], named, stack)
        return pa.list_(pa.field("item", t, nullable=nullable)), False, _each(c)
    if kind == "map":
        t, nullable, c = _walk(node["values"], named, stack)
        mapped = pa.map_(pa.string(), pa.field("value", t, nullable=nullable))
        return mapped, False, None if c is None else (lambda d: [(k, c(v)) for k, v in d.items()])
    # {"type": "int"} and the like, or a named type's name as "type".
    return _walk(kind, named, stack)


def _logical(node: dict) -> tuple[pa.DataType, bool, Convert] | None:
    logical, kind = node.get("logicalType"), node["type"]
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = node.get("precision"), node.get("scale", 0)
        if isinstance(precision, int) and isinstance(scale, int) and 0 <= scale <= precision and 0 < precision <= 76:
            return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale), False, None
    elif logical == "date" and kind == "int":
        return pa.date32(), False, None
    elif logical == "time-millis" and kind == "int":
        return pa.time32("ms"), False, None
    elif logical == "time-micros" and kind == "long":
        return pa.time64("us"), False, None
    elif logical in _TIMESTAMPS and kind == "long":
        return pa.timestamp(*_TIMESTAMPS[logical]), False, None  # fastavro gives datetimes, or ints for nanos
    elif logical == "uuid" and kind in ("string", "fixed"):
        return pa.string(), False, str  # fastavro gives uuid.UUID
    return None


def _union(branches: list, named: dict, stack: tuple[str, ...]) -> tuple[pa.DataType, bool, Convert]:
    others = [b for b in branches if b != "null"]
    nullable = len(others) < len(branches)
    if not others:
        return pa.null(), True, None
    if len(others) == 1:
        t, _, c = _walk(others[0], named, stack)
        return t, nullable, None if c is None and _name(others[0], named) is None else _unwrap(c)
    fields, pickers = [], {}
    for i, branch in enumerate(others):
        t, _, c = _walk(branch, named, stack)
        fields.append(pa.field(f"member{i}", t))
        node = named.get(branch) if isinstance(branch, str) else branch
        pickers[_name(branch, named)] = (f"member{i}", _is_wrapper(node), c)
    return pa.struct(fields), nullable, _members(pickers)


def _name(branch: Any, named: dict) -> str | None:
    """The full name of a named branch (record, enum, fixed, a wrapper): fastavro tags its values with it."""
    node = named.get(branch) if isinstance(branch, str) else branch
    return node.get("name") if isinstance(node, dict) and node.get("type") in _NAMED else None


def _members(pickers: dict) -> Callable[[Any], Any]:
    def convert(v: Any) -> Any:
        if v is None:
            return None
        name, v = v  # every branch is named (or wrapped): (name, value)
        member, wrapped, c = pickers[name]
        if wrapped:
            v = v["v"]
        return {member: v if c is None else c(v)}
    return convert


def _unwrap(c: Convert) -> Convert:
    # A union with null whose one branch is named still tags its values: (name, value).
    def convert(v: Any) -> Any:
        if isinstance(v, tuple):
            v = v[1]
        return v if v is None or c is None else c(v)
    return convert


def _record(converts: list[tuple[str, Callable]]) -> Callable[[dict], dict]:
    def convert(d: dict) -> dict:
        for name, c in converts:  # fastavro's dict is fresh for every record: changed in place
            d[name] = c(d[name])
        return d
    return convert


def _each(c: Convert) -> Convert:
    return None if c is None else (lambda items: [c(v) for v in items])


# ------------------------------------------------ reading a chunk at once (avro_columns.py)

_INT_LOGICAL = {"date": pa.date32(), "time-millis": pa.time32("ms")}
_LONG_LOGICAL = {"time-micros": pa.time64("us"), "timestamp-millis": pa.timestamp("ms", "UTC"),
                 "timestamp-micros": pa.timestamp("us", "UTC"), "timestamp-nanos": pa.timestamp("ns", "UTC"),
                 "local-timestamp-millis": pa.timestamp("ms"), "local-timestamp-micros": pa.timestamp("us"),
                 "local-timestamp-nanos": pa.timestamp("ns")}
_COLUMNS = {"null": cols.Null, "boolean": cols.Boolean, "int": lambda: cols.Integer(pa.int32(), 32, None),
            "long": lambda: cols.Integer(pa.int64(), 64, None), "float": lambda: cols.Floating(4),
            "double": lambda: cols.Floating(8), "bytes": lambda: cols.Binary(False),
            "string": lambda: cols.Binary(True)}


def _plan_columns(parsed: Any, named: dict[str, Any], arrow_type: pa.DataType) -> cols.Node | None:
    """How avro_columns reads a chunk of this schema's records at once; None where it leaves the
    schema to fastavro, or would not give `arrow_type` (the mapping above stays the one definition)."""
    try:
        node = _plan(parsed, named, ())
    except cols.Unsupported:
        return None
    return node if node.type.equals(arrow_type) else None


def _plan(node: Any, named: dict, stack: tuple[str, ...]) -> cols.Node:
    if isinstance(node, str):
        if node in _COLUMNS:
            return _COLUMNS[node]()
        if node not in named:
            raise cols.Unsupported(node)
        node = named[node]
    if isinstance(node, list):
        return _plan_union(node, named, stack)
    if _is_wrapper(node):  # a union's branch, read as itself
        return _plan(node["fields"][0]["type"], named, stack)
    kind, logical = node["type"], node.get("logicalType")
    if kind == "int" and logical in _INT_LOGICAL:
        return cols.Integer(_INT_LOGICAL[logical], 32, logical)
    if kind == "long" and logical in _LONG_LOGICAL:
        return cols.Integer(_LONG_LOGICAL[logical], 64, logical)
    if logical == "uuid" and kind in ("string", "fixed") or logical == "decimal" and kind in ("bytes", "fixed"):
        raise cols.Unsupported(logical)
    if kind in ("record", "error"):
        name = node["name"]
        if name in stack:
            raise cols.Unsupported(f"recursive {name}")
        fields = []
        for f in node["fields"]:
            child = _plan(f["type"], named, stack + (name,))
            fields.append((pa.field(f["name"], child.type, nullable=_plan_nullable(f["type"])), child))
        return cols.Record(fields)
    if kind == "enum":
        return cols.Enum(node["symbols"])
    if kind == "fixed":
        return cols.Fixed(node["size"])
    if kind == "array":
        item = _plan(node["items"], named, stack)
        return cols.Items(item, pa.list_(pa.field("item", item.type, nullable=_plan_nullable(node["items"]))))
    if kind == "map":
        value = _plan(node["values"], named, stack)
        values = pa.field("value", value.type, nullable=_plan_nullable(node["values"]))
        return cols.Items(value, pa.map_(pa.string(), values), key=cols.Binary(True))
    return _plan(kind, named, stack)


def _plan_nullable(t: Any) -> bool:
    return t == "null" or isinstance(t, list) and "null" in t or isinstance(t, dict) and t.get("type") == "null"


def _plan_union(branches: list, named: dict, stack: tuple[str, ...]) -> cols.Node:
    # Every branch of a union of several is named or wrapped (see the module's doc): the branch
    # written is the one the index says, as fastavro reads it.
    nodes = [_plan(b, named, stack) for b in branches]
    others = [(b, n) for b, n in zip(branches, nodes) if b != "null"]
    if not others:
        raise cols.Unsupported("a union of null only")
    if len(others) == 1:
        return cols.Union(nodes, others[0][1].type)
    return cols.Union(nodes, pa.struct([pa.field(f"member{i}", n.type) for i, (_, n) in enumerate(others)]))
