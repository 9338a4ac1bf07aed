"""One partition's archive rewritten without the records of given keys.

Every range folder of the partition is looked at, not only the effective ones: a folder superseded by
compaction (still inside `compact_grace_s`) holds the same records as its compacted range, an
unfinished attempt or a stray object may hold them too. In a folder with a manifest, each object
that holds a record of the keys is replaced, in this order, so that a crash at any step leaves a
consistent manifest and the next run ends in the same state (an object whose key index, in its
manifest entry, says it holds none of the keys is not read: key_index.py):

1. the replacement, without those records, is written under a new name
   (`part-<offset>.e<n>.<ext>`, layout.py: never a name an archive run writes), read back and
   checked (md5, record count); an object left with no record gets none;
2. the new manifest (version 4): the objects left, their counts, offsets, sizes, checksums,
   typed counts and hours recomputed, and `erased`, the offsets whose records went;
3. the old objects are deleted.

Killed after 1, the old manifest still holds (the replacements are strays, written again by the
re-run under the same names); after 2, the new one holds and the old objects are strays. A stray
(an object no manifest of its folder lists) that holds a record of the keys is deleted: no
manifest vouches for it. A folder without a manifest (an unfinished attempt) is all strays.
No Dagster imports.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core import faults
from matos_dagster.core.days import buckets
from matos_dagster.core.compact.merge import encoded, row_sizes
from matos_dagster.core.erase import key_index
from matos_dagster.core.erase.hours import hours_after
from matos_dagster.core.erase.keys import Matcher, key_id
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.archived import RANGE, Folder, PartitionArchive
from matos_dagster.core.swift.store import Store

log = logging.getLogger(__name__)


class ErasureError(RuntimeError):
    """A folder that cannot be rewritten safely (an object missing or not what its manifest says):
    one line; what was rewritten before it stays rewritten, and a re-run goes on."""


@dataclass
class PartitionErased:
    topic: str
    partition: int
    offsets: set[int] = field(default_factory=set)  # offsets whose records were removed (once each)
    rewritten: list[list[str]] = field(default_factory=list)  # [old name, new name]
    deleted: list[str] = field(default_factory=list)  # objects deleted: left with no record, or strays
    objects_read: int = 0
    bytes_read: int = 0
    objects_skipped: int = 0  # objects of a manifest whose key index says they hold none of the keys
    bytes_written: int = 0  # the replacements' bytes
    notes: list[str] = field(default_factory=list)
    incarnation: int = 1  # the topic's log (core/swift/incarnations.py) the folders were of

    @property
    def records(self) -> int:
        return len(self.offsets)


def erase_partition(store: Store, prefix: str, topic: str, partition: int, matcher: Matcher,
                    say: Callable[[str], None] = log.info, before: Iterable[int] = (),
                    on_range: Callable[[tuple[int, int], list[int]], None] | None = None,
                    before_switch: Callable[[list[tuple[int, int | None, int]]], None] | None = None
                    ) -> PartitionErased:
    """Remove every record of `matcher`'s keys from every folder of the partition (steps above).

    `before`: offsets an earlier, killed run of the same request erased (counted, as they are gone);
    `on_range`: told each range's offsets as soon as its new manifest is written; `before_switch`:
    told each range's records to erase, (offset, timestamp ms or None, bytes), before its manifest
    is switched (the days to evaluate again: core/days/erased.py)."""
    done = PartitionErased(topic, partition, set(before))
    archive = PartitionArchive(store, prefix, topic, partition)
    with ManifestReader(store.params) as manifests:
        for folders in _windows(archive.folders_from(0), ManifestReader.AHEAD):
            ranges = {f.span: OffsetRange(topic, partition, f.start, f.end) for f in folders
                      if (f.entry is not None and f.entry.kind == RANGE) or layout.MANIFEST in _bases(f)}
            docs = manifests.read([layout.manifest_name(prefix, r) for r in ranges.values()])
            for folder in folders:
                listed, erased = set(), set()
                if folder.span in ranges:
                    r = ranges[folder.span]
                    listed, erased = _erase_range(store, prefix, r, matcher, done, say, on_range,
                                                  docs[layout.manifest_name(prefix, r)], before_switch)
                for name in folder.names:
                    if name not in listed and not layout.is_bookkeeping(name):
                        _erase_stray(store, name, matcher, done, say, erased)
    return done


def _windows(items: Iterable, n: int) -> Iterable[list]:
    """`items` n at a time (the folders' listing stays lazy)."""
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class ManifestReader:
    """The manifests of a window of folders, read by THREADS threads (a Store each: one connection).

    Why: an erasure that skips most objects by their key index spends most of its time waiting for
    manifests, one GET each; read THREADS at a time they cost a fraction of that (bench/erasure.py).
    The window (AHEAD folders) bounds what is held, whatever the partition's history."""

    THREADS = 8
    AHEAD = 64

    def __init__(self, params):
        self._params = params
        self._local = threading.local()
        self._stores: list[Store] = []
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(self.THREADS, thread_name_prefix="manifests")

    def _get(self, name: str) -> dict | None:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self._params)
            with self._lock:
                self._stores.append(store)
        return store.get_json(name)

    def read(self, names: list[str]) -> dict[str, dict | None]:
        return dict(zip(names, self._pool.map(self._get, names)))

    def __enter__(self) -> "ManifestReader":
        return self

    def __exit__(self, *exc) -> None:
        self._pool.shutdown(wait=True)
        for store in self._stores:
            store.close()


