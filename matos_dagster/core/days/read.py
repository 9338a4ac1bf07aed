"""A complete window's records, read straight from what its record names. No Dagster imports.

The window's record (core/days/evaluate.py) gives, per partition, the offsets that hold its
records; only that stretch is read (the reader lists the ranges of those offsets, not the
history), and only the records stamped inside the window are kept. A range compacted since
still holds those offsets, so the window reads the same.
"""

from __future__ import annotations

import pyarrow as pa

from matos_dagster.core import reader
from matos_dagster.core.days import evaluate
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.records.unify import concat
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store


class WindowNotComplete(LookupError):
    """A window not complete yet: `read_window` reads a day or an hour once its asset materialised it."""


def window_record(store: Store, prefix: str, topic: str, window_key: str) -> dict:
    doc = store.get_json(layout.window_name(prefix, topic, window_key))
    if doc is None:
        raise WindowNotComplete(f"window {window_key} of topic {topic} is not complete (or not evaluated) yet: "
                                f"its records are read once its days asset has materialised it")
    return doc


def read_window(store: Store, prefix: str, topic: str, window_key: str) -> pa.Table:
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

    Raises:
        WindowNotComplete: The window is not complete yet (or not evaluated): its records are
            read once its days asset has materialised it.
    """
    doc = window_record(store, prefix, topic, window_key)
    tables = []
    for p, s in sorted(evaluate.summary(doc).items()):
        if s["records"]:
            tables.append(reader.read_table(store, prefix, topic, partitions=[p], start=s["first_offset"],
                                            end=s["last_offset"] + 1, since_ms=doc["start"], until_ms=doc["end"],
                                            scan_all=True))
    if not tables:
        return SCHEMA.empty_table()
    return tables[0] if len(tables) == 1 else concat(tables)


def window_selection(store: Store, prefix: str, topic: str, window_key: str) -> tuple[tuple[str, ...], int, int]:
    """A restore of the window: the offsets its record names per partition (as archive keys) and
    its time bounds; (keys, since_ms, until_ms)."""
    from matos_dagster.core.offsets.ranges import OffsetRange

    doc = window_record(store, prefix, topic, window_key)
    keys = tuple(OffsetRange(topic, p, s["first_offset"], s["last_offset"] + 1).key
                 for p, s in sorted(evaluate.summary(doc).items()) if s["records"])
    return keys, doc["start"], doc["end"]
