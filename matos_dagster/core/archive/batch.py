"""Archiving many ranges in one run: the ranges a tick finds due, of many topics and partitions.

The protocol of each range is range_run.py's, unchanged: objects under deterministic names, the
manifest last, then the commit, forward only, to the end of the contiguous archived prefix. What
is shared is the cost around it, which for a quiet topic is most of a range's cost:

1. Kafka is asked once for the batch: the topics' partitions, every partition's log start and
   end offsets, each group's committed offsets (core/kafka/many.py);
2. each range is checked against those and the archive (`range_run.plan`); a refused range is
   an outcome of its own, the others go on. A partition's ranges are archived in offset order and
   stop at its first range not archived: the later ones are neither written nor committed (a
   manifest above a hole would be overlapped by the range the next run plans from the committed
   offset). Ranges of one partition that overlap each other are all refused: the archive's
   check of overlaps sees manifests already written, not the run's other ranges;
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
from dataclasses import dataclass, field
from typing import Any, Callable

from matos_dagster.core import faults, tracing
from matos_dagster.core.archive.commit import advance_many, prefix_end, restart
from matos_dagster.core.archive.range_run import Archived, DataLoss, Overlaps, Planned, RangeRefused, plan, write_manifest
from matos_dagster.core.archive.stores import Stores
from matos_dagster.core.archive.tasks import archive_slices, one_line, pack
from matos_dagster.core.erase import ledger
from matos_dagster.core.iceberg.hooks import keep_table
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.offsets.ranges import OffsetRange, overlaps
from matos_dagster.core.schemas import typed as typed_columns
from matos_dagster.core.spark.tasks import run_tasks
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.incarnations import Incarnation
from matos_dagster.core.swift.listed import ListedPartition
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

log = logging.getLogger(__name__)



@dataclass
class Outcome:
    """One range of the batch: archived (or found archived), or why not."""

    range: OffsetRange
    topic: TopicConfig
    archived: Archived | None = None
    error: str | None = None  # one line
    refused: bool = False  # a refusal (the range cannot be archived as asked), not a failure a retry may cure
    location: str = ""  # the range's folder in Swift
    # Refused because offsets of it are archived already: the first archived entry it overlaps,
    # `[start, end)` (range_run.Overlaps); the lag sensor plans the partition's next range from it.
    archived_over: tuple[int, int] | None = None

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
                  typing_for: Callable[[TopicConfig], Any] = typed_columns.for_topic,
                  topic_ids: dict[str, str] | None = None, earlier: set[str] = frozenset()) -> Batch:
    """Archive every range of `items` (steps above); one outcome per item, in the items' order.

    `topic_ids`: per topic, the Kafka topic id its ranges were requested for (the lag sensor's): a
    topic whose id is another now was deleted and created again since, and its ranges are refused.
    `earlier`: topics whose archive the requester knows to hold an earlier log (it saw another id, or
    the topic missing): a log of an id the archive has not recorded is then a new incarnation, never
    adopted as the first (`incarnations.observe`).

    `spark`: a session, or a function that makes one, called only if a range needs Spark tasks.
    Raises only what stops every range alike (Kafka or Swift unreachable before anything was
    written); a range's own failure is its outcome.
    """
    run = _Run(items, kafka, store, spark, say, typing_for, topic_ids or {}, earlier)
    try:
        return run.run()
    finally:
        run.stores.close()


class _Run:
    """One `archive_batch`: its outcomes, and what Kafka said of their partitions once for all."""

    def __init__(self, items, kafka: KafkaClient, store: Store, spark: Any, say: Callable[[str], None],
                 typing_for: Callable[[TopicConfig], Any], topic_ids: dict[str, str], earlier: set[str]):
        self.t0 = time.monotonic()
        self.kafka, self.store, self.spark, self.say, self.typing_for = kafka, store, spark, say, typing_for
        self.expected_ids, self.earlier = topic_ids, earlier
        self.incarnations: dict[str, Incarnation] = {}  # per topic: the log its ranges are archived as
        self.notes: list[str] = []  # a topic created again, said once
        self.outcomes = [Outcome(r, t, location=_location(store, t, r)) for r, t in items]
        self.stores = Stores(store.params)
        self.planned: list[tuple[Outcome, Planned]] = []
        self.slices: dict[int, list] = {}  # id(outcome) -> its slices' results
        self.written = 0
        self.readers: dict[str, int] = {}  # slice reader -> ranges it read: said once a batch, not once a range
        self.ledgers: dict[tuple[str, str], dict] = {}  # (prefix, topic) -> its erasure ledger, read once (incarnation)
        self.listed: dict[tuple[str, int], ListedPartition] = {}  # per partition: its archive, listed once
        self.lock = threading.Lock()

    def run(self) -> Batch:
        with tracing.span("archive_batch", ranges=len(self.outcomes)):  # its phases' spans, if tracing is on
            return self._run()

    def _run(self) -> Batch:
        with tracing.span("checks", ranges=len(self.outcomes)):
            self.ask_kafka()
            self.stores.each(self.incarnation, sorted({o.topic.name: o.topic for o in self.outcomes}.items()))
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
        self.ids = many.topic_ids(self.kafka, {tp[0] for tp in self.known})
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
                        o.error = one_line(e)

    def incarnation(self, item: tuple[str, TopicConfig], store: Store) -> None:
        """Step 1b for one topic: which of its logs its ranges are archived as (core/swift/incarnations.py)."""
        name, topic = item
        mine = [o for o in self.outcomes if o.topic.name == name and o.error is None]
        if not mine or name not in self.existing:
            return  # refused in `check` as an unknown topic
        tid, expected = self.ids.get(name), self.expected_ids.get(name)
        if expected is not None and tid != expected:
            for o in mine:
                o.error, o.refused = (
                    f"topic {name!r} was deleted and created again since this range was requested (topic id "
                    f"{expected} then, {tid or 'none'} now): not archived, as its offsets would be the new log's; "
                    "the lag sensor requests the new log's ranges, from its offset 0"), True
            return
        tps = [tp for tp in self.known if tp[0] == name]
        # An archive evidently of an earlier log (a committed offset past the log end) is never adopted.
        earlier = name in self.earlier or any((self.committed[tp] or 0) > self.marks[tp][1] for tp in tps)
        try:
            inc, line = incarnations.observe(store, _prefix(store, topic), name, tid, int(time.time() * 1000),
                                             earlier=earlier)
            if line is not None:  # recorded by this run: a committed offset of the earlier log is stale
                fresh = restart(self.kafka, topic.group, {tp: self.committed[tp] for tp in tps},
                                {tp: self.marks[tp][0] for tp in tps})
            # Its erasure ledger, once for all its ranges: read within their partitions' turn, so an erasure
            # entering it later waits for this run, then rewrites what it wrote (core/erase/run.py).
            doc = ledger.read(store, _prefix(store, topic, inc), name)
        except Exception as e:  # noqa: BLE001 - this topic's ranges are not archived; the others go on
            for o in mine:
                o.error = one_line(e)
            return
        with self.lock:
            self.incarnations[name] = inc
            self.ledgers[(_prefix(store, topic, inc), name)] = doc
            if line is not None:
                self.committed.update(fresh)
                self.notes.append(line)
            for o in mine:
                o.location = _location(store, topic, o.range, inc)

    def check(self, group: list[Outcome], store: Store) -> None:
        """Step 2 for one partition's ranges, in offset order, up to the first not archived."""
        clash = overlaps(o.range for o in group)
        if clash:  # the job refuses these before its run begins; a direct caller is refused here
            a, b = clash[0]
            for o in group:
                o.error, o.refused = (f"ranges {a} and {b} of this run overlap: every offset must be in exactly "
                                      "one manifest. Give each offset of the partition to one range"), True
            return
        listed = None  # the partition's archive from its first range on: two listings for all its ranges
        first: Outcome | None = None  # the partition's first range not archived
        for o in group:
            if first is not None:
                _stopped(o, first)
                continue
            first = o  # until it is found archived or planned
            r, topic, tp = o.range, o.topic, (o.range.topic, o.range.partition)
            if o.error is not None:
                continue
            if tp not in self.known:
                o.error, o.refused = _unknown(r, self.existing), True
                continue
            inc = self.incarnations[r.topic]
            if inc.topic_id is None and self.ids.get(r.topic) is None and (self.committed[tp] or 0) > self.marks[tp][1]:
                o.error, o.refused = _no_id(r, self.committed[tp], self.marks[tp][1], topic.group), True
                continue
            try:
                if listed is None:
                    listed = ListedPartition(store, _prefix(store, topic, inc), r.topic, r.partition, r.start)
                    with self.lock:
                        self.listed[tp] = listed
                p = plan(r, topic, self.kafka, store, self.marks[tp], self.committed[tp], _prefix(store, topic, inc),
                         self.typings[topic.name], self.say, inc,
                         lambda s, *at: self.ledgers.get(at) or ledger.read(s, *at), listed)
            except (RangeRefused, DataLoss) as e:
                o.error, o.refused = str(e), True
                if isinstance(e, Overlaps):
                    o.archived_over = e.span
                continue
            except Exception as e:  # noqa: BLE001 - this range's, not the batch's: said, retried by a later run
                o.error = one_line(e)
                continue
            first = None
            if isinstance(p, Archived):
                o.archived = p
            else:
                with self.lock:
                    self.planned.append((o, p))

    def write(self, group: list[tuple[Outcome, Planned]], store: Store) -> None:
        """Step 4 for one partition's ranges, in offset order: a manifest for each range whose slices all
        wrote, up to the first that has none (the objects of the later ones wait, unlisted, for a
        later run of their range, which writes the same names)."""
        first: Outcome | None = None
        for o, p in group:
            if first is not None:
                _stopped(o, first)
                continue
            first = o  # until its manifest is written
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
            listed = self.listed[(o.range.topic, o.range.partition)]
            try:
                o.archived = write_manifest(p, objects, store, self.say, say_reader=False, listed=listed.names(o.range))
            except Exception as e:  # noqa: BLE001 - no manifest: the range is not archived, a later run writes it
                o.error = one_line(e)
                continue
            listed.add(o.range)
            first = None
            with self.lock:
                self.written += 1
                n = self.written
            faults.at(f"batch-after-manifest-{n}")

    def commit(self) -> list[str]:
        """Steps 5 and 6: the committed offsets of the partitions with ranges archived, their tables."""
        done = [o for o in self.outcomes if o.ok]
        parts = sorted({(o.range.topic, o.range.partition): o.topic for o in done}.items())
        incs = self.incarnations
        after = advance_many(self.kafka, self.store, [(_prefix(self.store, t, incs[name]), t, p, self.marks[(name, p)][0])
                                                      for (name, p), t in parts], each=self.stores.each,
                             known=self.prefix_ends([tp for tp, _ in parts]))
        faults.at("batch-after-commit")
        notes: list[str] = list(self.notes)
        for o in done:
            o.archived.committed_after = after[(o.range.topic, o.range.partition)]
            notes += o.archived.notes
        for (name, p), t in parts:
            try:
                notes += keep_table(self.store, _prefix(self.store, t, incs[name]), t, p, self.say, incs[name].number)
            except TableError as e:  # the ranges are archived and committed: only the table waits for a later run
                notes.append(str(e))
        return notes


    def prefix_ends(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """Per partition, from the committed offset the run read (or the log start), where its contiguous
        archived prefix ends, as its listing and the manifests written since say: `advance_many`
        lists Swift only for a partition whose committed offset is another by then, or below the listing."""
        out = {}
        for tp in tps:
            listed = self.listed.get(tp)
            base = self.committed.get(tp)
            base = self.marks[tp][0] if base is None else base
            if listed is not None and base >= listed.start:
                out[tp] = (base, prefix_end(listed, base))
        return out


def _stopped(o: Outcome, first: Outcome) -> None:
    """`o` is not archived because `first`, before it in its partition, was not."""
    o.error = (f"not archived: {first.range} before it in this run was not ({first.error}); a partition's "
               "ranges are archived in offset order, so a later run archives this one")
    o.refused = False


def _by_partition(outcomes: list[Outcome]) -> list[list[Outcome]]:
    """The outcomes grouped by partition, each group in offset order."""
    groups: dict[tuple[str, int], list[Outcome]] = {}
    for o in sorted(outcomes, key=lambda o: (o.range.topic, o.range.partition, o.range.start)):
        groups.setdefault((o.range.topic, o.range.partition), []).append(o)
    return list(groups.values())


def _prefix(store: Store, topic: TopicConfig, incarnation: Incarnation | None = None) -> str:
    """The topic's prefix; with `incarnation`, that incarnation's (the first's is the topic's)."""
    prefix = layout.join(store.params.prefix, topic.prefix)
    return incarnation.prefix(prefix) if incarnation is not None else prefix


def _location(store: Store, topic: TopicConfig, r: OffsetRange, incarnation: Incarnation | None = None) -> str:
    return f"{store.url}/{store.container}/{layout.range_dir(_prefix(store, topic, incarnation), r)}/"


def _no_id(r: OffsetRange, committed: int, high: int, group: str) -> str:
    return (f"{r.topic}/{r.partition}: the committed offset {committed} of group {group} is past the log end "
            f"{high}, and Kafka gives no topic id to tell whether the topic was deleted and created again: "
            "not archived, rather than guess. If it was created again, archive its new log under another "
            "prefix (the topic's `prefix`) or move the group's offset to the log start; brokers of Kafka 2.8 "
            "or later give topic ids, and the archive then tells the two logs apart itself")


def _unknown(r: OffsetRange, existing: dict[str, list[int]]) -> str:
    if r.topic not in existing:
        return f"Kafka topic {r.topic!r} does not exist (deleted?); its archive stays as it is"
    return f"Kafka topic {r.topic!r} has no partition {r.partition}: it has partitions 0..{max(existing[r.topic])}"
