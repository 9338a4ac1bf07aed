"""Decode one column of keys or values into typed Arrow data, beside the raw bytes the caller keeps.

`decode(values, side, source)` gives a `Decoded`: the data (ONE Arrow type for the whole call,
a struct for records), the schema id each record named, and for each record that did not
decode the reason why. The rules:

- a null value is null data, and no error;
- a record that does not decode never raises, whatever its bytes make a reader do: its data is
  null and its reason is in `errors` ("no magic byte", "unknown schema id 7", "corrupt payload:
  ...") - the raw bytes, kept by the caller, still hold it. With `Side.strict` the first such
  record raises `UndecodableRecord` instead, naming it;
- `RegistryUnavailable` always propagates: the registry's absence is not the record's fault,
  the run fails and is retried;
- every record is read with the schema it was written with, the one its wire prefix names
  (writers.py): it keeps every field its writer set, and gains none. The data's type is the
  union of the records' writers' types (union.py: fields by name, the newest writer's first,
  numbers widened), or `into` (an object's type, which holds every writer of these records);
  a writer whose type has no union with the earlier ones' is an error for its records here
  (typed.py cuts an object there instead);
- `Side.types`: `one` types every record of the side in that one type; `by_record_name` makes
  the data a struct of one member per record name (`value_data.Order`, `value_data.Refund`),
  each member the union of its own writers' types, null where the record is of another;
- schemaless JSON is typed as schemaless.py infers it, `into` growing with the values.

Framed Avro is read a column at a time (avro_columns.py: no Python object per record) wherever
the writer's schema allows, any record it leaves by fastavro, one Python value per record: the
same data, errors and counts either way (tests/core/schemas/test_schema_avro_columns.py).
pyarrow imports pandas (if installed) on its first conversion from Python objects: the
per-record path imports it on its first decode, never at import; the column path builds its
arrays from buffers and never imports it. Side is a frozen dataclass: it pickles to Spark workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from matos_dagster.core.records import arrays as arrow_arrays
from matos_dagster.core.schemas import schemaless, writers
from matos_dagster.core.schemas.errors import UndecodableRecord
from matos_dagster.core.schemas.sources import Source
from matos_dagster.core.schemas.union import Conflict, joined, placed
from matos_dagster.core.schemas.writers import SCHEMA_TYPES, Writer, Writers, scan

__all__ = ["FORMATS", "SCHEMA_TYPES", "TYPES", "Decoded", "Side", "decode", "type_of"]

FORMATS = ("avro", "protobuf", "json_schema", "json", "none")
TYPES = ("one", "by_record_name")  # Side.types


@dataclass(frozen=True)
class Side:
    """How one side (key or value) of a topic's records is encoded."""

    format: str = "none"  # avro | protobuf | json_schema (schema from a source) | json (schemaless) | none
    strict: bool = False  # a record that does not decode raises instead of being reported
    types: str = "one"  # one type for every record, or one member per record name (by_record_name)

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r}: one of {', '.join(FORMATS)}")
        if self.types not in TYPES:
            raise ValueError(f"unknown types {self.types!r}: one of {', '.join(TYPES)}")


@dataclass(frozen=True)
class Decoded:
    data: pa.Array  # one type for the whole call (null type if no record had a usable schema)
    schema_ids: pa.Array  # int32: the id each framed record named, null where none
    errors: pa.Array  # string: null, or why the record did not decode
    reader_schema_id: int | None  # the newest schema id of the writers in the data's type (None: a file's, or none)
    decoded: int = 0
    failed: int = 0
    nulls: int = 0  # null values (null data, not errors)


def type_of(found: Sequence[Writer], types: str = "one") -> pa.DataType | None:
    """The type the records of these writers share: Conflict if there is none."""
    if not found:
        return None
    ordered = sorted(found, key=lambda w: (-1 if w.schema_id is None else w.schema_id, w.key))  # the newest last
    if types == "one":
        return joined([w.type for w in ordered])
    names = sorted({w.name for w in ordered})
    return pa.struct([pa.field(name, joined([w.type for w in ordered if w.name == name])) for name in names])


def decode(values: pa.Array | pa.ChunkedArray, side: Side, source: Source | None = None,
           offsets: Sequence[int] | None = None, found: Writers | None = None,
           into: pa.DataType | None = None) -> Decoded:
    """Decode a binary column (keys or values) as `side` says, schemas from `source`.

    `offsets`, if given, the records' Kafka offsets: strict mode names the failing one by it.
    `found`: the column's `writers.scan`, if the caller has it; `into`: the type to give the data
    (see the module's doc).
    """
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    n = len(arr)
    nulls = arr.null_count
    ids = pa.nulls(n, pa.int32())
    reader_id = None
    if side.format == "none":
        errors: list[str | None] = [None] * n
        data = pa.nulls(n)
    elif side.format == "json":
        errors = [None] * n
        data, _ = schemaless.decode(arr.to_pylist(), into, errors)
    else:
        if source is None:
            raise ValueError(f"format {side.format} needs a schema source")
        ws = found if found is not None else scan(arr, side.format, source)
        errors = list(ws.errors)
        data, reader_id = _typed(ws, side, into, errors)
        if source.framed:
            ids = arrow_arrays.indices(ws.ids, ws.ids >= 0, pa.int32())
    first = next((i for i, e in enumerate(errors) if e is not None), None)
    if side.strict and first is not None:
        raise UndecodableRecord(first, errors[first], None if offsets is None else int(offsets[first]))
    failed = n - errors.count(None)
    decoded = 0 if side.format == "none" else n - nulls - failed
    return Decoded(data, ids, pa.array(errors, pa.string()) if failed else pa.nulls(n, pa.string()), reader_id,
                   decoded=decoded, failed=failed, nulls=nulls)


def _typed(ws: Writers, side: Side, into: pa.DataType | None,
           errors: list[str | None]) -> tuple[pa.Array, int | None]:
    """The records of `ws` read with their writers, in one type; and the newest writer's id."""
    present = ws.present()
    if into is None:  # the union of the writers here: one that has none with the earlier ones is an error
        joinable: list[Writer] = []
        for _, code in present:
            w = ws.found[code]
            try:
                type_of([*joinable, w], side.types)
                joinable.append(w)
            except Conflict as e:
                for i in ws.rows(code).tolist():
                    errors[i] = writers.one_line(f"schema {w.schema_id} has no type in common with the other "
                                                 f"records' schemas here ({e})")
        present = [(r, c) for r, c in present if ws.found[c] in joinable]
        file = [w for w in ws.found if w.schema_id is None]  # a schema file's: its type even with no record
        into = type_of(joinable or file, side.types)
    n = len(ws)
    if into is None:
        return pa.nulls(n), None
    parts: dict[str, list[tuple[np.ndarray, pa.Array]]] = {}
    for _, code in present:
        w = ws.found[code]
        parts.setdefault(w.name, []).append(writers.read(side.format, ws, w, ws.rows(code), errors))
    ids = [ws.found[c].schema_id for _, c in present if ws.found[c].schema_id is not None]
    newest = max(ids) if ids else None
    if side.types == "one":
        return placed([p for ps in parts.values() for p in ps], n, into), newest
    members, valid = [], np.zeros(n, bool)
    for field in into:
        got = parts.get(field.name, [])
        for rows, _ in got:
            valid[rows] = True
        members.append(placed(got, n, field.type))
    return pa.StructArray.from_arrays(members, fields=list(into), mask=arrow_arrays.booleans(~valid)), newest
