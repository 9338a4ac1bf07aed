"""A complete window's records, read straight from what its record names. No Dagster imports.

The window's record (core/days/evaluate.py) gives, per partition, the offsets that hold its
records; only that stretch is read (the reader lists the ranges of those offsets, not the
history), and only the records stamped inside the window are kept. A range compacted since
still holds those offsets, so the window reads the same.

A topic deleted and created again has incarnations (core/swift/incarnations.py), each with its own
days, evaluated from its own archive: the first's records of a day and the second's are both the
day's. The day is complete once every incarnation has completed it: written its record, or passed
it without a record of it (its complete windows reach past the day, or its first record is later).
An earlier incarnation is closed by the days sensor (`close`) once Kafka holds a new log: its
partitions are then idle at their archive's end, so its last days complete without it holding
anything back.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from matos_dagster.core import reader
from matos_dagster.core.days import evaluate
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.records.unify import concat
from matos_dagster.core.days import windows
from matos_dagster.core.days.completeness import Rules
from matos_dagster.core.offsets.ranges import OFFSET_WIDTH
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.archived import PartitionArchive, archived_partitions
from matos_dagster.core.swift.chosen_incarnation import choose
from matos_dagster.core.swift.store import Store


class WindowNotComplete(LookupError):
    """A window not complete yet: `read_window` reads a day or an hour once its asset materialised it."""


def window_record(store: Store, prefix: str, topic: str, window_key: str) -> dict:
    doc = store.get_json(layout.window_name(prefix, topic, window_key))
    if doc is None:
        raise WindowNotComplete(f"window {window_key} of topic {topic} is not complete (or not evaluated) yet: "
                                f"its records are read once its days asset has materialised it")
    return doc


def read_window(store: Store, prefix: str, topic: str, window_key: str,
                incarnation: str | int | None = None) -> pa.Table:
    """The records of one complete day or hour of event time, as `read_table` gives them.

    Only the stretch of offsets the window's record names is read, and only the records stamped
    inside the window are kept; a range compacted since holds those offsets still, so the
    window reads the same.

    Args:
        store: The archive's Swift container (`SwiftResource(...).store()`).
        prefix: As `read_table`'s.
        topic: The Kafka topic.
        window_key: The window, as the days asset's partition key: `2026-11-24` (a day, UTC) or
            `2026-11-24-13:00` (an hour).
        incarnation: None (the default): the window's records of every incarnation of the topic
            (a topic deleted and created again), the earlier incarnation's first, each in
            partition and offset order. A number (1 the first) or Kafka's topic id: that
            incarnation's records of the window only.

    Raises:
        WindowNotComplete: The window is not complete yet (or not evaluated): its records are
            read once its days asset has materialised it. With incarnations, it is complete once
            each has completed it (see the module doc).
        IncarnationError: The archive has no such incarnation.
    """
    if incarnation is not None:
        chosen = choose(store, prefix, topic, incarnation).prefix
        found = [(chosen, window_record(store, chosen, topic, window_key))]
    else:
        found = window_records(store, prefix, topic, window_key)
    tables = []
    for where, doc in found:
        for p, s in sorted(evaluate.summary(doc).items()):
            if s["records"]:
                tables.append(reader.read_incarnation(store, where, topic, partitions=[p], start=s["first_offset"],
                                                      end=s["last_offset"] + 1, since_ms=doc["start"],
                                                      until_ms=doc["end"], scan_all=True))
    if not tables:
        return SCHEMA.empty_table()
    return tables[0] if len(tables) == 1 else concat(tables)


def window_records(store: Store, prefix: str, topic: str, window_key: str) -> list[tuple[str, dict]]:
    """(the incarnation's prefix, its record of the window) of each incarnation that holds records of
    it, oldest first; WindowNotComplete unless every incarnation has completed it (the module doc)."""
    found = incarnations.read(store, prefix, topic)
    if len(found) == 1:
        return [(prefix, window_record(store, prefix, topic, window_key))]
    out, waiting = [], []
    for i in found:
        where = i.prefix(prefix)
        doc = store.get_json(layout.window_name(where, topic, window_key))
        if doc is not None:
            out.append((where, doc))
        elif not _passed(store, where, topic, window_key):
            waiting.append(str(i.number))
    if waiting or not out:
        raise WindowNotComplete(f"window {window_key} of topic {topic} is not complete (or not evaluated) yet"
                                + (f" in incarnation {', '.join(waiting)}" if waiting else "")
                                + ": its records are read once its days asset has materialised it")
    return out


def _passed(store: Store, prefix: str, topic: str, window_key: str) -> bool:
    """Whether the incarnation's days went past the window without a record of it."""
    state = evaluate.state_from_json(store.get_json(layout.event_time_state_name(prefix, topic)))
    length = windows.HOUR_MS if len(window_key) > 10 else windows.DAY_MS
    start, end = windows.parse(window_key, length)
    if state.complete_to is not None:
        return end <= state.complete_to
    return state.first_window is None and not state.pending or (state.first_window or 0) > start


def close(store: Store, prefix: str, topic: str, rules: Rules, now_ms: int) -> list[evaluate.Window]:
    """Evaluate an earlier incarnation's days as a closed log (its partitions idle at once at their
    archive's end: nothing more is ever archived of it); the windows written (none: it is closed)."""
    ends, starts = {}, {}
    for p in archived_partitions(store, prefix, topic):
        archive = PartitionArchive(store, prefix, topic, p)
        first, last = archive.entry_at_or_after(0), archive.last_before(10**OFFSET_WIDTH - 1)
        if first is not None and last is not None:
            starts[p], ends[p] = first.start, last.end
    if not ends:
        return []
    return evaluate.evaluate(store, prefix, topic, dataclasses.replace(rules, idle_ms=0), ends, now_ms,
                             log_starts=starts, requested=None)


def window_selection(store: Store, prefix: str, topic: str, window_key: str) -> tuple[tuple[str, ...], int, int]:
    """A restore of the window: the offsets its record names per partition (as archive keys) and
    its time bounds; (keys, since_ms, until_ms)."""
    from matos_dagster.core.offsets.ranges import OffsetRange

    doc = window_record(store, prefix, topic, window_key)
    keys = tuple(OffsetRange(topic, p, s["first_offset"], s["last_offset"] + 1).key
                 for p, s in sorted(evaluate.summary(doc).items()) if s["records"])
    return keys, doc["start"], doc["end"]
