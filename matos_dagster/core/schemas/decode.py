"""Decode one column of keys or values into typed Arrow data, beside the raw bytes the caller keeps.

`decode(values, side, source)` gives a `Decoded`: the data (ONE Arrow type for the whole call,
a struct for records), the schema id each record named, and for each record that did not
decode the reason why. The rules:

- a null value is null data, and no error;
- a record that does not decode never raises: its data is null and its reason is in `errors`
  ("no magic byte", "unknown schema id 7", "corrupt payload: ...", "schema 5 not readable
  with 9: ...") - the raw bytes, kept by the caller, still hold it. With `Side.strict` the
  first such record raises `UndecodableRecord` instead, naming it;
- `RegistryUnavailable` always propagates: the registry's absence is not the record's fault,
  the run fails and is retried;
- one reader schema per call, so one type: the newest (highest id) usable schema among the
  ids the records name, or `Side.reader_schema_id` if set (to keep one type across calls).
  Avro records written with an older version are resolved to it by fastavro (added fields
  get their defaults); a writer that cannot be resolved is an error for its records only.
  Protobuf records are parsed as the reader schema's message of the same name (Protobuf's
  own compatibility: unknown fields ignored, missing ones unset; a field whose type changed
  incompatibly is not detected by the parser and reads as unset); a call whose records are of
  several messages is typed by the most frequent one, the others are errors. JSON Schema
  records are all converted to the reader schema's type.

Framed Avro of the call's reader schema is read a column at a time, straight into Arrow
(avro_columns.py: no Python object per record, about a fifth of the per-record path's CPU on
the bench's events); every other record (another writer, a bad or unusual one, a schema that
reader leaves alone) is read by fastavro, one Python value per record, and `pa.array` makes
the column: the same data, errors and counts either way (tests/core/schemas/
test_schema_avro_columns.py). pyarrow imports pandas (if installed) on its first conversion
from Python objects: the per-record path imports it on its first decode, never at import; the
column path builds its arrays from buffers and never imports it. Side is a frozen dataclass: it
pickles to Spark workers.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from matos_dagster.core.records import arrays as arrow_arrays
from matos_dagster.core.schemas import avro, avro_columns, json_schema, protobuf, wire
from matos_dagster.core.schemas.errors import (
    SchemaError,
    UndecodableRecord,
    UnknownSchema,
)
from matos_dagster.core.schemas.sources import AVRO, JSON, PROTOBUF, Source

__all__ = ["FORMATS", "Decoded", "Side", "decode"]

FORMATS = ("avro", "protobuf", "json_schema", "json", "none")
SCHEMA_TYPES = {"avro": AVRO, "protobuf": PROTOBUF, "json_schema": JSON}
_REASON = 300  # characters of a reason: enough to say what, not a whole payload


@dataclass(frozen=True)
class Side:
    """How one side (key or value) of a topic's records is encoded."""

    format: str = "none"  # avro | protobuf | json_schema (schema from a source) | json (schemaless) | none
    strict: bool = False  # a record that does not decode raises instead of being reported
    reader_schema_id: int | None = None  # the reader schema, instead of the newest one of each call

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ValueError(f"unknown format {self.format!r}: one of {', '.join(FORMATS)}")


@dataclass(frozen=True)
class Decoded:
    data: pa.Array  # one type for the whole call (null type if no record had a usable schema)
    schema_ids: pa.Array  # int32: the id each framed record named, null where none
    errors: pa.Array  # string: null, or why the record did not decode
    reader_schema_id: int | None  # the schema the data is typed by (None: a FileSource's, or none)
    decoded: int = 0
    failed: int = 0
    nulls: int = 0  # null values (null data, not errors)


class _Call:
    """One call's state: per record, its value (converted for Arrow), its reason, its schema id."""

    def __init__(self, n: int):
        self.n = n
        self.out: list = [None] * n
        self.errors: list[str | None] = [None] * n
        self.ids: list[int | None] = [None] * n

    def fail(self, i: int, reason: str) -> None:
        self.errors[i] = _one_line(reason)


