"""Reading the archive back: as one Arrow table, or as a Spark DataFrame read by executors.

    from matos_dagster.reader import read_table
    table = read_table(store, "kafka", "orders", partitions=[3], start=1000, end=2000)
    table = read_table(params, "kafka", "orders", since_ms=1767225600000, until_ms=1767229200000)

Selection is the intersection of: `partitions` (None: every archived partition), the offset
window `[start, end)` (None: open) and the time window `[since_ms, until_ms)` of Kafka
timestamps in milliseconds (None: open; a record without a timestamp never falls in a time
window). Only what can hold selected records is fetched: range folders are chosen by the
offsets in their names, manifests by their offsets and min/max timestamps, objects by
theirs; rows are then filtered exactly. A range without a manifest is not archived and is
never read, whatever objects its folder holds.

`prefix` is everything in front of `topic=<topic>/`: MATOS_SWIFT_PREFIX, joined with the
topic's own `prefix` from the topics file if it has one (e.g. "kafka").

No Dagster imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster import layout, records
from matos_dagster.ranges import OffsetRange
from matos_dagster.spark_tasks import item_frame
from matos_dagster.store import Store, SwiftParams

_PARTITION_DIR = re.compile(r"partition=(\d+)/?$")


@dataclass(frozen=True)
class Window:
    """Offsets `[start, end)` of one partition, and a time window; None is open."""

    partition: int
    start: int | None = None
    end: int | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def overlaps_offsets(self, lo: int, hi: int) -> bool:
        """Whether `[lo, hi)` shares an offset with the window."""
        return (self.start is None or hi > self.start) and (self.end is None or lo < self.end)

    def overlaps_times(self, min_ts: int | None, max_ts: int | None) -> bool:
        """Whether records stamped within [min_ts, max_ts] may fall in the time window."""
        if self.since_ms is None and self.until_ms is None:
            return True
        if min_ts is None or max_ts is None:  # no record with a timestamp
            return False
        return (self.since_ms is None or max_ts >= self.since_ms) and (self.until_ms is None or min_ts < self.until_ms)

    def clip(self, lo: int, hi: int) -> tuple[int, int]:
        """`[lo, hi)` narrowed to the window's offsets."""
        return (lo if self.start is None else max(lo, self.start), hi if self.end is None else min(hi, self.end))


def archived_partitions(store: Store, prefix: str, topic: str) -> list[int]:
    """The partitions with a folder in the archive (listing folders only, not objects)."""
    out = []
    for item in store.list(layout.topic_dir(prefix, topic) + "/", delimiter="/"):
        m = _PARTITION_DIR.search(item.get("subdir", ""))
        if m:
            out.append(int(m[1]))
    return sorted(out)


def range_dirs(store: Store, prefix: str, topic: str, partition: int) -> list[tuple[int, int]]:
    """`(start, end)` of every range folder of a partition, sorted; archived or not."""
    out = []
    for item in store.list(layout.partition_dir(prefix, topic, partition) + "/", delimiter="/"):
        span = layout.parse_range_dir(item.get("subdir", ""))
        if span:
            out.append(span)
    return sorted(out)


