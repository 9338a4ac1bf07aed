"""One evaluation of a topic's event-time windows against the archive: the I/O around
completeness.advance. No Dagster imports.

What it keeps, under `topic=<topic>/_event_time/` in the archive:

- the state (`TopicTime`, layout.event_time_state_name): per partition how far its ranges were
  read, from its first archived entry on, so an evaluation lists and reads only the ranges
  archived since the last one, whatever the history (the monitor's mark works the same way);
  where complete windows end; and the journal of windows written that the sensor has not
  requested yet;
- one object per window not complete yet (layout.open_window_name): its shares read so far. A
  partition that holds the topic back (not begun, a gap) makes the others' windows wait there,
  not in the state, which stays the size of its partitions;
- one record per complete window (layout.window_name): per partition, each range's share of it,
  merged by range name, so an evaluation repeated after a crash writes the same record again.

An evaluation reads at most MAX_READS ranges and writes about MAX_WRITES windows at most, and
saves its state at least every SAVE_EVERY_S: a long history is caught up tick by tick, and a tick
stopped by Dagster's sensor timeout (60 s) loses that much work at most. The windows it wrote stay
in the journal until a later evaluation is told (`requested`, the sensor's cursor) that their runs
were requested, so none is lost with the tick.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from itertools import islice
from typing import Callable, Iterator

import pyarrow.compute as pc

from matos_dagster.core.days import buckets as hours
from matos_dagster.core.days import erased, windows
from matos_dagster.core.days.completeness import (
    ArchivedRange,
    Part,
    PartitionTime,
    Rules,
    TopicTime,
    Update,
    advance,
    next_completion_ms,
)
from matos_dagster.core.records.objects import decode, row_sizes
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import EXPIRED, LOSS, RANGE, PartitionArchive
from matos_dagster.core.swift.store import Store

# Ranges read by one evaluation, shared by the topic's partitions: a long history (the first
# evaluation of an archive, a year of ranges) is caught up over several evaluations, each one sensor
# tick well within Dagster's sensor timeout (60 s), the state written after each.
MAX_READS = 1000
# Windows written by one evaluation (complete windows' records, late records' windows, open windows),
# about: the ranges read are applied whole. Each window completed is a run of the days asset, so a
# day fills the run queue no faster than this a tick.
MAX_WRITES = 200
SAVE_EVERY_S = 10.0  # the state is saved at least this often while an evaluation goes on
BATCH = 100  # a partition's ranges are applied this many at a time (and the state saved between, if due)


@dataclass(frozen=True)
class Window:
    """A window (re)written and not yet requested: its key, its record (None: written by an earlier
    evaluation whose tick did not end), that record's version, and its place in the journal as a
    cursor (`<journal id>:<number>`): what to pass as `requested` once its run is requested."""

    key: str
    doc: dict | None
    version: str
    cursor: str = ""


def state_to_json(state: TopicTime, journal: dict | None = None) -> dict:
    return {
        "complete_to": state.complete_to,
        "first_window": state.first_window,
        "partitions": {str(p): [t.next_offset, t.max_ts, t.future, t.untimed, t.log_end, t.log_end_since_ms,
                                t.lost, t.late, t.losses, t.outside] for p, t in sorted(state.partitions.items())},
        "journal": journal or {"id": "", "seq": 0, "windows": []},
    }


def state_from_json(doc: dict | None) -> TopicTime:
    if not doc:
        return TopicTime()
    parts = {int(p): PartitionTime(*v) for p, v in doc["partitions"].items()}
    for t in parts.values():
        if t.next_offset == 0:
            t.next_offset = None  # nothing read yet (a range ends past 0): where it begins is looked up
    # A state written before open windows were kept apart holds them here: saved into their objects.
    pending = {int(w): {int(p): Part(dict(r)) for p, r in ps.items()} for w, ps in doc.get("pending", {}).items()}
    first = doc.get("first_window", min(pending, default=None) if doc["complete_to"] is None else None)
    return TopicTime(parts, doc["complete_to"], pending, first)


def version_of(doc: dict) -> str:
    """The window record's data version: what it holds, not when it was written."""
    return hashlib.sha256(json.dumps(doc["partitions"], sort_keys=True).encode()).hexdigest()[:16]