def decode(values: pa.Array | pa.ChunkedArray, side: Side, source: Source | None = None,
           offsets: Sequence[int] | None = None) -> Decoded:
    """Decode a binary column (keys or values) as `side` says, schemas from `source`.

    `offsets`, if given, the records' Kafka offsets: strict mode names the failing one by it.
    """
    if side.format == "avro" and source is not None and source.framed:
        columns = _avro_columns(values, side, source, offsets)
        if columns is not None:
            return columns
    raw = values.to_pylist()
    call = _Call(len(raw))
    reader_id, arrow_type = None, pa.null()
    if side.format == "json":
        data = _schemaless(raw, call)
    elif side.format == "none":
        data = pa.nulls(len(raw))
    else:
        if source is None:
            raise ValueError(f"format {side.format} needs a schema source")
        parts = _split(raw, side, source, call)
        reader_id, arrow_type = _FORMATS[side.format](parts, side, source, call)
        data = _to_arrow(call, arrow_type)
    if side.strict:
        first = next((i for i, e in enumerate(call.errors) if e is not None), None)
        if first is not None:
            raise UndecodableRecord(first, call.errors[first], None if offsets is None else int(offsets[first]))
    nulls = sum(v is None for v in raw)
    failed = sum(e is not None for e in call.errors)
    decoded = 0 if side.format == "none" else len(raw) - nulls - failed
    return Decoded(data, pa.array(call.ids, pa.int32()), pa.array(call.errors, pa.string()), reader_id,
                   decoded=decoded, failed=failed, nulls=nulls)


