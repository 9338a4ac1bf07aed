"""An expiry run: each partition of each topic with `archive_retention_days`, in its turn, then the run's record.

For one partition (the cursor, cursor.py, says where to look):

1. the kept ranges whose oldest record is now due, and every entry from `scanned_to` on (contiguous:
   a gap stops it, its ranges are looked at once it is filled), each against the cutoff (span.py);
   an expired span met again (a run killed after its marker) has its folder cleaned;
2. the cursor written: what is kept, with its oldest record's timestamp, and how far it looked.

Then `_expiry/records/<id>.json`: when, by which run, each topic's cutoff, per partition the records
expired, the spans, the objects rewritten. Killed anywhere, the next run looks at the same entries and
ends in the same state. No Dagster imports.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable

from matos_dagster.core import faults
from matos_dagster.core.expire import cursor as cursors
from matos_dagster.core.expire.table import expire_in_table
from matos_dagster.core.expire.span import (PartitionExpired, Why, clean, drop_strays, expire_part, expire_whole, iso,
                                           wholly_old)
from matos_dagster.core.offsets import spans
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.archived import EXPIRED, RANGE, Entry, PartitionArchive, archived_partitions
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

log = logging.getLogger(__name__)
DAY_MS = 86_400_000

# (topic, partitions, expire one partition) -> each partition's outcome, each in its turn.
InTurn = Callable[[str, list[int], Callable[[int], PartitionExpired]], list[PartitionExpired]]


def one_by_one(topic: str, partitions: list[int], expire: Callable[[int], PartitionExpired]) -> list[PartitionExpired]:
    return [expire(p) for p in partitions]


def cutoff(topic: TopicConfig, now_ms: int) -> int | None:
    """Records stamped before this are expired; None: the topic keeps its records forever."""
    days = topic.archive_retention_days
    return None if days is None else now_ms - int(days * DAY_MS)


def expire_partition(store: Store, prefix: str, topic: str, partition: int, why: Why,
                     say: Callable[[str], None] = log.info,
                     in_table: Callable[[list[tuple[int, int]]], None] | None = None) -> PartitionExpired:
    """`in_table`: told the ranges the expiry changed, before the cursor moves past them, so that a run
    whose table step failed looks at them again (the topic's Iceberg table, core/expire/table.py)."""
    done = PartitionExpired(topic, partition)
    archive = PartitionArchive(store, prefix, topic, partition)
    cur = cursors.read(store, prefix, topic, partition)
    done.previous_cutoff = cur.stamped_before

    def look(e: Entry) -> None:
        cur.forget_within(e.start, e.end)
        if e.kind == EXPIRED:
            clean(store, archive, e, done)  # a run killed after the marker left objects
            done.changed.append(e.span)
            return
        if e.kind != RANGE:
            return  # an acknowledged loss holds no record
        doc = archive.read(e)
        done.manifests_read += 1
        if doc is None:
            return
        if "expired" in doc:  # rewritten by an expiry, maybe one killed before it deleted the old objects
            drop_strays(store, archive, e, doc, done)
        if wholly_old(doc, why.cutoff_ms):
            expire_whole(store, archive, e, doc, why, done)
            done.changed.append(e.span)
            say(f"{topic}/{partition}[{e.start}, {e.end}): every record older than the retention; an expired span now")
            return
        lo = doc.get("min_timestamp")
        if lo is not None and lo < why.cutoff_ms:
            new = expire_part(store, archive, e, doc, why, done)
            if new is None:
                expire_whole(store, archive, e, doc, why, done)
                done.changed.append(e.span)
                return
            doc, lo = new, new.get("min_timestamp")
        if "expired" in doc:
            done.changed.append(e.span)
        cur.kept[e.start] = (e.end, lo)

    for a, b in cur.due(why.cutoff_ms):
        for e in archive.overlapping(a, b):
            look(e)
    at = cur.scanned_to
    for e in archive.entries_from(at):
        if e.start > at:
            break  # a gap (a range being archived): what follows is looked at once it is filled
        look(e)
        at = max(at, e.end)
    if in_table is not None and done.changed:
        in_table(done.changed)
    cur.scanned_to = at
    cur.stamped_before = why.cutoff_ms
    cursors.write(store, prefix, topic, partition, cur)
    done.expired = spans.merge(done.expired)
    if done.records:
        say(f"{topic}/{partition}: {done.records} record(s) expired ({len(done.spans)} range(s) whole, "
            f"{len(done.rewritten)} object(s) rewritten)")
    return done


@dataclass
class Expired:
    record: dict
    record_name: str
    partitions: list[PartitionExpired]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)


def expire_topics(store: Store, topics: Iterable[TopicConfig], run_id: str = "", in_turn: InTurn = one_by_one,
                  say: Callable[[str], None] = log.info, now: Callable[[], float] = time.time) -> Expired:
    """Expire every topic of `topics` that has `archive_retention_days` (the others keep everything)."""
    now_ms = int(now() * 1000)
    outcomes: list[PartitionExpired] = []
    per_topic: dict[str, dict] = {}
    for topic in topics:
        limit = cutoff(topic, now_ms)
        if limit is None:
            continue
        why = Why(limit, topic.archive_retention_days, run_id, now_ms)
        base = layout.join(store.params.prefix, topic.prefix)
        *earlier, current = incarnations.read(store, base, topic.name)

        def one(p: int, prefix: str, n: int, topic=topic, why=why) -> PartitionExpired:
            return expire_partition(store, prefix, topic.name, p, why, say,
                                    lambda changed: expire_in_table(store, prefix, topic, p, changed, n, say))

        for inc in earlier:  # an earlier log's archive: no writer but this one reaches it
            p_ = inc.prefix(base)
            mine = [one(p, p_, inc.number) for p in archived_partitions(store, p_, topic.name)]
            per_topic[f"{topic.name}/incarnation={inc.number}"] = {
                "retention_days": topic.archive_retention_days, "stamped_before": limit,
                "partitions": {str(p.partition): _partition_record(p) for p in mine}}
            outcomes += mine
        p_ = current.prefix(base)
        mine = in_turn(topic.name, archived_partitions(store, p_, topic.name),
                       lambda p, p_=p_, n=current.number, one=one: one(p, p_, n))
        per_topic[topic.name] = {"retention_days": topic.archive_retention_days, "stamped_before": limit,
                                 "partitions": {str(p.partition): _partition_record(p) for p in mine}}
        outcomes += mine
    record_id = f"{datetime.fromtimestamp(now_ms / 1000, timezone.utc):%Y%m%dT%H%M%SZ}-{run_id[:8] or 'local'}"
    record = {"id": record_id, "done_at": iso(now_ms), "run_id": run_id,
              "records_expired": sum(p.records for p in outcomes), "topics": per_topic}
    name = layout.expiry_record_name(store.params.prefix, record_id)
    store.put_json(name, record)
    faults.at("expire-after-record")
    say(f"expiry: {record['records_expired']} record(s) expired from {len(per_topic)} topic(s); recorded in {name}")
    return Expired(record, name, outcomes)


def _partition_record(p: PartitionExpired) -> dict:
    return {"records_expired": p.records, "expired": [list(s) for s in p.expired],
            "ranges_expired": [list(s) for s in p.spans], "objects_rewritten": p.rewritten,
            "objects_deleted": p.deleted, "manifests_read": p.manifests_read, "objects_read": p.objects_read}
