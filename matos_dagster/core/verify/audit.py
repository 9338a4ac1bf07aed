"""Auditing a topic's archive: which entries, from where, and the audit mark moved after.

Three scopes, per partition:

- EVERYTHING: every entry from the partition's first (`archived.all()`): a full audit, whose
  Swift listings grow with the history. `matos verify --audit-all`, the job's `audit_all`.
- FROM_MARK (the command line's and the job's default): from the partition's audit mark
  (marks.py) on, so the listings cover only what was archived since the last audit, whatever
  the history; a partition without a mark is audited from its first entry, once.
- an offset: from there on (`--from`).

An audit that began at or below the mark (or with none) moves the mark when asked to: to
where its entries stop being contiguous and sound, capped at the committed offset. So a
problem found below the old mark pulls the mark back to it, and the default audit goes on
reporting the problem until it is mended. An audit that began above the mark leaves it: the
offsets between were not looked at. No Dagster imports.
"""

from __future__ import annotations

import time
from typing import Callable

from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.offsets import spans
from matos_dagster.core.offsets.ranges import OFFSET_WIDTH
from matos_dagster.core.swift import chosen_incarnation, layout
from matos_dagster.core.swift.archived import EXPIRED, LOSS, RANGE, Entry, PartitionArchive, archived_partitions
from matos_dagster.core.swift.store import Store, SwiftError
from matos_dagster.core.topics import TopicConfig
from matos_dagster.core.verify.coverage import (
    BEYOND_END,
    GAP,
    UNCOVERED,
    PartitionSummary,
    Problem,
    Report,
    check_coverage,
    sound_end,
)
from matos_dagster.core.verify.kafka import KafkaRecords
from matos_dagster.core.verify.marks import read_mark, write_mark
from matos_dagster.core.verify.expired import check_expired
from matos_dagster.core.verify.objects import check_loss, check_range

EVERYTHING, FROM_MARK = "all", "mark"
Since = str | int  # EVERYTHING, FROM_MARK or an offset


def verify_topic(
    kafka: KafkaClient,
    store: Store,
    prefix: str,
    topic_config: TopicConfig,
    sample: int | None = 0,
    say: Callable[[str], None] | None = None,
    since: Since = EVERYTHING,
    move_mark: bool | None = None,
    incarnation: str | int | None = None,
) -> Report:
    """Check `topic_config`'s archive under `prefix` (everything in front of `topic=`).

    `sample`: 0 compares nothing with Kafka, N compares N records per range, None every
    record (each read from Kafka on this machine: slow for a large archive). `since`: see the
    module doc. `move_mark`: write the audit marks (None: only when auditing FROM_MARK).
    `incarnation`: which log of the topic's name (its number or Kafka's topic id; None: the
    newest, see core/swift/incarnations.py). Only the incarnation whose log Kafka holds now is
    compared with Kafka; an earlier one's log is gone, so its entries are checked against their
    manifests, objects and their own contiguity, and the report says that Kafka no longer has it.
    Raises IncarnationError (one line) for an incarnation the archive does not have.
    """
    if sample is not None and sample < 0:
        raise ValueError(f"sample must be >= 0 (or None for every record), got {sample}")
    if since not in (EVERYTHING, FROM_MARK) and not (isinstance(since, int) and since >= 0):
        raise ValueError(f"since must be {EVERYTHING!r}, {FROM_MARK!r} or an offset >= 0, got {since!r}")
    t0 = time.monotonic()
    topic = topic_config.name
    scope = {EVERYTHING: "everything", FROM_MARK: "from the audit marks"}.get(since, f"from offset {since}")
    chosen = chosen_incarnation.choose(store, prefix, topic, incarnation)
    kafka_id = many.topic_ids(kafka, [topic]).get(topic)
    live = chosen_incarnation.kafka_holds(chosen, kafka_id)
    report = Report(topic, sample, scope, incarnation=chosen.incarnation.number if len(chosen.all) > 1 else None)
    said = chosen_incarnation.line(topic, chosen, kafka_id)
    if said:
        report.notes.append(said)
    prefix = chosen.prefix
    move = since == FROM_MARK if move_mark is None else move_mark
    parts: list[int] = []
    committed: dict[int, int | None] = {}
    marks: dict[int, tuple[int, int]] = {}
    if live:
        # Committed offsets first, listings last: a manifest is written before its range is
        # committed, so every entry a committed offset relies on is in the listings.
        parts = kafka.partitions(topic)
        committed = kafka.committed(topic, parts, topic_config.group)
        marks = kafka.watermarks(topic, parts)
    elif sample != 0:
        report.notes.append(f"{topic}: no record compared with Kafka: Kafka no longer has this incarnation's log")
    archived = archived_partitions(store, prefix, topic)
    reader = KafkaRecords(kafka.client_config(), float(getattr(kafka, "timeout_s", 15))) if sample != 0 and live else None
    hint = chosen_incarnation.beyond_end_hint(topic, chosen, kafka_id)
    try:
        for p in sorted(set(parts) | set(archived)):
            _partition(report, PartitionArchive(store, prefix, topic, p), topic_config.group, committed.get(p),
                       marks.get(p), since, move, reader, say, live, hint, chosen.incarnation)
    finally:
        if reader is not None:
            reader.close()
    report.duration_s = time.monotonic() - t0
    return report


