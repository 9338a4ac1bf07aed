"""What to restore: the Request, its windows, and the plan of units (one Spark task each).

The driver reads listings and manifests only; it plans one *unit* per archived range (the
part of it the selection wants) and runs the units as Spark tasks. Each task fetches its
range's objects from Swift itself and produces the records with its own idempotent,
transactional producer, keeping key, value, headers and timestamp (as CreateTime): see task.py.

Ranges of one source partition are restored in offset order (in *waves*: the i-th unit of
every partition runs in the i-th Spark job), so the marker only moves forward and records
keep their order in the target partition.

The restore's two errors are here too, because every other module of the restore imports this one.
No Dagster imports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from matos_dagster.core import reader
from matos_dagster.core.offsets import spans
from matos_dagster.core.offsets.ranges import OffsetRange, parse_key
from matos_dagster.core.reader import Window
from matos_dagster.core.schemas.sources import RegistrySource
from matos_dagster.core.swift.store import Store, SwiftParams

log = logging.getLogger(__name__)


class RestoreRefused(ValueError):
    """The restore cannot run as asked; nothing was produced."""


class RestoreFailed(RuntimeError):
    """Kafka did not take an object's records; its transaction was aborted, the marker not moved."""


@dataclass(frozen=True)
class Request:
    """What to restore where. Offsets are half-open; times are Kafka milliseconds."""

    topic: str
    # In front of `topic=<topic>/`: MATOS_SWIFT_PREFIX joined with the topic's prefix, and the
    # incarnation's (core/swift/chosen_incarnation.py) when the topic has had more than one log.
    prefix: str
    partitions: tuple[int, ...] | None = None  # None: every archived partition
    start: int | None = None
    end: int | None = None
    keys: tuple[str, ...] = ()  # archive partition keys; instead of partitions/start/end
    since_ms: int | None = None
    until_ms: int | None = None
    target: str = ""  # empty: the source topic
    keep_partition: bool = True  # else the target's partitioner, by key (murmur2, as Java's)
    dry_run: bool = False
    scan_all: bool = False  # a time window: read every manifest (timestamps out of order), see reader.py
    group: str = ""  # the marker's consumer group; empty: matos-restore-<target>
    # The largest record the archive may hold (the topic's max_record_bytes): the producer's
    # limit when a manifest is too old to give its largest record.
    max_record_bytes: int = 16 * 1024**2
    # Another registry to register the archived schemas in, rewriting the records' schema ids to
    # its own (registry.py); None: the records keep their ids, byte-exact.
    target_registry: RegistrySource | None = None
    # Which log of the topic's name `prefix` holds (1: the first, and every archive without
    # incarnations): two logs share offsets, so each has its own marker.
    incarnation: int = 1

    @property
    def target_topic(self) -> str:
        return self.target or self.topic

    @property
    def marker_group(self) -> str:
        # Markers count source offsets: a later incarnation's offsets 0, 1, ... are not the first's,
        # and must not read as restored because the first's were.
        own = "" if self.incarnation == 1 else f"-incarnation-{self.incarnation}"
        return self.group or f"matos-restore-{self.target_topic}{own}"

    def windows(self, store: Store) -> list[Window]:
        if self.keys and (self.partitions is not None or self.start is not None or self.end is not None):
            raise RestoreRefused("select by archive partition keys or by partition and offsets, not both")
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise RestoreRefused(f"an offset window needs start < end, got [{self.start}, {self.end})")
        if self.since_ms is not None and self.until_ms is not None and self.until_ms <= self.since_ms:
            raise RestoreRefused(f"a time window needs since_ms < until_ms, got [{self.since_ms}, {self.until_ms})")
        if not self.keys:
            return reader.windows_for(
                store, self.prefix, self.topic, self.partitions, self.start, self.end, self.since_ms, self.until_ms
            )
        keyed: dict[int, list[tuple[int, int]]] = {}
        for key in self.keys:
            r = parse_key(key)
            if r.topic != self.topic:
                raise RestoreRefused(f"key {key} is of topic {r.topic!r}, not of {self.topic!r}")
            keyed.setdefault(r.partition, []).append((r.start, r.end))
        out = []
        for p, ss in sorted(keyed.items()):
            for lo, hi in spans.merge(ss):  # overlapping keys must not restore an offset twice
                out.append(Window(p, lo, hi, self.since_ms, self.until_ms))
        return out


