"""Archiving many ranges in one run: the ranges a tick finds due, of many topics and partitions.

The protocol of each range is range_run.py's, unchanged: objects under deterministic names, the
manifest last, then the commit, forward only, to the end of the contiguous archived prefix. What
is shared is the cost around it, which for a quiet topic is most of a range's cost:

1. Kafka is asked once for the batch: the topics' partitions, every partition's log start and
   end offsets, each group's committed offsets (core/kafka/many.py);
2. each range is checked against those and the archive (`range_run.plan`); a refused range is
   an outcome of its own, the others go on;
3. every slice of every range runs in ONE Spark job; a task carries several small slices
   (`pack`), and a slice that fails is that slice's outcome, not the job's, so one bad partition
   does not hold back the estate;
4. each range whose slices all wrote gets its schemas and manifest (`range_run.write_manifest`);
5. the committed offsets of the partitions touched move on (commit.advance_many: one committed
   read, one commit and one read-back per group);
6. each partition's Iceberg table, when tables are on.

A crash anywhere leaves each range archived exactly once or not at all: a range is archived when
its manifest is there, and a later run of a range rewrites the same objects. No Dagster imports.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from matos_dagster.core import faults, tracing
from matos_dagster.core.archive.commit import advance_many
from matos_dagster.core.archive.range_run import Archived, DataLoss, Planned, RangeRefused, plan, write_manifest
from matos_dagster.core.archive.slice_task import RecordTooLarge, SliceJob, archive_slice
from matos_dagster.core.iceberg.hooks import keep_table
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.schemas import typed as typed_columns
from matos_dagster.core.spark.tasks import run_tasks
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

log = logging.getLogger(__name__)

# A Spark task carries slices until they hold this many offsets or this many slices: a quiet
# partition's range is a few records, whose task would cost more to start than to run.
PACK_OFFSETS = 100_000
PACK_SLICES = 32
SLICE_TRIES = 2  # a slice that fails is tried again once in its task (a broker's moment away)
# The driver's Swift requests of a batch (checks, manifests, prefixes), a partition a thread: each is a
# round trip of tens of milliseconds spent waiting, and a batch has hundreds of partitions.
THREADS = 8


@dataclass
class Outcome:
    """One range of the batch: archived (or found archived), or why not."""

    range: OffsetRange
    topic: TopicConfig
    archived: Archived | None = None
    error: str | None = None  # one line
    refused: bool = False  # a refusal (the range cannot be archived as asked), not a failure a retry may cure
    location: str = ""  # the range's folder in Swift

    @property
    def ok(self) -> bool:
        return self.archived is not None


@dataclass
class Batch:
    outcomes: list[Outcome]
    duration_s: float
    tasks: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]


def archive_batch(items: list[tuple[OffsetRange, TopicConfig]], kafka: KafkaClient, store: Store, spark: Any,
                  say: Callable[[str], None] = log.info,
                  typing_for: Callable[[TopicConfig], Any] = typed_columns.for_topic) -> Batch:
    """Archive every range of `items` (steps above); one outcome per item, in the items' order.

    `spark`: a session, or a function that makes one, called only if a range needs Spark tasks.
    Raises only what stops every range alike (Kafka or Swift unreachable before anything was
    written); a range's own failure is its outcome.
    """
    run = _Run(items, kafka, store, spark, say, typing_for)
    try:
        return run.run()
    finally:
        run.stores.close()


class _Run:
    """One `archive_batch`: its outcomes, and what Kafka said of their partitions once for all."""

    def __init__(self, items, kafka: KafkaClient, store: Store, spark: Any, say: Callable[[str], None],
                 typing_for: Callable[[TopicConfig], Any]):
        self.t0 = time.monotonic()
        self.kafka, self.store, self.spark, self.say, self.typing_for = kafka, store, spark, say, typing_for
        self.outcomes = [Outcome(r, t, location=_location(store, t, r)) for r, t in items]
        self.stores = _Stores(store.params)
        self.planned: list[tuple[Outcome, Planned]] = []
        self.slices: dict[int, list] = {}  # id(outcome) -> its slices' results
        self.written = 0
        self.readers: dict[str, int] = {}  # slice reader -> ranges it read: said once a batch, not once a range
        self.lock = threading.Lock()

    def run(self) -> Batch:
        with tracing.span("archive_batch", ranges=len(self.outcomes)):  # its phases' spans, if tracing is on
            return self._run()

    def _run(self) -> Batch:
        with tracing.span("checks", ranges=len(self.outcomes)):
            self.ask_kafka()
            self.stores.each(self.check, _by_partition(self.outcomes))
        self.planned.sort(key=lambda x: (x[1].range.topic, x[1].range.partition, x[1].range.start))
        jobs = [j for _, p in self.planned for j in p.jobs]
        tasks = pack(jobs)
        if jobs:
            self.say(f"{len(self.planned)} range(s) of {len({(p.range.topic, p.range.partition) for _, p in self.planned})} "
                     f"partition(s): {len(jobs)} slice(s) in {len(tasks)} Spark task(s)")
            with tracing.span("spark_job", ranges=len(self.planned), slices=len(jobs), tasks=len(tasks)):
                session = self.spark() if callable(self.spark) else self.spark
                self.kafka.release_clients()  # range_run._archive says why: the Spark job is the run's long wait
                results = iter(r for task in run_tasks(session, archive_slices, tasks,
                                                       f"archive {len(self.planned)} ranges") for r in task)
                self.slices = {id(o): [next(results) for _ in p.jobs] for o, p in self.planned}
            groups: dict[tuple[str, int], list] = {}
            for o, p in self.planned:
                groups.setdefault((p.range.topic, p.range.partition), []).append((o, p))
            with tracing.span("manifests", ranges=len(self.planned)):
                self.stores.each(self.write, list(groups.values()))
            for reader, n in sorted(self.readers.items()):
                self.say(f"{n} range(s): records read by the {reader} slice reader "
                         "(MATOS_NATIVE_READER=false turns the native one off)")
        with tracing.span("commits", ranges=sum(o.ok for o in self.outcomes)):
            notes = self.commit()
        elapsed = time.monotonic() - self.t0
        for o in self.outcomes:
            if o.ok:
                o.archived.duration_s = elapsed  # the batch's: each range was archived within it
        return Batch(self.outcomes, elapsed, len(tasks), notes)

    def ask_kafka(self) -> None:
        """Step 1: the topics' partitions, their offsets and the groups' committed offsets, once."""
        self.existing = many.topics(self.kafka)
        tps = {(o.range.topic, o.range.partition) for o in self.outcomes}
        self.known = {tp for tp in tps if tp[1] in self.existing.get(tp[0], ())}
        self.marks = many.watermarks(self.kafka, self.known)
        self.committed: dict[tuple[str, int], int | None] = {}
        for group in sorted({o.topic.group for o in self.outcomes}):
            self.committed.update(many.committed(self.kafka, group, [
                (o.range.topic, o.range.partition) for o in self.outcomes
                if o.topic.group == group and (o.range.topic, o.range.partition) in self.known]))
        self.typings: dict[str, Any] = {}
        for name, topic in {o.topic.name: o.topic for o in self.outcomes}.items():
            try:
                self.typings[name] = self.typing_for(topic)
            except Exception as e:  # noqa: BLE001 - the topic's ranges are not archived, the others go on
                for o in self.outcomes:
                    if o.topic.name == name:
                        o.error = _one_line(e)

    def check(self, group: list[Outcome], store: Store) -> None:
        """Step 2 for one partition's ranges, in offset order."""
        for o in group:
            r, topic, tp = o.range, o.topic, (o.range.topic, o.range.partition)
            if o.error is not None:
                continue
            if tp not in self.known:
                o.error, o.refused = _unknown(r, self.existing), True
                continue
            try:
                p = plan(r, topic, self.kafka, store, self.marks[tp], self.committed[tp], _prefix(store, topic),
                         self.typings[topic.name], self.say)
            except (RangeRefused, DataLoss) as e:
                o.error, o.refused = str(e), True
                continue
            except Exception as e:  # noqa: BLE001 - this range's, not the batch's: said, retried by a later run
                o.error = _one_line(e)
                continue
            if isinstance(p, Archived):
                o.archived = p
            else:
                with self.lock:
                    self.planned.append((o, p))

    def write(self, group: list[tuple[Outcome, Planned]], store: Store) -> None:
        """Step 4 for one partition's ranges, in offset order: a manifest for each range whose slices all wrote."""
        for o, p in group:
            slices = self.slices[id(o)]
            refused = [e["refused"] for s in slices if isinstance(s, list) for e in s if "refused" in e]
            failed = [s["failed"] for s in slices if isinstance(s, dict)]
            if refused or failed:
                o.error, o.refused = (refused or failed)[0], bool(refused)
                continue
            objects = [e for s in slices for e in s]
            with self.lock:
                for reader in {e["reader"] for e in objects if "reader" in e}:
                    self.readers[reader] = self.readers.get(reader, 0) + 1
            try:
                o.archived = write_manifest(p, objects, store, self.say, say_reader=False)
            except Exception as e:  # noqa: BLE001 - no manifest: the range is not archived, a later run writes it
                o.error = _one_line(e)
                continue
            with self.lock:
                self.written += 1
                n = self.written
            faults.at(f"batch-after-manifest-{n}")

    def commit(self) -> list[str]:
        """Steps 5 and 6: the committed offsets of the partitions with ranges archived, their tables."""
        done = [o for o in self.outcomes if o.ok]
        parts = sorted({(o.range.topic, o.range.partition): o.topic for o in done}.items())
        after = advance_many(self.kafka, self.store, [(_prefix(self.store, t), t, p, self.marks[(name, p)][0])
                                                      for (name, p), t in parts], each=self.stores.each)
        faults.at("batch-after-commit")
        notes: list[str] = []
        for o in done:
            o.archived.committed_after = after[(o.range.topic, o.range.partition)]
            notes += o.archived.notes
        for (name, p), t in parts:
            try:
                notes += keep_table(self.store, _prefix(self.store, t), t, p, self.say)
            except TableError as e:  # the ranges are archived and committed: only the table waits for a later run
                notes.append(str(e))
        return notes


