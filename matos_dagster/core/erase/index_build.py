"""`matos forget --index`: key indexes (key_index.py) for the objects archived without one.

Objects written while MATOS_ERASURE_KEY was unset, or before this matos-dagster made indexes, or
with another erasure key (after a rotation), have no index an erasure can trust, so every erasure
reads them. This reads each such object once (its md5 checked against its manifest), makes its
index, and rewrites only its range's manifest: the entries gain `key_index`, nothing else changes
(a manifest without `hours`, of before version 3, gains them from the same reading, since an
erasure trusts indexes only where it can rewrite the range's hours without reading everything).
No object is written or deleted.

Run again, it reads only what still lacks an index of the current key: killed part-way, the
ranges whose manifests were written keep their indexes and the re-run does the rest, ending in
the same manifests. A manifest changed under it (an erasure, compaction) is left as it is now
and said; the next run indexes it. Each partition is done in its turn as an erasure is. No
Dagster imports.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Callable

from matos_dagster.core.days import buckets
from matos_dagster.core.erase import key_index
from matos_dagster.core.erase.rewrite import _bases, encoded_hours
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode
from matos_dagster.core.swift import incarnations, layout, manifest
from matos_dagster.core.swift.archived import RANGE, PartitionArchive, archived_partitions
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

log = logging.getLogger(__name__)


@dataclass
class PartitionIndexed:
    topic: str
    partition: int
    objects_indexed: int = 0  # read and given an index
    objects_had: int = 0  # had an index of this erasure key already: not read
    manifests_written: int = 0
    bytes_read: int = 0
    notes: list[str] = field(default_factory=list)


def index_partition(store: Store, prefix: str, topic: str, partition: int, indexer: key_index.Indexer,
                    say: Callable[[str], None] = log.info) -> PartitionIndexed:
    """Every range folder of the partition with a manifest (superseded ones included: an erasure
    reads them too) given indexes where its objects lack one of `indexer`'s key."""
    done = PartitionIndexed(topic, partition)
    for folder in PartitionArchive(store, prefix, topic, partition).folders_from(0):
        if (folder.entry is not None and folder.entry.kind == RANGE) or layout.MANIFEST in _bases(folder):
            _index_range(store, prefix, OffsetRange(topic, partition, folder.start, folder.end), indexer, done, say)
    return done


def _index_range(store: Store, prefix: str, r: OffsetRange, indexer: key_index.Indexer, done: PartitionIndexed,
                 say: Callable[[str], None]) -> None:
    mname = layout.manifest_name(prefix, r)
    doc = store.get_json(mname)
    if doc is None:
        return
    try:
        manifest.Manifest.from_json(doc)
    except manifest.ManifestError as e:
        done.notes.append(f"{r}: its manifest cannot be read ({e}); not indexed")
        return
    before = doc
    every = "hours" not in doc  # then every object is read, for the range's hours
    hours, changed = [], False
    objects = []
    for o in doc["objects"]:
        have = o.get(key_index.ENTRY)
        if not every and have and have.get("key_id") == indexer.key_id:
            done.objects_had += 1
            objects.append(o)
            continue
        data = store.get(o["name"])
        if data is None or hashlib.md5(data).hexdigest() != o["md5"]:
            done.notes.append(f"{r}: object {o['name']} is missing or does not match its manifest's md5; not indexed "
                              "(`matos verify --audit-all` names it)")
            return
        done.bytes_read += len(data)
        table = decode(data, doc["format"])
        hours.append(encoded_hours(table))
        index = indexer.of(table["key"])
        if index != have:
            done.objects_indexed += 1
            changed = True
        objects.append({**o, key_index.ENTRY: index})
    if every and doc["objects"]:
        doc = {**doc, "hours": buckets.to_json(buckets.merge(*(buckets.from_json(h) for h in hours)))}
        changed = True
    if not changed:
        return
    new = {**doc, "version": max(doc["version"], manifest.VERSION), "objects": objects}
    manifest.Manifest.from_json(new)
    if store.get_json(mname) != before:  # rewritten meanwhile: left as it is now
        done.notes.append(f"{r}: its manifest changed while its objects were read; run `matos forget --index` again")
        return
    store.put_json(mname, new)
    done.manifests_written += 1
    say(f"{r}: key indexes of its {len(objects)} object(s) in its manifest")


InTurn = Callable[[str, list[int], Callable[[int], PartitionIndexed]], list[PartitionIndexed]]


def index_topics(store: Store, topics: dict[str, TopicConfig], secret_setting: str, in_turn: InTurn,
                 say: Callable[[str], None] = log.info) -> list[PartitionIndexed]:
    """Indexes for every partition of every log of each topic (as an erasure goes through them)."""
    indexer = key_index.indexer(secret_setting)
    if indexer is None:
        from matos_dagster.core.erase import keys

        keys.erasure_key(secret_setting)  # raises its one-line refusal
    out: list[PartitionIndexed] = []
    for t, cfg in sorted(topics.items()):
        prefix = layout.join(store.params.prefix, cfg.prefix)
        *earlier, now = incarnations.read(store, prefix, t)
        for inc in earlier:
            mine = inc.prefix(prefix)
            out += [index_partition(store, mine, t, p, indexer, say) for p in archived_partitions(store, mine, t)]
        mine = now.prefix(prefix)
        out += in_turn(t, archived_partitions(store, mine, t),
                       lambda p, t=t, mine=mine: index_partition(store, mine, t, p, indexer, say))
    return out