@dataclass(frozen=True)
class Fault:
    """A drill: crash the task of `partition`'s unit starting at `start` (as a killed process
    would: no abort, no clean-up) after producing its `after`-th transaction's records and
    marker, before the commit. For tests; the job never sets it."""

    partition: int
    start: int
    after: int = 1
    how: str = "exit"  # "exit": os._exit, as a kill; "raise": an exception


@dataclass(frozen=True)
class Unit:
    """One Spark task: offsets `[lo, hi)` of one archived range, into the target."""

    source: OffsetRange  # the archived range
    lo: int
    hi: int
    window: Window
    format: str
    objects: tuple[dict, ...]  # the manifest entries of the objects to read, in offset order
    target: str
    keep_partition: bool
    group: str
    transactional_id: str
    kafka_conf: dict[str, Any] = field(repr=False)  # secrets included: never log
    swift: SwiftParams
    dry_run: bool
    timeout_s: float
    fault: Fault | None = None
    producer_conf: dict[str, Any] = field(default_factory=dict)  # set by `restore` once planned
    schema_ids: dict[str, dict[int, int]] = field(default_factory=dict)  # side -> archived -> target id

    @property
    def partition(self) -> int:
        return self.source.partition

    def __str__(self) -> str:
        return f"{self.source.topic}/{self.partition}[{self.lo}, {self.hi})"



def plan(req: Request, store: Store, kafka_conf: dict[str, Any], timeout_s: float, fault: Fault | None = None,
         say: Callable[[str], None] = log.info) -> list[Unit]:
    """The units of the restore, sorted by source partition and offset.

    Reads listings and manifests only, bounded as the reader's are (reader.find_manifests):
    an offset window lists from its start, a time window searches for its first range.
    Acknowledged losses in the selection hold no records: skipped, with a note to `say`.
    """
    windows = req.windows(store)
    by_partition: dict[int, list[Window]] = {}
    for w in windows:
        by_partition.setdefault(w.partition, []).append(w)
    units = []
    found = reader.find_manifests(store, req.prefix, req.topic, windows, req.scan_all)
    for note in found.notes:
        say(note)
    for doc in found.manifests:
        r = OffsetRange(req.topic, doc["partition"], doc["start"], doc["end"])
        for w in by_partition[r.partition]:
            if not w.overlaps_offsets(r.start, r.end):
                continue
            lo, hi = w.clip(r.start, r.end)
            objects = reader.needed_objects(doc, w)
            if not objects:  # holes only, or nothing in the time window
                continue
            units.append(
                Unit(
                    source=r,
                    lo=lo,
                    hi=hi,
                    window=w,
                    format=doc["format"],
                    objects=tuple(objects),
                    target=req.target_topic,
                    keep_partition=req.keep_partition,
                    group=req.marker_group,
                    # Fixed by the restore and the source partition: a rerun fences the last one.
                    transactional_id=f"{req.marker_group}:{req.topic}:{r.partition}",
                    kafka_conf=kafka_conf,
                    swift=store.params,
                    dry_run=req.dry_run,
                    timeout_s=timeout_s,
                    fault=fault,
                )
            )
    return sorted(units, key=lambda u: (u.partition, u.lo))


def waves(units: list[Unit]) -> list[list[Unit]]:
    """The i-th unit of every source partition in the i-th wave: partitions in parallel,
    each partition's ranges in order."""
    by_partition: dict[int, list[Unit]] = {}
    for u in units:
        by_partition.setdefault(u.partition, []).append(u)
    depth = max((len(v) for v in by_partition.values()), default=0)
    return [[v[i] for _, v in sorted(by_partition.items()) if i < len(v)] for i in range(depth)]
