"""Schemaless JSON: the records' values parsed, and their type inferred, one object's type growing
with its records.

pyarrow infers the type of a chunk's parsed values at once (dicts become structs with the union
of their keys, ints int64, ints and floats double); the object's type is the union (union.py) of
its chunks' types, so a field that first appears in a later chunk is added, not dropped. Parts
of the type only nulls give (a field null or [] in every record so far) are left out
(`union.pruned`): Arrow's null type has no Parquet or Iceberg column, and would freeze the
table's type; a later record that gives the field a value adds it then. Where the chunk's
values have no type in common, or with the object's (a field a number here, text there, an
integer past int64), each record is typed on its own, in order: one that does not fit the type
the records before it gave is an error of its own, the others are typed as ever.

A value nested deeper than MAX_DEPTH levels is an error of its own, found from its bytes before
it is parsed (Python's parser would recurse as deep as the text goes). No Dagster imports.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa

from matos_dagster.core.schemas.union import Conflict, joined, placed, pruned
from matos_dagster.core.schemas.writers import one_line, reason, what

MAX_DEPTH = 64  # levels of arrays and objects in one value
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def decode(raw: list[bytes | None], into: pa.DataType | None,
           errors: list[str | None]) -> tuple[pa.Array, pa.DataType | None]:
    """The values of `raw` as data of the object's type so far (`into`, None: none yet) grown by
    theirs; the type (None: still none). A record that does not parse or fit gets its reason."""
    n = len(raw)
    values, rows = [], []
    loads = json.loads
    for i, v in enumerate(raw):
        if v is None:
            continue
        if (v.count(b"[") + v.count(b"{")) > MAX_DEPTH and _depth(v) > MAX_DEPTH:
            errors[i] = f"corrupt payload: JSON nested deeper than {MAX_DEPTH} levels"
            continue
        try:
            values.append(loads(v))
            rows.append(i)
        except Exception as e:  # noqa: BLE001 - whatever a text makes the parser raise is its reason
            errors[i] = reason(e, "corrupt payload: not JSON: ")
    rows_ = np.array(rows, np.int64)
    try:
        arr = pa.array(values)
        t = pruned(arr.type)
        to = into if t is None else t if into is None else joined([into, t])
        if to is None:
            return pa.nulls(n), None
        return placed([(rows_, arr)] if t is not None else [], n, to), to
    except Exception:  # noqa: BLE001 - no type in common: record by record
        return _one_by_one(values, rows_, n, into, errors)


def _one_by_one(values: list, rows: np.ndarray, n: int, into: pa.DataType | None,
                errors: list[str | None]) -> tuple[pa.Array, pa.DataType | None]:
    to, parts = into, []
    for i, v in zip(rows.tolist(), values):
        try:
            arr = pa.array([v])
        except Exception as e:  # noqa: BLE001 - an integer past int64, a lone surrogate, ...
            errors[i] = one_line(f"not representable in Arrow: {what(e)}")
            continue
        t = pruned(arr.type)
        if t is None:
            continue  # nothing to type: null data
        try:
            to = t if to is None else joined([to, t])
        except Conflict:
            errors[i] = one_line(f"does not fit this object's type {to} (given by its earlier records)")
            continue
        parts.append((np.array([i], np.int64), arr))
    if to is None:
        return pa.nulls(n), None
    return placed(parts, n, to), to


def _depth(v: bytes) -> int:
    """How deep a JSON text's arrays and objects nest, from its bytes (its strings left out)."""
    b = np.frombuffer(_STRINGS.sub(b"", v), np.uint8)
    steps = np.isin(b, _OPEN).astype(np.int64) - np.isin(b, _CLOSE)
    return int(np.cumsum(steps).max(initial=0))