def windows_for(
    store: Store,
    prefix: str,
    topic: str,
    partitions_: Iterable[int] | None = None,
    start: int | None = None,
    end: int | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> list[Window]:
    """One window per selected partition (every archived partition when None)."""
    chosen = archived_partitions(store, prefix, topic) if partitions_ is None else sorted(set(partitions_))
    return [Window(p, start, end, since_ms, until_ms) for p in chosen]


def find_manifests(store: Store, prefix: str, topic: str, windows: Iterable[Window]) -> list[dict]:
    """The manifests that may hold records of the windows, sorted by partition and start.

    A range folder is skipped by its name when its offsets miss every window of its
    partition, so only the manifests of overlapping ranges are fetched; the time windows are
    then checked against each manifest's min/max timestamps.
    """
    by_partition: dict[int, list[Window]] = {}
    for w in windows:
        by_partition.setdefault(w.partition, []).append(w)
    found = []
    for p, ws in sorted(by_partition.items()):
        for lo, hi in range_dirs(store, prefix, topic, p):
            if not any(w.overlaps_offsets(lo, hi) for w in ws):
                continue
            doc = store.get_json(layout.manifest_name(prefix, OffsetRange(topic, p, lo, hi)))
            if doc is None:  # objects without a manifest: not archived (yet), never read
                continue
            if any(w.overlaps_offsets(lo, hi) and w.overlaps_times(doc["min_timestamp"], doc["max_timestamp"]) for w in ws):
                found.append(doc)
    return found


def needed_objects(doc: dict, window: Window, lo: int | None = None, hi: int | None = None) -> list[dict]:
    """The objects of a manifest that may hold records of the window (within `[lo, hi)` too)."""
    out = []
    for o in doc["objects"]:
        first, last = o["first_offset"], o["last_offset"]
        if not window.overlaps_offsets(first, last + 1):
            continue
        if (lo is not None and last < lo) or (hi is not None and first >= hi):
            continue
        if window.overlaps_times(o["min_timestamp"], o["max_timestamp"]):
            out.append(o)
    return out


def filter_rows(table: pa.Table, window: Window, lo: int | None = None, hi: int | None = None) -> pa.Table:
    """The rows of `table` inside the window (and `[lo, hi)`), exactly."""
    conds = []
    offset = table["offset"]
    for bound, op in ((window.start, pc.greater_equal), (lo, pc.greater_equal), (window.end, pc.less), (hi, pc.less)):
        if bound is not None:
            conds.append(op(offset, pa.scalar(bound, pa.int64())))
    ts = pc.cast(table["timestamp"], pa.int64())
    if window.since_ms is not None:
        conds.append(pc.greater_equal(ts, pa.scalar(window.since_ms, pa.int64())))
    if window.until_ms is not None:
        conds.append(pc.less(ts, pa.scalar(window.until_ms, pa.int64())))
    if not conds:
        return table
    mask = conds[0]
    for c in conds[1:]:
        mask = pc.and_(mask, c)
    # A null timestamp compares as null: fill_null drops those rows from a time window.
    return table.filter(pc.fill_null(mask, False))


def read_object(store: Store, name: str, fmt: str) -> pa.Table:
    data = store.get(name)
    if data is None:
        raise FileNotFoundError(
            f"object {name} is listed in a manifest but missing from Swift container {store.container!r}"
        )
    return records.decode(data, fmt)


def read_table(
    store_or_params: Store | SwiftParams,
    prefix: str,
    topic: str,
    partitions: Iterable[int] | None = None,
    start: int | None = None,
    end: int | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> pa.Table:
    """The selected archived records as one Arrow table (`records.SCHEMA`), sorted by partition, offset.

    Reads on this process: for what fits in memory. For more, use `read_dataframe`.
    """
    store, own = _store(store_or_params)
    try:
        windows = windows_for(store, prefix, topic, partitions, start, end, since_ms, until_ms)
        by_partition = {w.partition: w for w in windows}
        tables = []
        for doc in find_manifests(store, prefix, topic, windows):
            w = by_partition[doc["partition"]]
            for o in needed_objects(doc, w):
                tables.append(filter_rows(read_object(store, o["name"], doc["format"]), w))
    finally:
        if own:
            store.close()
    if not tables:
        return records.SCHEMA.empty_table()
    return pa.concat_tables(tables).sort_by([("partition", "ascending"), ("offset", "ascending")])


# -- Spark -------------------------------------------------------------------------------

SPARK_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, timestamp_type string, "
    "key binary, value binary, headers array<struct<key: string, value: binary>>"
)
# The archive's Arrow schema as Spark takes it in: Spark timestamps are microseconds.
SPARK_SCHEMA = records.SCHEMA.set(
    records.SCHEMA.get_field_index("timestamp"), pa.field("timestamp", pa.timestamp("us", tz="UTC")))


@dataclass(frozen=True)
class ObjectTask:
    """One object for one Spark task to fetch and filter; travels inside the task closure."""

    name: str
    format: str
    window: Window
    swift: SwiftParams


def read_dataframe(
    spark: Any,
    params: SwiftParams,
    prefix: str,
    topic: str,
    partitions: Iterable[int] | None = None,
    start: int | None = None,
    end: int | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> Any:
    """The selected archived records as a Spark DataFrame read by executors, one task an object.

    The driver reads only listings and manifests; each task opens its own Swift connection
    (`params` travels in the task closure, never in Spark settings), fetches its object into
    memory and yields its filtered rows: nothing passes through the driver or a local disk.
    Spark partitions follow the objects in partition, offset order, so the rows of `collect()`
    are in that order too; anything that shuffles (joins, `groupBy`) needs its own `orderBy`.
    Timestamps are Spark timestamps (UTC).
    """
    with Store(params) as store:
        windows = windows_for(store, prefix, topic, partitions, start, end, since_ms, until_ms)
        by_partition = {w.partition: w for w in windows}
        tasks = [
            ObjectTask(o["name"], doc["format"], by_partition[doc["partition"]], params)
            for doc in find_manifests(store, prefix, topic, windows)
            for o in needed_objects(doc, by_partition[doc["partition"]])
        ]
    if not tasks:
        return spark.createDataFrame([], SPARK_DDL)
    return item_frame(spark, tasks, _object_batches, SPARK_DDL)


def _object_batches(task: ObjectTask) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: the selected rows of one object, typed as SPARK_DDL says."""
    with Store(task.swift) as store:
        table = filter_rows(read_object(store, task.name, task.format), task.window)
    yield from table.cast(SPARK_SCHEMA).to_batches()


def _store(store_or_params: Store | SwiftParams) -> tuple[Store, bool]:
    if isinstance(store_or_params, Store):
        return store_or_params, False
    return Store(store_or_params), True
