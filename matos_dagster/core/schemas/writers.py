"""Which schema wrote each record of a column, found before any payload is read; and a writer's
records read with that schema (Avro, Protobuf, JSON Schema).

A framed record names its writer in its wire prefix (wire.py): the schema id, and for Protobuf
the message indexes. `scan` reads only those prefixes (for Avro and JSON Schema the ids of a
whole chunk at once, avro_columns.schema_ids), asks the source once per schema and compiles it:
a `Writer` (its record name, Arrow type and compiled form), or the reason its records do not
decode ("unknown schema id 7", "schema 3 unusable: ..."). A record that names no writer (no
magic byte, cut short) has its reason at once. The records of a schema file's topic all have the
file's writer. `read` reads one writer's records with it: Avro a column at a time where
avro_columns.py can (the others, and any record it leaves, by fastavro), Protobuf and JSON
Schema a record at a time. Whatever a record's bytes make a reader raise, the record gets a
reason of one line (`reason`) and the others go on. No Dagster imports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from matos_dagster.core.records import arrays as arrow_arrays
from matos_dagster.core.schemas import avro, avro_columns, json_schema, protobuf, wire
from matos_dagster.core.schemas.errors import SchemaError, UnknownSchema
from matos_dagster.core.schemas.sources import AVRO, JSON, PROTOBUF, Source

SCHEMA_TYPES = {"avro": AVRO, "protobuf": PROTOBUF, "json_schema": JSON}
REASON = 300  # characters of a reason: enough to say what, not a whole payload


@dataclass(frozen=True)
class Writer:
    """One schema records were written with (a Protobuf schema's message, for Protobuf)."""

    schema_id: int | None  # None: a schema file's
    name: str  # what its records are: the record's or message's name, without namespace or package
    type: pa.DataType
    compiled: Any
    key: tuple = ()  # (schema id, message indexes): the writer's identity


@dataclass
class Writers:
    """A column's records by writer: record i was written by `found[codes[i]]` (-1: a null value,
    or none: `errors[i]` says why); `ids[i]` the schema id it names (-1: none)."""

    values: pa.Array  # binary
    codes: np.ndarray  # int64
    found: list[Writer]
    errors: list[str | None]
    ids: np.ndarray  # int64
    starts: np.ndarray | int  # where each record's payload starts in its bytes (an int: everywhere)

    def __len__(self) -> int:
        return len(self.values)

    def head(self, n: int) -> "Writers":
        """The first n records."""
        starts = self.starts if isinstance(self.starts, int) else self.starts[:n]
        return Writers(self.values.slice(0, n), self.codes[:n], self.found, self.errors[:n], self.ids[:n], starts)

    def present(self) -> list[tuple[int, int]]:
        """(first record, code) of each writer that has records here, in the order they first come."""
        codes, first = np.unique(self.codes, return_index=True)
        return sorted((int(r), int(c)) for c, r in zip(codes, first) if c >= 0)

    def rows(self, code: int) -> np.ndarray:
        return np.flatnonzero(self.codes == code)

    def refused(self, code: int, why: str) -> "Writers":
        """These records, those of writer `code` not decoded but given the reason `why`."""
        codes, errors = self.codes.copy(), list(self.errors)
        for i in self.rows(code).tolist():
            errors[i] = why
        codes[codes == code] = -1
        return Writers(self.values, codes, self.found, errors, self.ids, self.starts)


def scan(values: pa.Array | pa.ChunkedArray, fmt: str, source: Source) -> Writers:
    """The writer of each record of a binary column of format `fmt` (avro, protobuf, json_schema)."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if arr.type != pa.binary():
        arr = arr.cast(pa.binary())
    n = len(arr)
    errors: list[str | None] = [None] * n
    ids = np.full(n, -1, np.int64)
    starts: np.ndarray | int = 0
    null = arrow_arrays.to_bools(arr.is_null()) if arr.null_count else np.zeros(n, bool)
    # Each record's key (schema id, message indexes) as an index into `keys`, -1 for none.
    if not source.framed:  # the file's writer: its type even when every value is null
        keys: list[tuple] = [(None, ())]
        index = np.where(null, -1, 0)
    elif fmt == "protobuf":
        starts = np.zeros(n, np.int64)
        index = np.full(n, -1, np.int64)
        seen: dict[tuple, int] = {}
        for i, v in enumerate(arr.to_pylist()):
            if v is None:
                continue
            framed = wire.split(v, protobuf=True)
            if isinstance(framed, str):
                errors[i] = framed
                continue
            key = (framed.schema_id, framed.message_indexes)
            ids[i], index[i], starts[i] = framed.schema_id, seen.setdefault(key, len(seen)), len(v) - len(framed.payload)
        keys = list(seen)
    else:  # the ids of the whole column at once: no Python value per record
        starts = wire.HEADER
        ids = avro_columns.schema_ids(arr)
        for i in np.flatnonzero((ids < 0) & ~null).tolist():  # what the prefix lacks: wire.split says it
            errors[i] = wire.split(arr[i].as_py())
        named, index = np.unique(ids, return_inverse=True)
        index = index.reshape(-1) - int(named[0] < 0 if len(named) else 0)
        keys = [(sid, ()) for sid in named.tolist() if sid >= 0]
    found: list[Writer] = []
    codes = np.full(n, -1, np.int64)
    for k, key in enumerate(keys):
        w = _writer(key, fmt, source)
        rows = index == k
        if isinstance(w, str):
            for i in np.flatnonzero(rows).tolist():
                errors[i] = w
            continue
        codes[rows] = len(found)
        found.append(w)
    return Writers(arr, codes, found, errors, ids, starts)


def _writer(key: tuple, fmt: str, source: Source) -> Writer | str:
    """The writer `key` names, compiled; or why its records do not decode. A schema file that
    cannot be used raises (it is configuration); an unreachable registry raises RegistryUnavailable."""
    sid, indexes = key
    try:
        schema = source.get(sid, SCHEMA_TYPES[fmt])
        if fmt == "avro":
            c = avro.compile(schema)
            return Writer(sid, c.name, c.type, c, key)
        if fmt == "json_schema":
            t, convert = json_schema.compile(schema)
            return Writer(sid, "", t, convert, key)
        file = protobuf.file_of(schema)
        name = getattr(source, "message", None)
        desc = protobuf.message_named(file, name) if not source.framed and name else \
            protobuf.message_at(file, indexes or (0,))
        c = protobuf.compile(desc)
        return Writer(sid, desc.name, c.type, c, key)
    except UnknownSchema as e:
        return str(e)
    except SchemaError as e:
        if not source.framed:
            raise
        return str(e) if str(e).startswith(f"schema {sid}") else f"schema {sid} unusable: {e}"
    except LookupError as e:
        if not source.framed:
            raise SchemaError(f"the schema file: {e}") from None
        return f"schema {sid}: {e}"


def read(fmt: str, ws: Writers, writer: Writer, rows: np.ndarray,
         errors: list[str | None]) -> tuple[np.ndarray, pa.Array]:
    """The records `rows` (ascending) read with `writer`: the rows that decoded and their values,
    of `writer.type`; each of the others gets its reason in `errors`."""
    framed = writer.schema_id is not None
    plan = columns(writer) if fmt == "avro" and isinstance(ws.starts, int) else None
    if plan is not None:
        data, ok = avro_columns.read(plan, ws.values, rows, ws.starts)
        if ok.all():
            return rows, data
        good, data = rows[ok], data.filter(arrow_arrays.booleans(ok))
        more, extra = _one_by_one(fmt, ws, writer, rows[~ok], framed, errors)
        if not len(more):
            return good, data
        order = np.argsort(np.concatenate([good, more]), kind="stable")
        return np.concatenate([good, more])[order], pa.concat_arrays([data, extra]).take(arrow_arrays.indices(order))
    return _one_by_one(fmt, ws, writer, rows, framed, errors)


def columns(writer: Writer) -> Any:
    """How avro_columns reads the Avro writer's records (None: fastavro reads them one by one)."""
    return writer.compiled.columns


def _one_by_one(fmt: str, ws: Writers, writer: Writer, rows: np.ndarray, framed: bool,
                errors: list[str | None]) -> tuple[np.ndarray, pa.Array]:
    raw = ws.values.take(arrow_arrays.indices(rows)).to_pylist()
    starts = [ws.starts] * len(rows) if isinstance(ws.starts, int) else ws.starts[rows].tolist()
    values, ok = [], []
    for k, (i, v, at) in enumerate(zip(rows.tolist(), raw, starts)):
        try:
            values.append(_read_one(fmt, writer, v[at:], framed))
            ok.append(k)
        except Exception as e:  # noqa: BLE001 - whatever a record's bytes make a reader raise is its reason
            errors[i] = reason(e, "corrupt payload: " if not isinstance(e, _Mismatch) else "")
    good = rows[ok]
    data, bad = to_arrow(values, writer.type)
    for k, why in bad.items():
        errors[int(good[k])] = why
    if bad:
        good = good[[k not in bad for k in range(len(good))]]  # `to_arrow` left them out of `data`
    return good, data


class _Mismatch(ValueError):
    """A JSON Schema record whose value has not its schema's shape (its reason says where)."""


def _read_one(fmt: str, writer: Writer, payload: bytes, framed: bool) -> Any:
    if fmt == "avro":
        return avro.read(payload, writer.compiled, framed=framed)
    if fmt == "protobuf":
        return protobuf.read(payload, writer.compiled)
    try:
        value = json.loads(payload)
    except Exception as e:  # noqa: BLE001 - a JSON text Python cannot read, however
        raise ValueError(f"not JSON: {what(e)}") from None
    try:
        return writer.compiled(value)
    except json_schema.Mismatch as e:
        against = "the schema" if writer.schema_id is None else f"schema {writer.schema_id}"
        raise _Mismatch(f"does not match {against}: {e}") from None
    except Exception as e:  # noqa: BLE001 - a number too large for a float, ...
        raise _Mismatch(f"not representable as {writer.type}: {what(e)}") from None


def to_arrow(values: list, arrow_type: pa.DataType) -> tuple[pa.Array, dict[int, str]]:
    """The values as one array, and the values Arrow cannot hold (a timestamp out of range, a
    decimal too wide, a string of lone surrogates): {index: reason}, left out of the array."""
    try:
        return pa.array(values, type=arrow_type), {}
    except Exception:  # noqa: BLE001 - which value it was is found below
        pass
    bad: dict[int, str] = {}
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            pa.array([v], type=arrow_type)
        except Exception as e:  # noqa: BLE001 - whatever the value makes Arrow raise
            bad[i] = one_line(f"not representable as {arrow_type}: {what(e)}")
    return pa.array([v for i, v in enumerate(values) if i not in bad], type=arrow_type), bad


def what(e: BaseException) -> str:
    # A ValueError says what is wrong; others (EOFError, IndexError from a reader) need their name.
    if isinstance(e, ValueError) and not isinstance(e, UnicodeError) and str(e):
        return str(e)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def reason(e: BaseException, prefix: str = "") -> str:
    return one_line(prefix + what(e))


def one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= REASON else line[: REASON - 3] + "..."
