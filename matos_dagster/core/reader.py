"""Reading the archive back: as one Arrow table, or as a Spark DataFrame read by executors.

Selection is the intersection of `partitions`, the offset window `[start, end)` and the time
window `[since_ms, until_ms)` of Kafka timestamps (`read_table` says each). Only what can hold
selected records is fetched: range folders are chosen by the offsets in their names, manifests
by their offsets and min/max timestamps, objects by theirs; rows are then filtered exactly. A
range without a manifest is never read; an acknowledged loss holds no records and is skipped
with a note. Planning is bounded (archived.py): an offset window lists entries from its start
to its end, a time window finds its first range by a binary search over offsets, whatever the
history below. A topic deleted and created again has incarnations, each its own log with its own
offsets (core/swift/incarnations.py): a read takes one, the newest unless told (`incarnation=`).
No Dagster imports.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.read_planning import Window, find_manifests
from matos_dagster.core.records import unify
from matos_dagster.core.records.objects import decode
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.spark.frames import frame_types
from matos_dagster.core.spark.tasks import item_frame
from matos_dagster.core.swift.archived import archived_partitions
from matos_dagster.core.swift.chosen_incarnation import choose
from matos_dagster.core.swift.footers import object_schemas
from matos_dagster.core.swift.store import Store, SwiftParams


class AcknowledgedLoss(UserWarning):
    """A read met offsets recorded as lost: they hold no records (warned unless `say` is given)."""


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
            f"object {name} is listed in a manifest but missing from Swift container {store.container!r}: the "
            "archive is damaged there (`matos verify <topic> --audit-all` lists every such object)"
        )
    return decode(data, fmt)


def read_table(
    store_or_params: Store | SwiftParams,
    prefix: str,
    topic: str,
    partitions: Iterable[int] | None = None,
    start: int | None = None,
    end: int | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    scan_all: bool = False,
    say: Callable[[str], None] | None = None,
    incarnation: str | int | None = None,
) -> pa.Table:
    """The selected archived records as one Arrow table, read in this process.

    Exactly the archived records (a range is read only once its manifest is written), each once,
    sorted by partition and offset. Only the manifests of ranges that overlap the selection are
    read, and only the objects whose offsets and timestamps can match; the rows are then filtered
    exactly. For more than fits in memory, use `read_dataframe`.

    Args:
        store_or_params: The archive's Swift container: a `Store`, or the `SwiftParams` of one
            (`SwiftResource(...).params()`), which this call opens and closes.
        prefix: Everything in front of `topic=<topic>/` in the object names: MATOS_SWIFT_PREFIX
            (`kafka` by default), joined with the topic's own `prefix` from the topics file.
        topic: The Kafka topic.
        partitions: The Kafka partitions to read; None: every archived partition.
        start: First offset of the window (inclusive); None: open.
        end: End of the window (exclusive); None: open.
        since_ms: First Kafka timestamp of the time window, in milliseconds since the epoch
            (inclusive); None: open. A record without a timestamp is in no time window.
        until_ms: End of the time window (exclusive); None: open.
        scan_all: Read every manifest of the offset window instead of finding a time window's first
            range by binary search: for producers that stamp records out of timestamp order.
        say: Where notes on acknowledged losses in the selection go (they hold no records);
            None: an `AcknowledgedLoss` warning.
        incarnation: Which log of the topic's name, when the topic was deleted and created
            again: its number (1 the first) or Kafka's topic id; None: the newest. Each
            incarnation is its own log, with its own offsets from 0: a read takes one of them.

    Raises:
        IncarnationError: The archive has no such incarnation of the topic (the message names
            those it has).

    Returns:
        A `pyarrow.Table` with the columns of the record table (topic, partition, offset,
        timestamp, timestamp_type, key, value, headers), then the typed columns of a typed
        topic's objects, in one type across the objects (null where an object lacks a column).
    """
    store, own = _store(store_or_params)
    try:
        prefix = choose(store, prefix, topic, incarnation).prefix
        return read_incarnation(store, prefix, topic, partitions, start, end, since_ms, until_ms, scan_all, say)
    finally:
        if own:
            store.close()


def read_incarnation(store: Store, prefix: str, topic: str, partitions: Iterable[int] | None = None,
                     start: int | None = None, end: int | None = None, since_ms: int | None = None,
                     until_ms: int | None = None, scan_all: bool = False,
                     say: Callable[[str], None] | None = None) -> pa.Table:
    """`read_table` of the archive under `prefix` as it is (an incarnation's prefix, already chosen)."""
    windows = windows_for(store, prefix, topic, partitions, start, end, since_ms, until_ms)
    by_partition = {w.partition: w for w in windows}
    tables = []
    for doc in _selected(store, prefix, topic, windows, scan_all, say):
        w = by_partition[doc["partition"]]
        for o in needed_objects(doc, w):
            tables.append(filter_rows(read_object(store, o["name"], doc["format"]), w))
    if not tables:
        return SCHEMA.empty_table()
    return unify.concat(tables, topic).sort_by([("partition", "ascending"), ("offset", "ascending")])


# -- Spark -------------------------------------------------------------------------------

SPARK_DDL = (
    "topic string, partition int, offset bigint, timestamp timestamp, timestamp_type string, "
    "key binary, value binary, headers array<struct<key: string, value: binary>>"
)
# The archive's Arrow schema as Spark takes it in: Spark timestamps are microseconds.
SPARK_SCHEMA = SCHEMA.set(
    SCHEMA.get_field_index("timestamp"), pa.field("timestamp", pa.timestamp("us", tz="UTC")))


@dataclass(frozen=True)
class ObjectTask:
    """One object for one Spark task to fetch and filter; travels inside the task closure."""

    name: str
    format: str
    window: Window
    swift: SwiftParams
    schema: pa.Schema | None = None  # a typed read's: what the task casts its rows to (None: SPARK_SCHEMA)


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
    scan_all: bool = False,
    say: Callable[[str], None] | None = None,
    incarnation: str | int | None = None,
) -> Any:
    """The selected archived records as a Spark DataFrame read by executors, one task an object.

    The driver reads only listings and manifests; each task opens its own Swift connection
    (`params` travels in the task closure, never in Spark settings), fetches its object into
    memory and yields its filtered rows: nothing passes through the driver or a local disk.
    Spark partitions follow the objects in partition, offset order, so the rows of `collect()`
    are in that order too; anything that shuffles (joins, `groupBy`) needs its own `orderBy`.
    Timestamps are Spark timestamps (UTC). Typed columns follow the raw ones when the objects
    have them, typed as `read_table` types them: the driver reads the footers of the objects of
    typed ranges (one small GET each, no record) to know their types before the tasks run.
    The executors import matos_dagster: it must be installed where they run.

    Args:
        spark: A `SparkSession`, classic or Spark Connect.
        params: The archive's Swift settings (`SwiftResource(...).params()`).
        prefix: As `read_table`'s.
        topic: The Kafka topic.
        partitions: The Kafka partitions to read; None: every archived partition.
        start: First offset of the window (inclusive); None: open.
        end: End of the window (exclusive); None: open.
        since_ms: First Kafka timestamp of the time window, in milliseconds (inclusive); None: open.
        until_ms: End of the time window (exclusive); None: open.
        scan_all: As `read_table`'s.
        say: As `read_table`'s.
        incarnation: As `read_table`'s.

    Returns:
        A Spark DataFrame with the record table's columns (and a typed topic's typed columns).
    """
    with Store(params) as store:
        prefix = choose(store, prefix, topic, incarnation).prefix
        windows = windows_for(store, prefix, topic, partitions, start, end, since_ms, until_ms)
        by_partition = {w.partition: w for w in windows}
        tasks, typed_objects = [], []
        for doc in _selected(store, prefix, topic, windows, scan_all, say):
            for o in needed_objects(doc, by_partition[doc["partition"]]):
                tasks.append(ObjectTask(o["name"], doc["format"], by_partition[doc["partition"]], params))
                if "typed" in doc:  # a typed range's manifest says so (swift/manifest.py); others have none
                    typed_objects.append(o["name"])
        schemas = object_schemas(params, typed_objects, store) if typed_objects else []
        typed = unify.typed_fields(unify.unify(schemas, topic)) if schemas else []
    if not tasks:
        return spark.createDataFrame([], SPARK_DDL)
    if not typed:
        return item_frame(spark, tasks, _object_batches, SPARK_DDL)
    struct, arrow = frame_types(SPARK_SCHEMA, typed)
    return item_frame(spark, [dataclasses.replace(t, schema=arrow) for t in tasks], _object_batches, struct)


def _object_batches(task: ObjectTask) -> Iterator[pa.RecordBatch]:
    """Runs on an executor: the selected rows of one object, typed as SPARK_DDL (and the typed columns) say."""
    with Store(task.swift) as store:
        table = filter_rows(read_object(store, task.name, task.format), task.window)
    if task.schema is None:
        yield from unify.raw(table).cast(SPARK_SCHEMA).to_batches()
    else:
        yield from unify.conform(table, task.schema).to_batches()


def _selected(store: Store, prefix: str, topic: str, windows: list[Window], scan_all: bool,
              say: Callable[[str], None] | None) -> list[dict]:
    found = find_manifests(store, prefix, topic, windows, scan_all)
    for note in found.notes:
        if say is None:
            warnings.warn(note, AcknowledgedLoss, stacklevel=3)
        else:
            say(note)
    return found.manifests


def _store(store_or_params: Store | SwiftParams) -> tuple[Store, bool]:
    if isinstance(store_or_params, Store):
        return store_or_params, False
    return Store(store_or_params), True