class _Stores:
    """A Store per thread of a pool (a Store is one connection, not thread-safe), all closed at the end."""

    def __init__(self, params):
        self.params, self._local, self._made, self._lock = params, threading.local(), [], threading.Lock()

    def get(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.params)
            with self._lock:
                self._made.append(store)
        return store

    def each(self, fn: Callable[[Any, Store], Any], items: list) -> list:
        """`[fn(item, store) for item in items]`, from THREADS threads, each with its own Store."""
        if len(items) <= 1:
            return [fn(item, self.get()) for item in items]
        with ThreadPoolExecutor(min(THREADS, len(items)), thread_name_prefix="batch") as pool:
            return list(pool.map(lambda item: fn(item, self.get()), items))

    def close(self) -> None:
        for store in self._made:
            store.close()


def _by_partition(outcomes: list[Outcome]) -> list[list[Outcome]]:
    """The outcomes grouped by partition, each group in offset order."""
    groups: dict[tuple[str, int], list[Outcome]] = {}
    for o in sorted(outcomes, key=lambda o: (o.range.topic, o.range.partition, o.range.start)):
        groups.setdefault((o.range.topic, o.range.partition), []).append(o)
    return list(groups.values())


def pack(jobs: list[SliceJob], most_offsets: int = PACK_OFFSETS, most_slices: int = PACK_SLICES) -> list[list[SliceJob]]:
    """The slices as tasks, in order: consecutive slices share a task while together they hold at
    most `most_offsets` offsets and `most_slices` slices; a larger slice has a task of its own."""
    tasks: list[list[SliceJob]] = []
    size = 0
    for j in jobs:
        n = j.slice.end - j.slice.start
        if not tasks or size + n > most_offsets or len(tasks[-1]) >= most_slices:
            tasks.append([])
            size = 0
        tasks[-1].append(j)
        size += n
    return tasks