def _partition(report: Report, archive: PartitionArchive, group: str, committed: int | None,
               watermarks: tuple[int, int] | None, since: Since, move: bool, reader: KafkaRecords | None,
               say: Callable[[str], None] | None, live: bool = True, hint: str = "",
               incarnation=None) -> None:
    """`live`: Kafka holds this incarnation's log (else: no watermarks, no committed offset; the entries
    are judged by their own contiguity). `hint`: what a range past Kafka's log end may mean."""
    topic, p = archive.topic, archive.partition
    old_mark = None
    if since == FROM_MARK or move:
        old_mark, note = read_mark(archive.store, archive.prefix, topic, p)
        if note:
            report.notes.append(note)
    start = {EVERYTHING: None, FROM_MARK: old_mark}.get(since, since)  # type: ignore[arg-type]
    entries = _entries(archive, start)
    found = len(report.problems), len(report.loss)

    summary = PartitionSummary(p, None, None, committed, audited_from=start)
    report.partitions.append(summary)
    # An expired span (core/expire/) holds offsets as a range does: covered, neither a gap nor lost.
    ranges = [e.span for e in entries if e.kind in (RANGE, EXPIRED)]
    losses = [e.span for e in entries if e.kind == LOSS]
    low = None
    expired = 0
    if not live:
        # An earlier log: nothing of Kafka's to judge against; holes between entries are gaps still.
        problems, loss = check_coverage(topic, group, p, ranges, 0, _NO_END, None, losses, start)
        report.problems += problems
        report.loss += loss
    elif watermarks is None:
        report.problems.append(Problem(
            BEYOND_END, p, f"{topic}/{p} is archived but Kafka's topic {topic} has no partition {p}"))
    else:
        low, high = watermarks
        summary.log_start, summary.log_end = low, high
        problems, loss = check_coverage(topic, group, p, ranges, low, high, committed, losses, start, hint)
        report.problems += problems
        report.loss += loss
    if entries:
        summary.first_archived = entries[0].start
        summary.archived_end = spans.contiguous_end([e.span for e in entries], entries[0].start)
        c = committed
        if c is not None and summary.first_archived <= c < summary.archived_end:
            report.notes.append(f"{topic}/{p}: committed offset {c} is behind the archive's end "
                                f"{summary.archived_end}; the next archive run commits it")
    for e in entries:
        if start is not None and e.end <= start:
            continue  # the entry below the audit's start: judged for coverage only
        if e.kind == RANGE:
            check_range(report, archive, e, low, reader, summary, incarnation)
        elif e.kind == EXPIRED:
            expired += check_expired(report, archive, e)
        else:
            check_loss(report, archive, e, low)
        if say:
            say(f"{topic}/{p}[{e.start}, {e.end}) checked")
    if expired:
        report.notes.append(f"{topic}/{p}: {expired} offsets expired by age (archive_retention_days), not lost")
    for hole in report.problems[found[0]:]:
        if hole.kind in (GAP, UNCOVERED) and hole.partition == p:
            report.notes += _unfinished(archive, hole.start, hole.end)

    if not move or (start is not None and old_mark is not None and start > old_mark):
        summary.mark = old_mark
        return
    begin = start if start is not None else (entries[0].start if entries else None)
    bad = report.problems[found[0]:] + report.loss[found[1]:]
    # An earlier incarnation's log is closed: its archive's end is as far as anything is promised.
    upto = committed if live else summary.archived_end
    new = None if begin is None else sound_end(begin, [e.span for e in entries], bad, upto)
    summary.mark = old_mark if new is None else new
    if new is not None and new != old_mark:
        try:
            write_mark(archive.store, archive.prefix, topic, p, new, report.sample,
                       sum(1 for e in entries if start is None or e.end > start))
        except SwiftError as e:
            summary.mark = old_mark
            report.notes.append(f"{topic}/{p}: the audit mark could not be moved to {new} ({e}); the next default "
                                f"audit starts from {'the first entry' if old_mark is None else old_mark} again")


_NO_END = 10**OFFSET_WIDTH  # an earlier incarnation's log end: not Kafka's business any more


def _entries(archive: PartitionArchive, start: int | None) -> list[Entry]:
    """The entries an audit from `start` judges: from `start` on, and the last one below it."""
    if start is None:
        return list(archive.all())
    out = list(archive.entries_from(start))
    # The entry below tells whether offsets right at `start` follow an archived range (a hole
    # there is a gap) or come before anything archived.
    below = archive.last_before(start)
    if below is not None and below not in out:
        out.insert(0, below)
    return out


def _unfinished(archive: PartitionArchive, lo: int, hi: int) -> list[str]:
    """Notes on the folders of a hole: objects without a manifest (one small listing)."""
    items = archive.store.list_page(archive.dir, marker=f"{archive.dir}{lo:0{OFFSET_WIDTH}d}",
                                    end_marker=f"{archive.dir}{hi:0{OFFSET_WIDTH}d}", delimiter="/", limit=100)
    out = []
    for item in items:
        folder = item.get("subdir", "")
        span = layout.parse_range_dir(folder) if folder else None
        if span is not None:
            out.append(f"{archive.topic}/{archive.partition}[{span[0]}, {span[1]}): objects but no manifest: an "
                       "unfinished attempt, not archived; the range's next run rewrites them")
    return out

