"""Compaction's Spark task (step 2 of the protocol in run.py): one group's objects read and written as large ones.

`merge_group` runs on an executor: it reads the group's objects from Swift, checks each
against its manifest (md5, record count, offset order), and writes the records, unchanged,
into objects of at most `object_bytes` record bytes, cut by the slice task's rule, so a retry
rewrites the same objects.

A typed topic's objects keep their typed columns. Objects of a group whose typed columns differ
(a schema that gained a field) are written in one schema (records/unify.py: every version's
fields, null where a record's object lacked them), each merged object that of the records it
holds; the raw columns are the records' bytes, unchanged. Objects whose typed columns have no
one type (a field whose type changed: the slice task cut its objects there) are not merged into
one: a merged object ends before such an object. An untyped group's objects are exactly what
they always were. No Dagster imports.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.archive.leaving import leave_out
from matos_dagster.core.days import buckets
from matos_dagster.core.erase.ledger import Leave
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records import unify
from matos_dagster.core.records.objects import decode, encode_hashed
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store, SwiftParams


class CompactionError(RuntimeError):
    """A group could not be merged as it must be (its input is not what its manifests say)."""


@dataclass(frozen=True)
class MergeJob:
    range: OffsetRange  # the group's whole range
    directory: str  # its folder in Swift
    inputs: tuple[dict, ...]  # the group's manifests' objects, in offset order
    format: str
    swift: SwiftParams
    object_bytes: int = 64 * 1024**2
    # What the topic's erasure ledger leaves out of the group (core/erase/ledger.py): objects written
    # before an erasure rewrote them still hold its records, and a merge must not carry them on.
    leave: Leave | None = None
    # Rebuilds each merged object's key index from its records (core/erase/key_index.py `Indexer`):
    # the inputs' filters differ in size, so they cannot simply be OR-ed. None: no index.
    index: Any = None


def merge_group(job: MergeJob) -> list[dict]:
    """Runs on an executor: read the group's objects, write them as large ones; one entry per object,
    and one `{"erased": offsets, "typed": counts}` entry when the erasure ledger left records out.

    A group it must refuse (an object missing, changed or not holding its records) comes back as
    one `{"refused": why}` entry instead of an error: the refusal is certain, and Spark would try
    a failed task again (three times on the local stack) before the driver could say it.
    """
    try:
        return _merge(job)
    except CompactionError as e:
        return [{"refused": str(e)}]


def _merge(job: MergeJob) -> list[dict]:
    store = Store(job.swift)
    written: list[dict] = []
    pending: list[pa.Table] = []
    pending_bytes = 0
    last = job.range.start - 1
    erased: list[int] = []
    erased_typed: dict = {}
    try:
        for o in job.inputs:
            data = store.get(o["name"])
            if data is None:
                raise CompactionError(f"object {o['name']} of the group {job.range} is missing from Swift")
            if hashlib.md5(data).hexdigest() != o["md5"]:
                raise CompactionError(f"object {o['name']} in Swift does not match its manifest's md5 {o['md5']}")
            table = decode(data, job.format)
            offsets = table["offset"].to_numpy()
            if len(offsets) != o["records"] or (len(offsets) and (offsets[0] <= last or np.any(np.diff(offsets) <= 0))):
                raise CompactionError(f"object {o['name']} does not hold the {o['records']} ordered records its manifest lists")
            if len(offsets):
                last = int(offsets[-1])
            table = _left_out(job.leave, table, erased, erased_typed)
            if pending and not _one_type(pending, table):
                written.append(_flush(pending, pending_bytes, job, store))
                pending, pending_bytes = [], 0
            sizes = row_sizes(table)
            # The slice task's rule, record by record: a new object when this one would overflow.
            cut_from = 0
            for i, size in enumerate(sizes.tolist()):
                if pending_bytes and pending_bytes + size > job.object_bytes:
                    pending.append(table.slice(cut_from, i - cut_from))
                    written.append(_flush(pending, pending_bytes, job, store))
                    pending, pending_bytes, cut_from = [], 0, i
                pending_bytes += size
            pending.append(table.slice(cut_from))
        if sum(t.num_rows for t in pending):
            written.append(_flush(pending, pending_bytes, job, store))
        return written + ([{"erased": erased, "typed": erased_typed}] if erased else [])
    finally:
        store.close()


def _left_out(leave: Leave | None, table: pa.Table, erased: list[int], typed: dict) -> pa.Table:
    """`table` without what `leave` leaves out (offsets added to `erased`; per typed side the left-out
    records' decoded, failed and null counts added to `typed`, which the replaced manifests counted)."""
    kept = leave_out(leave, table, erased)
    if kept.num_rows == table.num_rows:
        return kept
    gone = table.filter(pc.invert(pc.is_in(table["offset"], kept["offset"])))
    for side, counts in typed_stats(gone.schema, [gone]).items():
        mine = typed.setdefault(side, {"decoded": 0, "failed": 0, "nulls": 0})
        for k in mine:
            mine[k] += counts[k]
    return kept


def _one_type(pending: list[pa.Table], table: pa.Table) -> bool:
    """Whether `table` can be written in one object with the `pending` ones (records/unify.py)."""
    try:
        unify.unify([*(t.schema for t in pending), table.schema])
    except unify.TypesDiffer:
        return False
    return True


def row_sizes(table: pa.Table) -> np.ndarray:
    """Each record's key + value + header bytes: what `object_bytes` counts in the slice task."""
    n = table.num_rows
    size = np.zeros(n, dtype=np.int64)
    for col in ("key", "value"):
        size += pc.fill_null(pc.binary_length(table[col]), 0).to_numpy().astype(np.int64)
    headers = table["headers"].combine_chunks()
    if len(headers.values):
        flat = headers.flatten()
        per = (pc.fill_null(pc.binary_length(flat.field("key")), 0).to_numpy().astype(np.int64)
               + pc.fill_null(pc.binary_length(flat.field("value")), 0).to_numpy().astype(np.int64))
        parents = pc.list_parent_indices(headers).to_numpy()
        size += np.bincount(parents, weights=per, minlength=n).astype(np.int64)
    return size


def _flush(tables: list[pa.Table], nbytes: int, job: MergeJob, store: Store) -> dict:
    table = unify.concat(tables, str(job.range)).combine_chunks()
    data, md5, stats = encoded(table, job.format, tables)
    name = layout.object_name(job.directory, stats["first_offset"], job.format)
    store.put(name, data, md5=md5)
    index = {} if job.index is None else {"key_index": job.index.of(table["key"])}
    return {"name": name, "bytes": len(data), "md5": md5, "record_bytes": nbytes, **stats, **index}


def encoded(table: pa.Table, fmt: str, tables: list[pa.Table]) -> tuple[bytes, str, dict]:
    """`table` (one schema; `tables`: its rows as they were read) as an object: its bytes, md5 and
    manifest entry's counts, offsets, timestamps, hours and typed counts. Compaction's and an erasure's."""
    offsets = table["offset"]
    ts = table["timestamp"].cast(pa.int64())
    known = pc.min_max(ts)
    stats = {
        "records": table.num_rows,
        "first_offset": offsets[0].as_py(),
        "last_offset": offsets[-1].as_py(),
        "min_timestamp": known["min"].as_py(),
        "max_timestamp": known["max"].as_py(),
        "hours": buckets.to_json(buckets.of_records(table["timestamp"], offsets, row_sizes(table))[0]),
    }
    typed = unify.typed_fields(table.schema)
    if typed:
        data, md5 = encode_hashed(table, fmt, pa.schema([*SCHEMA, *typed]))
        stats["typed"] = typed_stats(table.schema, tables)
    else:
        data, md5 = encode_hashed(table, fmt)
    return data, md5, stats


def typed_stats(schema: pa.Schema, tables: list[pa.Table]) -> dict:
    """A merged object's manifest entry `typed` (swift/manifest.py), counted from its rows (`tables`,
    before they were made one `schema`; rows of an untyped object count for no side): per typed
    side its format and reader schema id (its `<side>_data` column's: the newest object's), the
    schema ids its records name, and how many decoded, failed (an error) and were null."""
    out = {}
    for side in unify.SIDES:
        if f"{side}_error" not in schema.names:
            continue
        # The data column holds the format; an object none of whose records decoded has none (its error column does).
        meta = schema.field(f"{side}_data" if f"{side}_data" in schema.names else f"{side}_error").metadata or {}
        reader = meta.get(b"reader_schema_id")
        ids: set[int] = set()
        counts = {"decoded": 0, "failed": 0, "nulls": 0}
        for t in tables:
            if f"{side}_error" not in t.column_names:
                continue
            nulls, failed = t[side].null_count, t.num_rows - t[f"{side}_error"].null_count
            counts["decoded"] += t.num_rows - nulls - failed
            counts["failed"] += failed
            counts["nulls"] += nulls
            ids.update(pc.unique(t[f"{side}_schema_id"].drop_null()).to_pylist())
        out[side] = {"format": meta.get(b"format", b"").decode(),
                     "reader_schema_id": None if reader is None else int(reader), "schema_ids": sorted(ids), **counts}
    return out