def window_doc(topic: str, u: Update, length_ms: int, earlier: dict | None) -> dict:
    parts = {str(p): dict(r) for p, r in (earlier or {}).get("partitions", {}).items()}
    for p, part in u.parts.items():
        parts.setdefault(str(p), {}).update(part.ranges)
    doc = {"topic": topic, "window": windows.key(u.start, length_ms), "start": u.start, "end": u.end,
           "partitions": parts}
    if "erased" in (earlier or {}):  # the erased offsets already taken off (days/erased.py)
        doc["erased"] = earlier["erased"]
    return doc


def summary(doc: dict) -> dict[int, dict]:
    """Per partition: records, bytes, first and last offset, late records, ranges, and the acknowledged
    losses `[start, end)` that may have held records of the window (a window record's)."""
    out = {}
    for p, ranges in doc["partitions"].items():
        part = Part(dict(ranges))
        out[int(p)] = {"records": part.records, "bytes": part.bytes, "first_offset": part.first_offset,
                       "last_offset": part.last_offset, "late": part.late,
                       "ranges": part.names, "lost": part.losses}
    return out


@dataclass(frozen=True)
class Evaluated:
    windows: list[Window]  # written and not yet requested, oldest first
    # No window can complete before this time (ms, completeness.next_completion_ms); None: any time
    # (no window begun, or this evaluation left ranges unread).
    next_completion_ms: int | None


def evaluate(store: Store, prefix: str, topic: str, rules: Rules, log_ends: dict[int, int], now_ms: int,
             log_starts: dict[int, int] | None = None,
             committed: Callable[[list[int]], dict[int, int | None]] | None = None,
             requested: str | None = None) -> list[Window]:
    """`evaluated`'s windows."""
    return evaluated(store, prefix, topic, rules, log_ends, now_ms, log_starts, committed, requested).windows


