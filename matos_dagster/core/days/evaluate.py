"""One evaluation of a topic's event-time windows against the archive: the I/O around
completeness.advance. No Dagster imports.

The state (`TopicTime`) is one JSON object per topic in the archive (layout.event_time_state_name):
per partition how far its ranges were read, so an evaluation lists and reads only the ranges
archived since the last one, whatever the history (the monitor's mark works the same way). Each
window that completes, or gets late records, is written as its own record
(layout.window_name): per partition, each range's share of it, merged by range name, so an
evaluation repeated after a crash writes the same record again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pyarrow.compute as pc

from matos_dagster.core.days import buckets as hours
from matos_dagster.core.days import windows
from matos_dagster.core.days.completeness import (
    ArchivedRange,
    Part,
    PartitionTime,
    Rules,
    TopicTime,
    Update,
    advance,
)
from matos_dagster.core.records.objects import decode, row_sizes
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import LOSS, RANGE, PartitionArchive
from matos_dagster.core.swift.store import Store

# Ranges read by one evaluation, shared by the topic's partitions: a long history (the first
# evaluation of an archive, a year of ranges) is caught up over several evaluations, each one sensor
# tick well within Dagster's sensor timeout (60 s), the state written after each.
MAX_READS = 1000


@dataclass(frozen=True)
class Window:
    """A window (re)written by an evaluation: its key, its record and that record's version."""

    key: str
    doc: dict
    version: str


def state_to_json(state: TopicTime) -> dict:
    return {
        "complete_to": state.complete_to,
        "partitions": {str(p): [t.next_offset, t.max_ts, t.future, t.untimed, t.log_end, t.log_end_since_ms,
                                t.lost, t.late, t.losses] for p, t in sorted(state.partitions.items())},
        "pending": {str(w): {str(p): part.ranges for p, part in parts.items()} for w, parts in state.pending.items()},
    }


def state_from_json(doc: dict | None) -> TopicTime:
    if not doc:
        return TopicTime()
    parts = {int(p): PartitionTime(*v) for p, v in doc["partitions"].items()}
    pending = {int(w): {int(p): Part(dict(r)) for p, r in ps.items()} for w, ps in doc["pending"].items()}
    return TopicTime(parts, doc["complete_to"], pending)


def version_of(doc: dict) -> str:
    """The window record's data version: what it holds, not when it was written."""
    return hashlib.sha256(json.dumps(doc["partitions"], sort_keys=True).encode()).hexdigest()[:16]


def window_doc(topic: str, u: Update, length_ms: int, earlier: dict | None) -> dict:
    parts = {str(p): dict(r) for p, r in (earlier or {}).get("partitions", {}).items()}
    for p, part in u.parts.items():
        parts.setdefault(str(p), {}).update(part.ranges)
    return {"topic": topic, "window": windows.key(u.start, length_ms), "start": u.start, "end": u.end,
            "partitions": parts}


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


def evaluate(store: Store, prefix: str, topic: str, rules: Rules, log_ends: dict[int, int],
             now_ms: int) -> list[Window]:
    """Read the ranges archived since the last evaluation, advance, write the windows to
    (re)materialise and then the state; returns those windows, oldest first."""
    state = state_from_json(store.get_json(layout.event_time_state_name(prefix, topic)))
    ranges, share = {}, max(1, MAX_READS // max(1, len(log_ends)))
    for p in log_ends:
        t = state.partitions.get(p) or PartitionTime()
        ranges[p] = _new_ranges(store, PartitionArchive(store, prefix, topic, p), t, share)
    state, updates = advance(state, ranges, log_ends, now_ms, rules)
    out = []
    for u in updates:
        key = windows.key(u.start, rules.length_ms)
        name = layout.window_name(prefix, topic, key)
        doc = window_doc(topic, u, rules.length_ms, store.get_json(name))
        store.put_json(name, doc)
        out.append(Window(key, doc, version_of(doc)))
    store.put_json(layout.event_time_state_name(prefix, topic), state_to_json(state))
    return out


def _new_ranges(store: Store, archive: PartitionArchive, t: PartitionTime, most: int) -> list[ArchivedRange]:
    """The partition's ranges from `t.next_offset` on, contiguous, with their hours, `most` of them; an
    acknowledged loss is passed over (its offsets counted in `t.lost`: no record of it is in any window)."""
    out, at = [], t.next_offset
    for e in archive.entries_from(at):
        if e.start > at or len(out) >= most:
            break  # a gap: what follows waits for it
        if e.kind == LOSS:
            out.append(ArchivedRange(at, e.end, "", {}, 0, lost=e.end - at))
        elif e.kind == RANGE:
            doc = archive.read(e)
            if doc is None:
                break
            name = layout.range_dir(archive.prefix, archive.range(e))
            if "hours" in doc and e.start == at:
                b = hours.from_json(doc["hours"])
                out.append(ArchivedRange(at, e.end, name, b, doc["records"] - sum(v[0] for v in b.values())))
            else:  # a manifest from before hours, or a compacted range reaching below `at`: read its records
                b, untimed = _hours_of_objects(store, doc, at)
                out.append(ArchivedRange(at, e.end, name, b, untimed))
        at = e.end
    return out


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
    stamped beyond the future margin, records without a timestamp, and where complete windows end."""
    state = state_from_json(store.get_json(layout.event_time_state_name(prefix, topic)))
    ps = state.partitions.values()
    return {"late_records": sum(p.late for p in ps), "future_timestamps": sum(p.future for p in ps),
            "untimed_records": sum(p.untimed for p in ps), "complete_to_ms": state.complete_to}