def _avro_columns(values: pa.Array | pa.ChunkedArray, side: Side, source: Source,
                  offsets: Sequence[int] | None) -> Decoded | None:
    """`decode` of framed Avro, the records of the reader's own schema read a column at a time
    (avro_columns.py), the others (another writer, a bad record, one avro_columns leaves to
    fastavro) by the per-record path: the same result, without a Python object per record.
    None when there is nothing to read so (then `decode` reads every record itself)."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if arr.type != pa.binary():
        return None
    n = len(arr)
    ids = avro_columns.schema_ids(arr)
    named = set(np.unique(ids[ids >= 0]).tolist())
    if not named:
        return None
    compiled, reader_id = _schemas(named, side, source, avro.compile)
    reader = compiled.get(reader_id)
    if reader is None or isinstance(reader, str) or reader.columns is None:
        return None
    fast = np.flatnonzero(ids == reader_id)
    data, ok = avro_columns.read(reader.columns, arr, fast, wire.HEADER)
    good = fast[ok]
    if not len(good):
        return None
    rest = np.setdiff1d(np.arange(n), good, assume_unique=True)
    if len(rest):
        call = _Call(len(rest))
        _avro_records(_split(arr.take(pa.array(rest)).to_pylist(), side, source, call), compiled, reader_id, call)
        order = np.empty(n, np.int64)
        order[good], order[rest] = np.arange(len(good)), len(good) + np.arange(len(rest))
        data = pa.concat_arrays([data.filter(pa.array(ok)), _to_arrow(call, reader.type)]).take(pa.array(order))
        errors = [None] * n
        for k, e in zip(rest.tolist(), call.errors):
            errors[k] = e
    else:
        errors = []
    failed = sum(e is not None for e in errors)
    if side.strict and failed:
        first = next(i for i, e in enumerate(errors) if e is not None)
        raise UndecodableRecord(first, errors[first], None if offsets is None else int(offsets[first]))
    return Decoded(data, arrow_arrays.indices(ids, ids >= 0, pa.int32()),
                   pa.array(errors, pa.string()) if errors else pa.nulls(n, pa.string()), reader_id,
                   decoded=n - arr.null_count - failed, failed=failed, nulls=arr.null_count)


def _split(raw: list, side: Side, source: Source, call: _Call) -> list[tuple[int, int | None, tuple, bytes]]:
    """(index, schema id, message indexes, payload) of every record to decode."""
    parts = []
    for i, v in enumerate(raw):
        if v is None:
            continue
        if not source.framed:
            parts.append((i, None, (), v))
            continue
        framed = wire.split(v, protobuf=side.format == "protobuf")
        if isinstance(framed, str):
            call.fail(i, framed)
            continue
        call.ids[i] = framed.schema_id
        parts.append((i, framed.schema_id, framed.message_indexes, framed.payload))
    return parts


def _schemas(named: set, side: Side, source: Source, compile_) -> tuple[dict, int | None]:
    """Every named schema compiled (or the reason it cannot be), and the reader's id.

    A FileSource's schema is configuration: if it is unusable, that raises. A registered one
    that is unusable is its records' problem, reported for each of them.
    """
    kind = SCHEMA_TYPES[side.format]
    compiled: dict[int | None, Any] = {}
    ids: list[int | None] = sorted(named)
    if not source.framed:
        ids = [None]  # the file's schema: its type even when every value is null
    elif side.reader_schema_id is not None:
        ids = sorted(set(ids) | {side.reader_schema_id})
    for sid in ids:
        try:
            compiled[sid] = compile_(source.get(sid, kind))
        except UnknownSchema as e:
            if sid == side.reader_schema_id:
                raise SchemaError(f"the reader schema: {e}") from None
            compiled[sid] = str(e)
        except SchemaError as e:
            if not source.framed or sid == side.reader_schema_id:
                raise
            compiled[sid] = str(e) if str(e).startswith(f"schema {sid}") else f"schema {sid} unusable: {e}"
    usable = [sid for sid, c in compiled.items() if not isinstance(c, str)]
    if not source.framed:
        return compiled, None
    if side.reader_schema_id is not None:
        return compiled, side.reader_schema_id
    return compiled, max(usable) if usable else None


def _avro(parts: list, side: Side, source: Source, call: _Call) -> tuple[int | None, pa.DataType]:
    compiled, reader_id = _schemas({p[1] for p in parts}, side, source, avro.compile)
    if reader_id not in compiled or isinstance(compiled[reader_id], str):
        return _unusable(parts, compiled, call)
    _avro_records(parts, compiled, reader_id, call)
    return reader_id, compiled[reader_id].type


def _avro_records(parts: list, compiled: dict, reader_id: int | None, call: _Call) -> None:
    """Each record read by fastavro, written with its own schema, as the reader's."""
    reader = compiled[reader_id]
    for i, sid, _, payload in parts:
        writer = compiled[sid]
        if isinstance(writer, str):
            call.fail(i, writer)
            continue
        try:
            call.out[i] = avro.read(payload, writer, reader, framed=sid is not None)
        except avro.SchemaResolutionError as e:
            call.fail(i, f"schema {sid} not readable with {reader_id}: {e}")
        except Exception as e:  # fastavro raises what its reading hits: EOFError, IndexError, ...
            call.fail(i, f"corrupt payload: {_what(e)}")


def _protobuf(parts: list, side: Side, source: Source, call: _Call) -> tuple[int | None, pa.DataType]:
    files, reader_id = _schemas({p[1] for p in parts}, side, source, protobuf.file_of)
    if not source.framed:  # a descriptor set: the message it names, for every record
        name = getattr(source, "message", None)
        try:
            file_message = protobuf.message_named(files[None], name) if name else protobuf.message_at(files[None], (0,))
        except LookupError as e:
            raise SchemaError(f"the schema file: {e}") from None
        messages = {i: file_message for i, _, _, _ in parts}
        name = file_message.full_name
    else:
        messages = _messages(parts, files, call)
        if not messages and side.reader_schema_id is None:
            return _unusable(parts, files, call)
        # One type per call: the most frequent message (the first one seen on a tie).
        counts = Counter(d.full_name for d in messages.values())
        name = counts.most_common(1)[0][0] if counts else protobuf.message_at(files[reader_id], (0,)).full_name
        if side.reader_schema_id is None:
            reader_id = max(sid for i, sid, _, _ in parts if i in messages and messages[i].full_name == name)
    try:
        reader = protobuf.compile(protobuf.message_named(files[reader_id], name))
    except LookupError as e:
        raise SchemaError(f"the reader schema {reader_id}: {e}") from None
    for i, sid, _, payload in parts:
        if i not in messages:
            continue
        if messages[i].full_name != name:
            call.fail(i, f"message {messages[i].full_name} is not {name}, this call's type")
            continue
        try:
            call.out[i] = protobuf.read(payload, reader)
        except ValueError as e:
            call.fail(i, f"corrupt payload: {_what(e)}")
    return reader_id, reader.type


