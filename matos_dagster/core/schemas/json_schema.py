"""JSON Schema: a schema's Arrow type and the converter of parsed JSON values to it.

JSON Schema describes what may be valid far more than what a value's shape is, so only the
shapes with one obvious Arrow type are typed; everything else is a string column holding the
value's JSON text (nothing is lost, and any engine can parse it further). Every field is
nullable: a property may be absent whatever `required` says of it.

The mapping, and why where there was a choice:
    object with properties -> struct of them (properties the schema does not name are dropped
        from the typed column: the raw value keeps them)
    array with one `items` schema -> list
    string -> string; `format` (date-time, date, uuid...) stays string: a format is an
        assertion producers need not honour, and a string loses nothing
    integer -> int64; number -> float64; boolean -> bool; null -> null
    a type list or anyOf/oneOf of null and one T -> T, nullable
    local `$ref`s (#/definitions/..., #/$defs/...) are followed; a recursive one, an external
        one, other unions, allOf, tuples, objects without properties, `{}`: the JSON text
A string column takes a value of another JSON type as its JSON text (a number 5 as "5") rather
than refusing the record; integer, number, boolean, object and array columns refuse a value of
another type, and the record's reason names where.

Schemaless JSON is typed by schemaless.py.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Callable

import pyarrow as pa

from matos_dagster.core.schemas.errors import SchemaError
from matos_dagster.core.schemas.sources import JSON, Schema, parse_json

Convert = Callable[[Any], Any]


class Mismatch(ValueError):
    """A value that does not have its schema's shape; `path` says where in it."""

    def __init__(self, path: str, what: str):
        self.path, self.what = path, what
        super().__init__(f"{what} at {path}")

    def under(self, step: str) -> "Mismatch":
        return Mismatch("$" + step + self.path[1:], self.what)


@lru_cache(maxsize=256)
def compile(schema: Schema) -> tuple[pa.DataType, Convert]:
    """The Arrow type of a JSON Schema and the converter of json.loads values to it."""
    if schema.schema_type != JSON:
        raise SchemaError(f"schema {schema.id} is {schema.schema_type}, not JSON")
    doc = parse_json(schema.text, f"schema {schema.id}")
    return _walk(doc, doc, ("#",))  # the root is on the stack: a `$ref: "#"` inside it is recursive


def text(v: Any) -> str | None:
    return None if v is None else json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _walk(node: Any, root: Any, refs: tuple[str, ...]) -> tuple[pa.DataType, Convert]:
    if not isinstance(node, dict):
        return pa.string(), text  # `true`, `false`: any value, or none
    if "$ref" in node:
        ref = node["$ref"]
        target = _pointer(root, ref) if isinstance(ref, str) and ref.startswith("#") and ref not in refs else None
        return (pa.string(), text) if target is None else _walk(target, root, refs + (ref,))
    kind = node.get("type")
    if isinstance(kind, list):
        others = [k for k in kind if k != "null"]
        if len(others) != 1:
            return (pa.null(), _null) if not others else (pa.string(), text)
        kind = others[0]
    if kind is None:
        for key in ("anyOf", "oneOf"):
            if isinstance(node.get(key), list):
                others = [b for b in node[key] if not (isinstance(b, dict) and b.get("type") == "null")]
                return _walk(others[0], root, refs) if len(others) == 1 else (pa.string(), text)
        if "properties" in node:
            kind = "object"
        elif "items" in node:
            kind = "array"
        elif isinstance(node.get("enum"), list) and all(isinstance(v, str) for v in node["enum"]):
            kind = "string"
        elif isinstance(node.get("const"), str):
            kind = "string"
    if kind == "object" and isinstance(node.get("properties"), dict) and node["properties"]:
        return _object(node["properties"], root, refs)
    if kind == "array" and isinstance(node.get("items"), (dict, bool)):
        item_type, item_convert = _walk(node["items"], root, refs)
        return pa.list_(item_type), _list(item_convert)
    return _SCALARS.get(kind, (pa.string(), text))


def _object(properties: dict, root: Any, refs: tuple[str, ...]) -> tuple[pa.DataType, Convert]:
    fields, converts = [], []
    for name, sub in properties.items():
        t, c = _walk(sub, root, refs)
        fields.append(pa.field(name, t))
        converts.append((name, c))

    def convert(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise Mismatch("$", f"expected an object, got {_kind(v)}")
        out = {}
        for name, c in converts:
            try:
                out[name] = c(v.get(name))
            except Mismatch as e:
                raise e.under(f".{name}") from None
        return out
    return pa.struct(fields), convert


def _list(item: Convert) -> Convert:
    def convert(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, list):
            raise Mismatch("$", f"expected an array, got {_kind(v)}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except Mismatch as e:
                raise e.under(f"[{i}]") from None
        return out
    return convert


def _pointer(root: Any, ref: str) -> Any:
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise SchemaError(f"$ref {ref} points at nothing")
        node = node[part]
    return node


def _kind(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "an object"}.get(type(v), type(v).__name__)


def _null(v: Any) -> None:
    if v is not None:
        raise Mismatch("$", f"expected null, got {_kind(v)}")


def _string(v: Any) -> Any:
    return v if v is None or isinstance(v, str) else text(v)


def _integer(v: Any) -> Any:
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v
    if isinstance(v, float) and v.is_integer():  # JSON Schema: 1.0 is an integer
        return int(v)
    raise Mismatch("$", f"expected an integer, got {_kind(v)}")


def _number(v: Any) -> Any:
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return None if v is None else float(v)
    raise Mismatch("$", f"expected a number, got {_kind(v)}")


def _boolean(v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return v
    raise Mismatch("$", f"expected a boolean, got {_kind(v)}")


_SCALARS = {
    "string": (pa.string(), _string), "integer": (pa.int64(), _integer), "number": (pa.float64(), _number),
    "boolean": (pa.bool_(), _boolean), "null": (pa.null(), _null),
}
