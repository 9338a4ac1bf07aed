"""One archived range against expiry's cutoff: kept, rewritten without its old records, or expired whole.

A range whose every record is stamped before the cutoff (its manifest says so: `max_timestamp`, and
`hours` counting every record) becomes an expired span, without reading an object:

1. `_expired.json` is written in its folder (layout.py): the span, its records, when and why;
   from then on the folder is that span (archived.py: the marker wins over the manifest);
2. its objects are deleted, and the folders a compacted range replaced inside it;
3. its manifest is deleted.

A range holding some records stamped before the cutoff is rewritten as an erasure rewrites one
(core/erase/rewrite.py): each object holding such a record is replaced under a new name, read back
and checked; then the manifest (version 4), whose `expired` names the spans of offsets whose records
went; then the old objects are deleted. A range left with no record is expired whole instead.

Killed at any step, the next run finds the same range (the cursor moves once the partition is done)
and ends it the same way: the marker, or the new manifest, is what holds. No Dagster imports.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core import faults, settings
from matos_dagster.core.compact.merge import row_sizes
from matos_dagster.core.erase import key_index
from matos_dagster.core.erase.keys import SETTING
from matos_dagster.core.erase.rewrite import _replace, encoded_hours
from matos_dagster.core.offsets import spans
from matos_dagster.core.records.objects import decode
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.archived import Entry, PartitionArchive
from matos_dagster.core.swift.store import Store

VERSION = 1


class ExpiryError(RuntimeError):
    """A range that cannot be rewritten safely (an object missing or not what its manifest says): one line."""


@dataclass(frozen=True)
class Why:
    """What an expiry run removes, and who asks: records stamped before `cutoff_ms`."""

    cutoff_ms: int
    retention_days: float
    run_id: str = ""
    now_ms: int = 0


@dataclass
class PartitionExpired:
    topic: str
    partition: int
    records: int = 0  # records removed by this run
    expired: list[tuple[int, int]] = field(default_factory=list)  # offset spans whose records went
    spans: list[tuple[int, int]] = field(default_factory=list)  # ranges that became expired spans
    rewritten: list[list[str]] = field(default_factory=list)  # [old name, new name]
    deleted: int = 0  # objects deleted
    manifests_read: int = 0
    objects_read: int = 0
    folders_listed: int = 0
    previous_cutoff: int | None = None  # the cutoff of the run before (None: none ran)
    changed: list[tuple[int, int]] = field(default_factory=list)  # ranges an expiry changed: the table follows
    notes: list[str] = field(default_factory=list)


def wholly_old(doc: dict, cutoff_ms: int) -> bool:
    """Every record of the range is stamped before the cutoff, by its manifest alone."""
    hi = doc.get("max_timestamp")
    if hi is None or hi >= cutoff_ms:
        return False
    timed = sum(v[0] for v in doc["hours"].values()) if "hours" in doc else None
    return timed == doc["records"]  # without hours (an old manifest) the objects tell: expire_part


def marker(doc: dict, why: Why) -> dict:
    """The `_expired.json` of a range whose records all expired (docs/layout.md shows it)."""
    return {"version": VERSION, "kind": "expired", "topic": doc["topic"], "partition": doc["partition"],
            "start": doc["start"], "end": doc["end"], "records": doc["records"], "bytes": doc["bytes"],
            "min_timestamp": doc.get("min_timestamp"), "max_timestamp": doc.get("max_timestamp"),
            "stamped_before": why.cutoff_ms, "retention_days": why.retention_days,
            "reason": f"archive_retention_days {why.retention_days:g}: every record stamped before "
                      f"{iso(why.cutoff_ms)}",
            "expired_at": iso(why.now_ms), "run_id": why.run_id,
            "erased": len(doc.get("erased", [])), "expired_before": doc.get("expired", [])}


def expire_whole(store: Store, archive: PartitionArchive, e: Entry, doc: dict, why: Why,
                 done: PartitionExpired) -> None:
    r = archive.range(e)
    store.put_json(layout.expired_name(archive.prefix, r), marker(doc, why))
    faults.at("expire-after-marker")
    done.records += doc["records"]
    done.spans.append(e.span)
    done.expired.append(e.span)
    clean(store, archive, e, done)


def clean(store: Store, archive: PartitionArchive, e: Entry, done: PartitionExpired) -> None:
    """Everything in an expired span's folders but its marker: objects, then the replaced folders'
    manifests, then its own manifest (one listing from its start, as far as its end)."""
    r = archive.range(e)
    own, keep = layout.manifest_name(archive.prefix, r), layout.expired_name(archive.prefix, r)
    names: list[str] = []
    for f in archive.folders_from(e.start):
        if f.start >= e.end:
            break
        if f.end <= e.end:
            names += f.names
    done.folders_listed += 1
    data = [n for n in names if not layout.is_bookkeeping(n)]
    markers = [n for n in names if layout.is_bookkeeping(n) and n not in (own, keep)]
    for n in data + markers + ([own] if own in names else []):
        store.delete(n)
    done.deleted += len(data)
    if data:
        faults.at("expire-after-objects")


def expire_part(store: Store, archive: PartitionArchive, e: Entry, doc: dict, why: Why,
                done: PartitionExpired) -> dict | None:
    """Rewrite the range without its records stamped before the cutoff; its manifest now (the same
    if it held none), or None when no record would be left (the caller expires it whole)."""
    r = archive.range(e)
    fmt = doc["format"]
    # The replacements get a key index as archive runs' objects do (none without MATOS_ERASURE_KEY).
    indexer = key_index.indexer_or_none(settings.get(SETTING), lambda why: None)
    entries, replaced, gone, kept_offsets, gone_bytes, left = [], [], [], [], 0, 0
    tables = []
    for o in doc["objects"]:
        table = _read(store, o, fmt, r, done)
        ts = pc.cast(table["timestamp"], pa.int64())
        hit = np.asarray(pc.fill_null(pc.less(ts, pa.scalar(why.cutoff_ms, pa.int64())), False)
                         .to_numpy(zero_copy_only=False), dtype=bool)
        tables.append((o, table, hit))
        left += int((~hit).sum())
    if left == 0:
        return None
    for o, table, hit in tables:
        kept_offsets += table.filter(pa.array(~hit))["offset"].to_pylist()
        if not hit.any():
            entries.append({**o, "hours": encoded_hours(table)})
            continue
        old = table.filter(pa.array(hit))
        gone += old["offset"].to_pylist()
        gone_bytes += int(row_sizes(old).sum())
        kept = table.filter(pa.array(~hit))
        replaced.append(o["name"])
        if kept.num_rows:
            entries.append(_replace(store, o, kept, fmt, r, indexer))
            done.rewritten.append([o["name"], entries[-1]["name"]])
    if not gone:
        return doc
    faults.at("expire-after-replacements")
    formats = {side: t["format"] for side, t in doc.get("typed", {}).items()} or None
    new = manifest.build(r, fmt, entries, formats, doc.get("topic_id"), doc.get("incarnation"),
                         erased=doc.get("erased", []))
    if "replaces" in doc:  # a compacted range stays one
        new["replaces"] = doc["replaces"]
    now = runs(gone, kept_offsets)
    new["expired"] = [list(s) for s in spans.merge([tuple(s) for s in doc.get("expired", [])] + now)]
    new["record_bytes"] = int(doc.get("record_bytes", 0)) - gone_bytes
    store.put_json(layout.manifest_name(archive.prefix, r), new)
    faults.at("expire-after-manifest")
    for name in replaced:
        store.delete(name)
    done.deleted += len(replaced) - sum(1 for o, _ in done.rewritten if o in replaced)
    done.records += len(gone)
    done.expired += now
    if "replaces" in doc:  # the folders it replaced hold the old records too: gone now, not after the grace period
        _drop_replaced(store, archive, e, done)
    return new


def runs(gone: list[int], kept: list[int]) -> list[tuple[int, int]]:
    """The spans `[first, last + 1)` of `gone` offsets with no kept offset between them."""
    out: list[tuple[int, int]] = []
    marks = sorted([(o, True) for o in gone] + [(o, False) for o in kept])
    start = last = None
    for off, is_gone in marks:
        if is_gone:
            start = off if start is None else start
            last = off
        elif start is not None:
            out.append((start, last + 1))
            start = None
    if start is not None:
        out.append((start, last + 1))
    return out


def drop_strays(store: Store, archive: PartitionArchive, e: Entry, doc: dict, done: PartitionExpired) -> None:
    """Objects of a rewritten range's folder its manifest does not list (a run killed after the manifest
    left the old ones): deleted, as that run would have (one listing of the folder)."""
    folder = layout.range_dir(archive.prefix, archive.range(e)) + "/"
    listed = {o["name"] for o in doc["objects"]}
    strays = [i["name"] for i in store.list(folder) if not layout.is_bookkeeping(i["name"]) and i["name"] not in listed]
    done.folders_listed += 1
    for n in strays:
        store.delete(n)
    done.deleted += len(strays)


def _drop_replaced(store: Store, archive: PartitionArchive, e: Entry, done: PartitionExpired) -> None:
    for f in archive.folders_from(e.start):
        if f.start >= e.end:
            break
        if f.span != e.span and f.end <= e.end:
            data = [n for n in f.names if not layout.is_bookkeeping(n)]
            for n in data + [n for n in f.names if layout.is_bookkeeping(n)]:
                store.delete(n)
            done.deleted += len(data)
    done.folders_listed += 1


def _read(store: Store, o: dict, fmt: str, r, done: PartitionExpired) -> pa.Table:
    data = store.get(o["name"])
    if data is None or hashlib.md5(data).hexdigest() != o["md5"]:
        raise ExpiryError(f"{r}: object {o['name']} of its manifest is {'missing from Swift' if data is None else 'not what its manifest says (md5)'}; "
                          "archive the range again (`matos verify` says how), then run the expiry again")
    done.objects_read += 1
    return decode(data, fmt)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


