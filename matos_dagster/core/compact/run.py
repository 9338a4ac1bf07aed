"""Compaction: adjacent small ranges of a partition become one range of large objects, exactly once.

The protocol (docs/operations/compaction.md), for one partition, below its committed offset:

1. **Plan** (plan.py's `plan`, pure): walk the effective entries from the partition's compaction cursor;
   group adjacent archived ranges greedily in offset order until a group's record bytes reach
   `compact_bytes` or its records span `compact_span_s` of Kafka time. A loss record, a hole, a change of format or a range already that large
   ends a group and belongs to none. The trailing group, still below `compact_bytes`, waits
   for more ranges: groups are a function of the entries alone (same entries, same groups),
   so two runs can only ever plan the same groups, never crossing ones. A group with a range
   younger than `compact_min_age_s` waits too.
2. **Write**: one Spark task per group (merge.py's `merge_group`) reads the group's objects from Swift (checking each
   against its manifest's md5), and writes the records, unchanged, into objects of at most
   `object_bytes` record bytes in the folder `[a, c)` of the whole group. Names and bytes are
   functions of the records, so a retry rewrites the same objects.
3. **Switch**: re-read the entries over `[a, c)`; if they are still exactly the group's, PUT
   `[a, c)/_manifest.json` (listing `"replaces"`). From that instant `[a, c)` contains the group's
   folders and archived.py's rule makes it the effective entry; before it, the old ones were.
4. **Clean up**, on a later run: a folder contained in a compacted range whose manifest is
   older than `compact_grace_s` is deleted, manifest first (it stops counting), then its
   objects. A reader that planned before the switch has had the grace period to finish.

A crash anywhere is finished by the next run: objects without a manifest are nothing (the
same group is planned and rewritten with the same bytes); a manifest without clean-up is
cleaned up later; a folder whose manifest is gone but whose objects remain is emptied.

The cursor (`_compaction/topic=<t>/partition=<p>.json`) says where the walk starts: the start
of the first group not yet compacted and cleaned. It is only ever a group boundary, so a stale
cursor costs a longer walk, never a different grouping.

This module runs the protocol (`compact_topic`, `compact_partition`): the walk, one Spark job
for the groups, the switches, the clean-up and the cursor. The plan is plan.py's, the Spark
task merge.py's. No Dagster imports.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from matos_dagster.core import faults, settings
from matos_dagster.core.compact.merge import CompactionError, MergeJob, merge_group
from matos_dagster.core.erase import key_index, ledger
from matos_dagster.core.erase.keys import SETTING
from matos_dagster.core.compact.plan import Group, Member, holder, plan
from matos_dagster.core.iceberg.hooks import keep_compacted
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.spark.tasks import run_entries
from matos_dagster.core.offsets import spans
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.archived import RANGE, Entry, Folder, PartitionArchive, effective
from matos_dagster.core.swift.store import Store, SwiftParams
from matos_dagster.core.topics import TopicConfig

log = logging.getLogger(__name__)


@dataclass
class PartitionResult:
    partition: int
    groups: list[tuple[int, int]] = field(default_factory=list)  # the ranges written
    ranges_merged: int = 0
    objects_before: int = 0
    objects_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records: int = 0
    folders_deleted: int = 0
    notes: list[str] = field(default_factory=list)
    # Where the partition's ranges not merged yet begin after this run (those waiting for more ranges,
    # too young, or left by max_groups or a race): the metrics exporter's compaction backlog counts
    # from here to the committed offset. None: nothing committed, no walk.
    unmerged_from: int | None = None


@dataclass
class Compacted:
    topic: str
    partitions: list[PartitionResult]
    duration_s: float

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions)


def compact_topic(
    topic: TopicConfig,
    committed: dict[int, int | None],
    store: Store,
    spark: Any,
    say: Callable[[str], None] = log.info,
    max_groups: int = 0,
    now: float | None = None,
    prefix: str | None = None,
    in_turn: Callable[[str, list[int], Callable[[int], PartitionResult]], list[PartitionResult]] | None = None,
) -> Compacted:
    """Compact every partition of `committed` (partition -> committed offset) of the topic.

    `prefix`: the archive compacted, in front of `topic=`: the incarnation whose log the committed
    offsets are of (chosen_incarnation.kafkas); None: the topic's own prefix (its first incarnation).
    One incarnation at a time: the committed offsets of one log never bound another's ranges.
    `in_turn(topic, partitions, compact one)`: runs each partition's compaction in the partition's turn
    (the Dagster shell's turns.py: no archive run or erasure writes in a partition while it is
    compacted, nor it while they do); None: one after another, for callers alone on the archive."""
    t0 = time.monotonic()
    prefix = layout.join(store.params.prefix, topic.prefix) if prefix is None else prefix
    due = [p for p, upper in sorted(committed.items()) if upper is not None]
    one = lambda p: compact_partition(topic, p, committed[p], store, prefix, spark, say, max_groups, now)  # noqa: E731
    done = dict(zip(due, in_turn(topic.name, due, one) if in_turn else map(one, due)))
    out = [done.get(p) or PartitionResult(p, notes=["nothing committed yet: nothing to compact"])
           for p in sorted(committed)]
    return Compacted(topic.name, out, time.monotonic() - t0)


def compact_partition(
    topic: TopicConfig,
    partition: int,
    upper: int,
    store: Store,
    prefix: str,
    spark: Any,
    say: Callable[[str], None] = log.info,
    max_groups: int = 0,
    now: float | None = None,
) -> PartitionResult:
    now = time.time() if now is None else now
    res = PartitionResult(partition)
    archive = PartitionArchive(store, prefix, topic.name, partition)
    state_name = cursor_name(prefix, topic.name, partition)
    ledger_doc = ledger.read(store, prefix, topic.name)
    requests_at_plan = set(ledger_doc["requests"])  # erasures known (_switch)
    state = store.get_json(state_name) or {}
    start = int(state.get("from", 0))
    if not state:
        first = archive.entry_at_or_after(0)
        start = first.start if first else upper

    # Every folder from the cursor to the committed offset, superseded ones included: a walk
    # over what is not compacted and cleaned up yet, whatever the history below the cursor.
    folders: list[Folder] = []
    for f in archive.folders_from(start):
        if f.start >= upper:
            break
        folders.append(f)
    raw = [f.entry for f in folders if f.entry is not None]
    docs: dict[tuple[int, int], dict] = {}
    members = []
    for e in effective(raw):
        if e.kind != RANGE:
            members.append(Member(e.start, e.end, e.kind))
            continue
        doc = archive.read(e)
        if doc is None:  # deleted meanwhile (another run's clean-up): plan the rest next time
            break
        docs[e.span] = doc
        members.append(Member(e.start, e.end, RANGE, int(doc.get("record_bytes", 0)), doc["format"], _age(e, now),
                              doc.get("min_timestamp"), doc.get("max_timestamp")))

    # Clean-up: only folders that a compacted range has contained for the grace period (a
    # replaced range, or what a crash in an earlier clean-up left of one).
    pending_cleanup = None
    outer = list(effective(raw))
    starts = [e.start for e in outer]
    doomed = []
    for f in folders:
        held = holder(f.span, outer, starts)
        if held is None:
            continue
        if _age(held, now) >= topic.compact_grace_s:
            doomed.append(f)
        elif pending_cleanup is None or held.start < pending_cleanup:
            pending_cleanup = held.start
    # The topic's Iceberg table must stop naming these folders' objects before they go (a crash
    # after an earlier switch left it naming them): their compacted ranges replace them there first.
    res.notes += keep_compacted(store, prefix, topic, partition,
                                sorted({holder(f.span, outer, starts).span for f in doomed}), say)
    _delete_folders(store.params, archive, doomed, say)
    res.folders_deleted += len(doomed)
    # Objects in a compacted folder that its manifest does not list: an earlier attempt with
    # other settings (object_bytes) left them. Also only after the grace period, so a run
    # racing with other settings can never lose the objects of the manifest that won.
    for f in folders:
        doc = docs.get(f.span)
        if doc is None or "replaces" not in doc or f.entry is None or _age(f.entry, now) < topic.compact_grace_s:
            continue
        keep = {o["name"] for o in doc["objects"]}
        for name in f.names:
            if name not in keep and not layout.is_bookkeeping(name):
                store.delete(name)
                res.notes.append(f"removed {name}: left by an earlier attempt, not in the manifest")

    p = plan(members, upper, topic.compact_bytes, topic.compact_min_age_s, max_groups, topic.compact_span_s)
    unswitched = None
    # Every group's objects at once, one Spark task a group; then the switches, in offset order.
    try:  # the records the erasure ledger leaves out of each group, as every writer does
        leaves = [ledger.leave(ledger_doc, partition, g.start, settings.get(SETTING)) for g in p.groups]
    except ledger.LedgerError as e:
        raise CompactionError(f"{e}; nothing was compacted") from None
    jobs = [_job(topic, partition, g, docs, store, prefix, leave) for g, leave in zip(p.groups, leaves)]
    for g, job in zip(p.groups, jobs):
        say(f"{job.range}: merging {len(g.members)} ranges ({len(job.inputs)} objects, {g.record_bytes} record bytes)")
    refusal = lambda why: CompactionError(f"{topic.name}/{partition}: {why}; nothing was switched")  # noqa: E731
    written = run_entries(spark, merge_group, jobs, f"compact {topic.name}/{partition}: {len(jobs)} group(s)",
                          CompactionError, refusal, lambda o: refusal(o["refused"]))
    if jobs:
        faults.at("compact-after-objects")
    for g, job, objects in zip(p.groups, jobs, written):
        if _switch(g, job, objects, docs, archive, store, prefix, say, res, requests_at_plan):
            res.groups.append((g.start, g.end))
            # Its replaced folders are to be deleted by a run after the grace period.
            if pending_cleanup is None or g.start < pending_cleanup:
                pending_cleanup = g.start
        elif unswitched is None:
            unswitched = g.start
    res.notes += keep_compacted(store, prefix, topic, partition, res.groups, say)  # the Iceberg table

    # The cursor: where the next walk must start to see every group still to compact and every
    # folder still to delete. Only ever a group boundary, and only ever moved forward.
    resume = p.resume if p.resume is not None else (members[-1].end if members else start)
    if unswitched is not None:
        resume = min(resume, unswitched)
    res.unmerged_from = resume  # the replaced folders still to delete are merged already
    if pending_cleanup is not None:
        resume = min(resume, pending_cleanup)
    if resume > start:
        store.put_json(state_name, {"from": resume, "topic": topic.name, "partition": partition})
    return res


def _job(topic: TopicConfig, partition: int, g: Group, docs, store: Store, prefix: str, leave=None) -> MergeJob:
    r = OffsetRange(topic.name, partition, g.start, g.end)
    objects_in = tuple(o for m in g.members for o in docs[(m.start, m.end)]["objects"])
    index = key_index.indexer_or_none(settings.get(SETTING), lambda why: None)  # the archive run says why
    return MergeJob(r, layout.range_dir(prefix, r), objects_in, g.members[0].format, store.params, topic.object_bytes,
                    leave, index)


def _switch(g: Group, job: MergeJob, written: list[dict], docs, archive: PartitionArchive, store: Store,
            prefix: str, say, res: PartitionResult, requests_at_plan: set[str] = frozenset()) -> bool:
    r, fmt, objects_in = job.range, job.format, job.inputs
    inputs = [docs[(m.start, m.end)] for m in g.members]
    # Records the erasure ledger left out of the merge (merge.py): erased offsets, and what they counted.
    left = next((w for w in written if "erased" in w), {"erased": [], "typed": {}})
    written = [w for w in written if "erased" not in w]
    # A typed topic's: the typed sides of the replaced ranges, whose counts the merged objects keep.
    typed = {side: t["format"] for d in inputs for side, t in d.get("typed", {}).items()}
    # The log the replaced ranges were read from (manifest version 4): the merged range is of the same one.
    of_log = next(({"topic_id": d.get("topic_id"), "incarnation": d["incarnation"]} for d in reversed(inputs)
                   if "incarnation" in d), {})
    doc = manifest.build(r, fmt, written, typed or None, **of_log)
    if not left["erased"]:  # else the merged objects' own count: the replaced ranges' counted the left-out records
        doc["record_bytes"] = sum(int(d.get("record_bytes", 0)) for d in inputs)
    doc["replaces"] = [[m.start, m.end] for m in g.members]
    erased = sorted({o for d in inputs for o in d.get("erased", [])} | set(left["erased"]))
    if erased:  # offsets an erasure removed from the replaced ranges stay erased, never a gap
        doc["erased"] = erased
    expired = spans.merge([tuple(x) for d in inputs for x in d.get("expired", [])])
    if expired:  # spans whose records expiry removed (core/expire/) stay expired
        doc["expired"] = [list(x) for x in expired]
    for k, want in (("records", sum(d["records"] for d in inputs) - len(left["erased"])),
                    ("first_offset", next((d["first_offset"] for d in inputs if d["first_offset"] is not None), None)),
                    ("last_offset", next((d["last_offset"] for d in reversed(inputs) if d["last_offset"] is not None), None)),
                    ("min_timestamp", min((d["min_timestamp"] for d in inputs if d["min_timestamp"] is not None), default=None)),
                    ("max_timestamp", max((d["max_timestamp"] for d in inputs if d["max_timestamp"] is not None), default=None))):
        if doc[k] != want and not (left["erased"] and k != "records" and _within(k, doc[k], want)):
            raise CompactionError(f"{r}: the merged objects have {k} {doc[k]}, the replaced manifests {want}; "
                                  "nothing was switched")
    for side in typed:
        for k in ("decoded", "failed", "nulls"):
            have = doc["typed"][side][k] + left["typed"].get(side, {}).get(k, 0)
            want = sum(d["typed"][side][k] for d in inputs if side in d.get("typed", {}))
            if have != want:
                raise CompactionError(f"{r}: the merged objects have {have} {k} {side}s, the replaced manifests "
                                      f"{want}; nothing was switched")

    # The switch. Right before it, the entries over [a, c) must still be the group's own: a
    # run that raced us and switched first leaves either this very range (same bytes: done)
    # or, with other settings, another one; then this group is left as it is.
    now_there = [e.span for e in archive.overlapping(g.start, g.end)]
    if now_there == [(g.start, g.end)]:
        res.notes.append(f"{r}: already compacted by another run")
        return False
    if now_there != [(m.start, m.end) for m in g.members]:
        res.notes.append(f"{r}: the entries changed under this run ({now_there}); left as they are")
        return False
    # An erasure (core/erase/) rewrites ranges in place, after adding its request to the topic's
    # ledger: a merge read before it would bring erased records back. One GET, not one per member.
    if set(ledger.read(store, prefix, archive.topic)["requests"]) != requests_at_plan:
        res.notes.append(f"{r}: an erasure began under this run; left as it is, merged again by the next run")
        return False
    store.put_json(layout.manifest_name(prefix, r), doc)
    faults.at("compact-after-manifest")
    res.ranges_merged += len(g.members)
    res.objects_before += len(objects_in)
    res.objects_after += len(written)
    res.bytes_before += sum(o["bytes"] for o in objects_in)
    res.bytes_after += doc["bytes"]
    res.records += doc["records"]
    say(f"{r}: switched; {len(g.members)} ranges, {len(objects_in)} -> {len(written)} objects, "
        f"{res.bytes_before} -> {res.bytes_after} bytes so far")
    return True


def _within(k: str, have, want) -> bool:
    """With records left out, the merged bounds lie within the replaced ranges' (none: all left out)."""
    if have is None:
        return True
    return have >= want if k in ("first_offset", "min_timestamp") else have <= want


