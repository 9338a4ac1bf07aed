"""Compaction's Spark task (step 2 of the protocol in run.py): one group's objects read and written as large ones.

`merge_group` runs on an executor: it reads the group's objects from Swift, checks each
against its manifest (md5, record count, offset order), and writes the records, unchanged,
into objects of at most `object_bytes` record bytes, cut by the slice task's rule, so a retry
rewrites the same objects. No Dagster imports.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode, encode_hashed
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


def merge_group(job: MergeJob) -> list[dict]:
    """Runs on an executor: read the group's objects, write them as large ones; one entry per object.

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
        return written
    finally:
        store.close()


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
    table = pa.concat_tables(tables).combine_chunks()
    offsets = table["offset"]
    ts = table["timestamp"].cast(pa.int64())
    known = pc.min_max(ts)
    stats = {
        "records": table.num_rows,
        "first_offset": offsets[0].as_py(),
        "last_offset": offsets[-1].as_py(),
        "min_timestamp": known["min"].as_py(),
        "max_timestamp": known["max"].as_py(),
    }
    data, md5 = encode_hashed(table, job.format)
    name = layout.object_name(job.directory, stats["first_offset"], job.format)
    store.put(name, data, md5=md5)
    return {"name": name, "bytes": len(data), "md5": md5, "record_bytes": nbytes, **stats}