def _bases(folder: Folder) -> set[str]:
    return {n.rpartition("/")[2] for n in folder.names}


def _erase_range(store: Store, prefix: str, r: OffsetRange, matcher: Matcher, done: PartitionErased,
                 say: Callable[[str], None], on_range=None, doc: dict | None = None,
                 before_switch=None) -> tuple[set[str], set[int]]:
    """Steps 1-3 for one folder with a manifest (`doc`, read by ManifestReader); the names its old
    and new manifest list, and the offsets the manifest now says are erased."""
    mname = layout.manifest_name(prefix, r)
    if doc is None:  # deleted meanwhile (compaction's clean-up): its objects are strays now
        return set(), set()
    try:
        manifest.Manifest.from_json(doc)
    except manifest.ManifestError as e:
        raise ErasureError(f"{r}: its manifest {mname} cannot be read ({e}); nothing of it was rewritten") from None
    fmt = doc["format"]
    entries, replaced, erased_now, erased_bytes, gone_all, skipped, gone_rows = [], [], [], 0, [], [], []
    kid = key_id(matcher.secret)
    for o in doc["objects"]:
        # An object whose key index says none of the keys is in it is not read (key_index.py);
        # trusted only in a manifest with `hours`, which the manifest is then rewritten from.
        if "hours" in doc and not key_index.may_hold(o.get(key_index.ENTRY), kid, matcher.hashes):
            done.objects_skipped += 1
            skipped.append(o)
            entries.append(o)
            continue
        table = _read(store, o["name"], fmt, done, o["md5"], r)
        hit = np.asarray(matcher.mask(table["key"]).to_numpy(zero_copy_only=False), dtype=bool)
        if not hit.any():
            entries.append({**o, "hours": encoded_hours(table)})
            continue
        gone = table.filter(pa.array(hit))
        gone_all.append(gone.select(["offset", "timestamp", "key", "value", "headers"]))
        erased_now += gone["offset"].to_pylist()
        erased_bytes += int(row_sizes(gone).sum())
        gone_rows += zip(gone["offset"].to_pylist(), pc.cast(gone["timestamp"], pa.int64()).to_pylist(),
                         row_sizes(gone).tolist())
        kept = table.filter(pa.array(~hit))
        replaced.append(o["name"])
        if kept.num_rows:
            entries.append(_replace(store, o, kept, fmt, r, key_index.Indexer(matcher.secret, kid), done))
            done.rewritten.append([o["name"], entries[-1]["name"]])
    if not erased_now:
        return {o["name"] for o in doc["objects"]}, set(doc.get("erased", []))
    if before_switch is not None:
        before_switch(gone_rows)
    faults.at("erase-after-objects")
    hours = None
    if skipped:
        def hours_of(o: dict) -> dict:  # a skipped object read after all (hours.py says when)
            done.objects_skipped -= 1
            return encoded_hours(_read(store, o["name"], fmt, done, o["md5"], r))

        hours = hours_after(doc, entries, skipped, pa.concat_tables(gone_all), hours_of)
        entries = [e if "hours" in e else {**e, "hours": {}} for e in entries]  # the range's hours: `hours` below
    formats = {side: t["format"] for side, t in doc.get("typed", {}).items()} or None
    new = manifest.build(r, fmt, entries, formats, doc.get("topic_id"), doc.get("incarnation"),
                         erased=doc.get("erased", []) + erased_now)
    if hours is not None and "hours" in new:
        new["hours"] = hours
    if "replaces" in doc:  # a compacted range stays one
        new["replaces"] = doc["replaces"]
    new["record_bytes"] = int(doc.get("record_bytes", 0)) - erased_bytes
    store.put_json(mname, new)
    faults.at("erase-after-manifest")
    if on_range is not None:
        on_range((r.start, r.end), sorted(erased_now))
    for name in replaced:
        store.delete(name)
        if name not in {n for n, _ in done.rewritten}:
            done.deleted.append(name)
    done.offsets.update(erased_now)
    say(f"{r}: {len(erased_now)} record(s) erased; {len(replaced)} object(s) rewritten or removed")
    return {o["name"] for o in doc["objects"]} | {o["name"] for o in new["objects"]}, set(new["erased"])


