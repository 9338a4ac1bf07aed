"""Objects' tables read together: their raw columns alone (`raw`), or one table of raw and typed (`concat`).

A typed object's schema is `SCHEMA` followed by, for each typed side, `<side>_schema_id`,
`<side>_data` and `<side>_error` (core/schemas/typed.py). The objects of one topic need not
agree: as its schemas evolve a later object's `<side>_data` struct has fields an earlier one
lacks, an object whose side never decoded types it null, and objects archived before the
topic was typed have no typed columns at all. Tables read together take one schema
(`unify`): SCHEMA's columns as they are, then the typed columns (key's, then value's, then
any other) in Arrow's permissive promotion of their types (a struct gains every version's
fields, null takes any type, int32 widens to int64), nullable wherever a version lacks them;
each table is cast to it (`conform`), a column it lacks all null. Tables that already share
one schema are concatenated as they are, so an untyped topic reads exactly as it always did.

Restore and the audit produce and compare records, so they read `raw` columns only: the
typed ones never change what they do. No Dagster imports.
"""

from __future__ import annotations

import struct
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from matos_dagster.core.records.schema import SCHEMA

RAW = SCHEMA.names
SIDES = ("key", "value")
TYPED = [f"{side}{suffix}" for side in SIDES for suffix in ("_schema_id", "_data", "_error")]
# An object's last bytes fetched for its Parquet footer (its schema, row groups and statistics):
# enough for a 64 MiB object's 16 row groups of typed columns; a longer footer costs a second GET.
FOOTER_TAIL = 64 * 1024


class TypesDiffer(ValueError):
    """Typed columns whose types Arrow cannot promote to one (a field that changed its type)."""


def raw(table: pa.Table) -> pa.Table:
    """The table's `SCHEMA` columns, by name: the record as Kafka held it, nothing decoded."""
    return table if table.schema.names == RAW else table.select(RAW)


def typed_fields(schema: pa.Schema) -> list[pa.Field]:
    """The schema's fields after SCHEMA's: its typed columns (none: an untyped object)."""
    return [f for f in schema if f.name not in RAW]


def with_raw_types(table: pa.Table) -> pa.Table:
    """A typed object read from Parquet: SCHEMA's columns first, as SCHEMA types them; its typed ones as they are."""
    want = pa.schema([*SCHEMA, *typed_fields(table.schema)])
    # Only SCHEMA's columns are cast. A typed struct read from Parquet may hold nulls in a
    # non-nullable child where its parent is null (a null record over a struct all of whose own
    # fields are nullable): harmless, but Arrow's cast, even to the very same type, refuses it.
    table = table.select(want.names)
    return pa.Table.from_arrays([c if c.type == f.type else c.cast(f.type) for c, f in zip(table.columns, want)],
                                schema=want)


def unify(schemas: Sequence[pa.Schema], where: str = "") -> pa.Schema:
    """One schema for tables of these schemas (in offset order); the first when they all agree.

    The newest (last) version comes first in the promotion: its field metadata (a typed column's
    format and reader schema id) and its structs' field order are the result's, and the fields
    only older versions have follow theirs.
    """
    first = schemas[0]
    if all(s.equals(first) for s in schemas[1:]):
        return first
    try:
        merged = pa.unify_schemas(list(reversed(schemas)), promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as e:
        raise TypesDiffer(f"{where + ': ' if where else ''}typed columns that cannot be read as one type ({e}); "
                          "read the ranges apart, or their raw columns") from None
    names = [n for n in RAW if n in merged.names] + [n for n in TYPED if n in merged.names]
    names += [n for n in merged.names if n not in names]
    return pa.schema([_loose(merged.field(n), [_of(s, n) for s in schemas]) for n in names],
                     metadata=merged.metadata)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table as `schema`: its columns by name, each cast to the schema's type; one it lacks, all null."""
    columns = []
    for f in schema:
        if f.name not in table.column_names:
            columns.append(pa.chunked_array([pa.nulls(table.num_rows, f.type)], f.type))
            continue
        column = table[f.name]
        columns.append(column if column.type == f.type else column.cast(f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def concat(tables: Sequence[pa.Table], where: str = "") -> pa.Table:
    """The tables, in order, as one: as `pa.concat_tables` when they share a schema, else each
    conformed to their `unify`d schema."""
    first = tables[0].schema
    if all(t.schema.equals(first) for t in tables[1:]):
        return pa.concat_tables(tables)
    schema = unify([t.schema for t in tables], where)
    return pa.concat_tables([conform(t, schema) for t in tables])


def nullable(field: pa.Field) -> pa.Field:
    """The field with it and everything in it nullable (an Iceberg column added to a table is optional)."""
    return _loose(field, [None])


def footer_bytes(tail: bytes) -> int:
    """How many of a Parquet object's last bytes hold its footer (with the length and magic after it)."""
    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise ValueError("not a Parquet object: it does not end with PAR1")
    return struct.unpack("<I", tail[-8:-4])[0] + 8


def footer_schema(tail: bytes) -> pa.Schema:
    """The Arrow schema of a Parquet object from its last `footer_bytes(tail)` bytes (or more)."""
    return pq.read_schema(pa.BufferReader(b"PAR1" + tail[-footer_bytes(tail):]))


def _of(schema: pa.Schema, name: str) -> pa.Field | None:
    i = schema.get_field_index(name)
    return None if i < 0 else schema.field(i)


def _loose(field: pa.Field, versions: list[pa.Field | None]) -> pa.Field:
    """`field` made nullable wherever one of its versions lacks it (None), down its structs and lists:
    a cast fills a field it adds with nulls, which a non-nullable field cannot hold."""
    t = field.type
    if pa.types.is_struct(t):
        t = pa.struct([_loose(t.field(i), [_child(v, t.field(i).name) for v in versions]) for i in range(t.num_fields)])
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _loose(t.value_field, [_item(v) for v in versions])
        t = pa.list_(item) if pa.types.is_list(t) else pa.large_list(item)
    return pa.field(field.name, t, nullable=field.nullable or any(v is None for v in versions), metadata=field.metadata)


def _child(f: pa.Field | None, name: str) -> pa.Field | None:
    if f is None or not pa.types.is_struct(f.type):
        return None
    i = f.type.get_field_index(name)
    return None if i < 0 else f.type.field(i)


def _item(f: pa.Field | None) -> pa.Field | None:
    if f is None or not (pa.types.is_list(f.type) or pa.types.is_large_list(f.type)):
        return None
    return f.type.value_field