def evaluated(store: Store, prefix: str, topic: str, rules: Rules, log_ends: dict[int, int], now_ms: int,
              log_starts: dict[int, int] | None = None,
              committed: Callable[[list[int]], dict[int, int | None]] | None = None,
              requested: str | None = None) -> Evaluated:
    """Read the ranges archived since the last evaluation, advance, write the windows to
    (re)materialise, the open windows and the state; returns the windows written and not yet
    requested, oldest first, and when a window can complete next.

    `log_starts`: each partition's log start offset, `committed`: the archiver group's committed
    offsets (asked only when a partition's first entry lies above its log start): a partition
    begins at its first entry once nothing below it can still be archived. `requested`: the cursor
    of the last window whose run was requested ("": none yet; the sensor's cursor); None: the
    caller takes the windows returned, and none is kept."""
    run = _Evaluation(store, prefix, topic, rules, now_ms, requested)
    starts = log_starts or {}
    archives = {p: PartitionArchive(store, prefix, topic, p) for p in log_ends}
    begins = _begins(run.state, archives, starts, committed)
    run.forget()
    # Every partition's log end seen, and the windows complete already, before reading can fill the budget.
    run.apply({}, log_ends, starts)
    share = max(1, MAX_READS // max(1, len(log_ends)))
    short = False  # ranges left unread: the next evaluation may complete a window at once
    for p, archive in archives.items():
        t = run.state.partitions.get(p)
        at = t.next_offset if t is not None and t.next_offset is not None else begins.get(p)
        if at is None:
            continue
        ranges, read = _ranges(store, archive, at), 0
        while read < share and not run.full():
            batch = list(islice(ranges, min(BATCH, share - read)))
            if not batch:
                break
            read += len(batch)
            run.apply({p: batch}, log_ends, starts)
        short = short or read >= share or run.full()
    run.save()
    return Evaluated(run.windows(), None if short else next_completion_ms(run.state, rules))


class _Evaluation:
    """One evaluation's state, journal and writes."""

    def __init__(self, store: Store, prefix: str, topic: str, rules: Rules, now_ms: int, requested: str | None):
        self.store, self.prefix, self.topic, self.rules, self.now_ms = store, prefix, topic, rules, now_ms
        doc = store.get_json(layout.event_time_state_name(prefix, topic))
        self.state = state_from_json(doc)
        journal = (doc or {}).get("journal") or {}
        # Its id: a cursor of another journal (a state made anew) has requested none of this one's windows.
        self.id, self.seq = journal.get("id") or uuid.uuid4().hex[:12], journal.get("seq", 0)
        self.keep = requested is not None
        given, done = _place(requested or "")
        done = done if given == self.id else 0
        self.journal = [e for e in journal.get("windows", []) if e[0] > done] if self.keep else []
        self.docs: dict[str, dict] = {}  # the records this evaluation wrote
        self.writes = 0
        self.done_open: list[str] = []  # open windows completed: deleted once the state says so
        self.erasures: list[str] = []  # erasures' markers applied: deleted once the state is saved
        self.saved = time.monotonic()

    def full(self) -> bool:
        return self.writes + len(self.state.pending) >= MAX_WRITES

    def apply(self, ranges: dict[int, list[ArchivedRange]], log_ends: dict[int, int], log_starts: dict[int, int]):
        self.state, updates = advance(self.state, ranges, log_ends, self.now_ms, self.rules, log_starts,
                                      most=MAX_WRITES - self.writes - len(self.state.pending))
        for u in updates:
            self.write(u)
        if time.monotonic() - self.saved >= SAVE_EVERY_S:
            self.save()

    def write(self, u: Update) -> None:
        """A window's record: a late change merged into it, or a window complete now, with its shares
        of earlier evaluations (its open object)."""
        key = windows.key(u.start, self.rules.length_ms)
        name = layout.window_name(self.prefix, self.topic, key)
        if u.late:
            earlier = self.store.get_json(name)
        else:
            opened = layout.open_window_name(self.prefix, self.topic, key)
            earlier = self.store.get_json(opened)
            if earlier is not None:
                self.done_open.append(opened)
        self.rewrite(key, window_doc(self.topic, u, self.rules.length_ms, earlier))

    def forget(self) -> None:
        """The windows that held records of finished erasures recounted (days/erased.py), rewritten
        and journalled like a late record's; their markers deleted once the state is saved."""
        self.erasures = erased.apply(self.store, self.prefix, self.topic, self.state, self.rules.length_ms,
                                     self.rewrite)

    def rewrite(self, key: str, doc: dict) -> None:
        """A complete window's record written, and journalled for its run."""
        self.store.put_json(layout.window_name(self.prefix, self.topic, key), doc)
        self.writes += 1
        self.seq += 1
        self.journal = [e for e in self.journal if e[1] != key] + [[self.seq, key, version_of(doc)]]
        self.docs[key] = doc

    def save(self) -> None:
        """The open windows' new shares into their objects, then the state; then the objects of the
        windows the state now says are complete are deleted."""
        for w, parts in sorted(self.state.pending.items()):
            name = layout.open_window_name(self.prefix, self.topic, windows.key(w, self.rules.length_ms))
            u = Update(w, w + self.rules.length_ms, parts, False)
            self.store.put_json(name, window_doc(self.topic, u, self.rules.length_ms, self.store.get_json(name)))
            self.writes += 1
        self.state.pending = {}
        journal = {"id": self.id, "seq": self.seq, "windows": self.journal if self.keep else []}
        self.store.put_json(layout.event_time_state_name(self.prefix, self.topic), state_to_json(self.state, journal))
        for name in self.done_open + self.erasures:
            self.store.delete(name)
        self.done_open, self.erasures = [], []
        self.saved = time.monotonic()

    def windows(self) -> list[Window]:
        return [Window(key, self.docs.get(key), version, f"{self.id}:{seq}")
                for seq, key, version in sorted(self.journal, key=lambda e: (e[1], e[0]))]


def last_cursor(done: list[Window], requested: str) -> str:
    """The cursor to keep once the runs of `done` are requested: its latest journal place."""
    return max((w.cursor for w in done), key=lambda c: _place(c)[1], default=requested)


def _place(cursor: str) -> tuple[str, int]:
    given, _, seq = cursor.rpartition(":")
    return given, int(seq) if seq.isdigit() else 0


def _begins(state: TopicTime, archives: dict[int, PartitionArchive], log_starts: dict[int, int],
            committed: Callable[[list[int]], dict[int, int | None]] | None) -> dict[int, int]:
    """Where each partition not begun begins: its first entry (one small listing), a range or an
    acknowledged loss, once nothing below it can still be archived: its log start is at or past it
    (the records below are gone), or the group's committed offset is (the archive goes on from
    there). Until then a range archived below it, out of order, would be missed: it waits, as for a gap."""
    found = {}
    for p, archive in archives.items():
        t = state.partitions.get(p)
        if t is None or t.next_offset is None:
            first = archive.entry_at_or_after(0)
            if first is not None:
                found[p] = first.start
    above = [p for p, start in found.items() if start > log_starts.get(p, start)]
    offsets = committed(above) if above and committed is not None else {}
    return {p: start for p, start in found.items()
            if p not in above or (offsets.get(p) is not None and offsets[p] >= start)}


def _ranges(store: Store, archive: PartitionArchive, at: int) -> Iterator[ArchivedRange]:
    """The partition's ranges from `at` on, contiguous, with their hours, read as they are taken; an
    acknowledged loss is passed over (its offsets counted in `lost`: no record of it is in any window)."""
    for e in archive.entries_from(at):
        if e.start > at:
            return  # a gap: what follows waits for it
        if e.kind == LOSS:
            yield ArchivedRange(at, e.end, "", {}, 0, lost=e.end - at)
        elif e.kind == EXPIRED:  # core/expire/: its days are before the retention's cutoff, none lost
            yield ArchivedRange(at, e.end, "", {}, 0)
        elif e.kind == RANGE:
            doc = archive.read(e)
            if doc is None:
                return
            name = layout.range_dir(archive.prefix, archive.range(e))
            if "hours" in doc and e.start == at:
                b = hours.from_json(doc["hours"])
                yield ArchivedRange(at, e.end, name, b, doc["records"] - sum(v[0] for v in b.values()))
            else:  # a manifest from before hours, or a compacted range reaching below `at`: read its records
                b, untimed = _hours_of_objects(store, doc, at)
                yield ArchivedRange(at, e.end, name, b, untimed)
        at = e.end


def _hours_of_objects(store: Store, doc: dict, from_offset: int) -> tuple[hours.Buckets, int]:
    total, untimed = {}, 0
    for o in doc["objects"]:
        if o["last_offset"] < from_offset:
            continue
        table = decode(store.get(o["name"]), doc["format"])
        if o["first_offset"] < from_offset:
            table = table.filter(pc.greater_equal(table["offset"], from_offset))
        b, u = hours.of_records(table["timestamp"], table["offset"], row_sizes(table))
        total, untimed = hours.merge(total, b), untimed + u
    return total, untimed


def counts(store: Store, prefix: str, topic: str) -> dict[str, int | None]:
    """What the last evaluation counted over the topic (one GET, the state): late records, records
    stamped beyond the future margin (in their windows), records without a timestamp, records stamped
    outside the windows (before windows_start, past the year 9999), and where complete windows end."""
    state = state_from_json(store.get_json(layout.event_time_state_name(prefix, topic)))
    ps = state.partitions.values()
    return {"late_records": sum(p.late for p in ps), "future_timestamps": sum(p.future for p in ps),
            "untimed_records": sum(p.untimed for p in ps), "outside_windows": sum(p.outside for p in ps),
            "complete_to_ms": state.complete_to}