def archive_slices(jobs: list[SliceJob]) -> list[list[dict] | dict]:
    """A Spark task of several slices: each one's manifest entries, `[{"refused": why}]` for a slice
    no retry can archive (a record over max_record_bytes, a record that does not decode under
    decode_strict), or `{"failed": why}` for a slice that failed twice. Never raises for a slice: the other slices of the task, and the other
    ranges of the batch, go on; only its own range is not archived."""
    out: list[list[dict] | dict] = []
    for job in jobs:
        for attempt in range(1, SLICE_TRIES + 1):
            try:
                out.append(archive_slice(job))
                break
            except RecordTooLarge as e:  # no retry changes it: the topic's setting must
                out.append([{"refused": str(e)}])
                break
            except Exception as e:  # noqa: BLE001 - the slice's outcome; its range is retried by a later run
                if attempt == SLICE_TRIES:
                    out.append({"failed": f"slice {job.slice}: {_one_line(e)}"})
                else:
                    time.sleep(1.0)
    return out


def _prefix(store: Store, topic: TopicConfig) -> str:
    return layout.join(store.params.prefix, topic.prefix)


def _location(store: Store, topic: TopicConfig, r: OffsetRange) -> str:
    return f"{store.url}/{store.container}/{layout.range_dir(_prefix(store, topic), r)}/"


def _unknown(r: OffsetRange, existing: dict[str, list[int]]) -> str:
    if r.topic not in existing:
        return f"Kafka topic {r.topic!r} does not exist (deleted?); its archive stays as it is"
    return f"Kafka topic {r.topic!r} has no partition {r.partition}: it has partitions 0..{max(existing[r.topic])}"


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 500 else text[:497] + "..."