def _messages(parts: list, files: dict, call: _Call) -> dict[int, Any]:
    """The message descriptor each framed record's indexes name, in its writer's file."""
    messages = {}
    for i, sid, indexes, _ in parts:
        file = files[sid]
        if isinstance(file, str):
            call.fail(i, file)
            continue
        try:
            messages[i] = protobuf.message_at(file, indexes)
        except LookupError as e:
            call.fail(i, f"schema {sid}: {e}")
    return messages


def _json_schema(parts: list, side: Side, source: Source, call: _Call) -> tuple[int | None, pa.DataType]:
    compiled, reader_id = _schemas({p[1] for p in parts}, side, source, json_schema.compile)
    if reader_id not in compiled or isinstance(compiled[reader_id], str):
        return _unusable(parts, compiled, call)
    arrow_type, convert = compiled[reader_id]
    against = "the schema" if reader_id is None else f"schema {reader_id}"
    for i, sid, _, payload in parts:
        if isinstance(compiled[sid], str):
            call.fail(i, compiled[sid])
            continue
        try:
            value = json.loads(payload)
        except ValueError as e:
            call.fail(i, f"corrupt payload: not JSON: {_what(e)}")
            continue
        try:
            call.out[i] = convert(value)
        except json_schema.Mismatch as e:
            call.fail(i, f"does not match {against}: {e}")
    return reader_id, arrow_type


_FORMATS = {"avro": _avro, "protobuf": _protobuf, "json_schema": _json_schema}


def _schemaless(raw: list, call: _Call) -> pa.Array:
    loads, out = json.loads, call.out
    for i, v in enumerate(raw):
        if v is None:
            continue
        try:
            out[i] = loads(v)
        except ValueError as e:
            call.fail(i, f"corrupt payload: not JSON: {_what(e)}")
    try:  # json_schema.infer's first choice; the texts it falls back on are made only if it fails
        return pa.array(out)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
        return json_schema.infer(_texts(raw, call), out)


def _texts(raw: list, call: _Call) -> list[str | None]:
    """Each record's JSON text as written (None where it is not JSON)."""
    texts: list[str | None] = [None] * call.n
    for i, v in enumerate(raw):
        if v is None or call.errors[i] is not None:
            continue
        try:
            texts[i] = v.decode("utf-8")
        except UnicodeDecodeError:  # UTF-16 or -32 JSON: its text, written anew
            texts[i] = json_schema.text(call.out[i])
    return texts


def _unusable(parts: list, compiled: dict, call: _Call) -> tuple[None, pa.DataType]:
    """No record has a usable schema: every one says why, and the data has the null type."""
    for i, sid, _, _ in parts:
        if call.errors[i] is None:
            c = compiled.get(sid)
            call.fail(i, c if isinstance(c, str) else f"schema {sid} unusable")
    return None, pa.null()


def _to_arrow(call: _Call, arrow_type: pa.DataType) -> pa.Array:
    """The column; a value Arrow cannot hold (a timestamp out of range, a decimal too wide)
    makes its record an error, not the call."""
    try:
        return pa.array(call.out, type=arrow_type)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        pass
    for i, v in enumerate(call.out):
        if v is None:
            continue
        try:
            pa.array([v], type=arrow_type)
        except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
            call.out[i] = None
            call.fail(i, f"not representable as {arrow_type}: {_what(e)}")
    return pa.array(call.out, type=arrow_type)


def _what(e: Exception) -> str:
    # A ValueError says what is wrong; others (EOFError, IndexError from a reader) need their name.
    if isinstance(e, ValueError) and str(e):
        return str(e)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _one_line(reason: str) -> str:
    line = " ".join(reason.split())
    return line if len(line) <= _REASON else line[: _REASON - 3] + "..."