DELETE_THREADS = 8  # a day of small ranges is thousands of folders; one DELETE at a time is minutes


def _delete_folders(params: SwiftParams, archive: PartitionArchive, doomed: list[Folder], say) -> None:
    if not doomed:
        return

    def chunk(part: list[Folder]) -> None:
        with Store(params) as own:  # a Store is one connection: one per thread
            for f in part:
                _delete_folder(own, archive, f, say)

    with concurrent.futures.ThreadPoolExecutor(DELETE_THREADS) as pool:
        list(pool.map(chunk, [doomed[k::DELETE_THREADS] for k in range(DELETE_THREADS)]))
    say(f"{archive.topic}/{archive.partition}: deleted {len(doomed)} folders held by compacted ranges "
        "for longer than the grace period")


def _delete_folder(store: Store, archive: PartitionArchive, f: Folder, say) -> None:
    """Markers first (the folder stops counting), then the objects. A crash between leaves a
    folder of objects without a marker, which counts as nothing and the next run empties."""
    markers = [n for n in f.names if layout.is_bookkeeping(n)]
    for name in markers:
        store.delete(name)
        faults.at("compact-mid-cleanup")
    for name in f.names:
        if name not in markers:
            store.delete(name)


cursor_name = layout.compaction_cursor_name


def _age(e: Entry, now: float) -> float:
    if not e.modified:
        return float("inf")
    t = datetime.fromisoformat(e.modified)
    if t.tzinfo is None:  # Swift lists UTC without a zone
        t = t.replace(tzinfo=timezone.utc)
    return now - t.timestamp()