def encoded_hours(table: pa.Table) -> dict:
    return buckets.to_json(buckets.of_records(table["timestamp"], table["offset"], row_sizes(table))[0])


def _read(store: Store, name: str, fmt: str, done: PartitionErased, md5: str | None, r: OffsetRange) -> pa.Table:
    data = store.get(name)
    if data is None:
        raise ErasureError(f"{r}: object {name} of its manifest is missing from Swift; archive the range again "
                           "(the erasure ledger keeps the erased records out), then run the erasure again")
    if md5 is not None and hashlib.md5(data).hexdigest() != md5:
        raise ErasureError(f"{r}: object {name} in Swift does not match its manifest's md5 {md5}; archive the "
                           "range again (the erasure ledger keeps the erased records out), then run the erasure again")
    done.objects_read += 1
    done.bytes_read += len(data)
    return decode(data, fmt)


def _replace(store: Store, o: dict, kept: pa.Table, fmt: str, r: OffsetRange, indexer: key_index.Indexer | None,
             done: PartitionErased | None = None) -> dict:
    """Step 1 for one object: its replacement written, read back and checked; its manifest entry,
    with the key index of the records left when there is an indexer (an erasure's: the erasure key
    it runs with; expiry's: MATOS_ERASURE_KEY's, if set)."""
    data, md5, stats = encoded(kept, fmt, [kept])
    name = layout.erased_object_name(o["name"])
    store.put(name, data, md5=md5)
    if done is not None:
        done.bytes_written += len(data)
    back = store.get(name)
    if back is None or hashlib.md5(back).hexdigest() != md5 or decode(back, fmt).num_rows != kept.num_rows:
        raise ErasureError(f"{r}: the replacement {name} did not read back as written; nothing was switched to it")
    sizes = row_sizes(kept)
    entry = {"name": name, "bytes": len(data), "md5": md5, "record_bytes": int(sizes.sum()), **stats}
    if "largest_record_bytes" in o:
        entry["largest_record_bytes"] = int(sizes.max())
    if "typed" not in o:
        entry.pop("typed", None)
    if indexer is not None:
        entry[key_index.ENTRY] = indexer.of(kept["key"])
    return entry


def _erase_stray(store: Store, name: str, matcher: Matcher, done: PartitionErased,
                 say: Callable[[str], None], erased: set[int]) -> None:
    """A stray holding records of the keys is deleted. Those of its records its folder's manifest
    says are erased count as erased (a run killed after its manifest left them: the re-run counts
    them as the first would have)."""
    fmt = next((f for f, ext in layout.EXTENSIONS.items() if name.endswith(ext)), None)
    if fmt is None:
        return
    data = store.get(name)
    if data is None:
        return
    done.objects_read += 1
    done.bytes_read += len(data)
    try:
        table = decode(data, fmt)
    except Exception as e:  # noqa: BLE001 - a stray that does not decode is no record anyone reads
        done.notes.append(f"{name}: a stray object (no manifest lists it) that does not decode ({type(e).__name__}); left")
        return
    hit = matcher.mask(table["key"])
    if pc.any(hit).as_py():
        done.offsets.update(set(table.filter(hit)["offset"].to_pylist()) & erased)
        store.delete(name)
        done.deleted.append(name)
        say(f"{name}: a stray object (no manifest lists it) held records of the keys; deleted")
