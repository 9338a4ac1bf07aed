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
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from matos_dagster.core import faults
from matos_dagster.core.archive.commit import advance_many
from matos_dagster.core.archive.range_run import Archived, DataLoss, Planned, RangeRefused, plan, write_manifest
from matos_dagster.core.archive.slice_task import RecordTooLarge, SliceJob, archive_slice
from matos_dagster.core.iceberg.hooks import keep_table
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
    t0 = time.monotonic()
    outcomes = [Outcome(r, t, location=_location(store, t, r)) for r, t in items]
    existing = many.topics(kafka)
    tps = {(r.topic, r.partition) for r, _ in items}
    known = {tp for tp in tps if tp[1] in existing.get(tp[0], ())}
    marks = many.watermarks(kafka, known)
    committed: dict[tuple[str, int], int | None] = {}
    for group in sorted({t.group for _, t in items}):
        committed.update(many.committed(kafka, group, [tp for r, t in items if t.group == group
                                                         for tp in [(r.topic, r.partition)] if tp in known]))
    typings: dict[str, Any] = {}
    planned: list[tuple[Outcome, Planned]] = []
    for o in sorted(outcomes, key=lambda o: (o.range.topic, o.range.partition, o.range.start)):
        r, topic = o.range, o.topic
        if (r.topic, r.partition) not in known:
            o.error, o.refused = _unknown(r, existing), True
            continue
        try:
            if topic.name not in typings:
                typings[topic.name] = typing_for(topic)
            p = plan(r, topic, kafka, store, marks[(r.topic, r.partition)], committed[(r.topic, r.partition)],
                     _prefix(store, topic), typings[topic.name], say)
        except (RangeRefused, DataLoss) as e:
            o.error, o.refused = str(e), True
            continue
        except Exception as e:  # noqa: BLE001 - this range's, not the batch's: said, retried by a later run
            o.error = _one_line(e)
            continue
        if isinstance(p, Archived):
            o.archived = p
        else:
            planned.append((o, p))

    jobs = [j for _, p in planned for j in p.jobs]
    tasks = pack(jobs)
    if jobs:
        say(f"{len(planned)} range(s) of {len({(p.range.topic, p.range.partition) for _, p in planned})} "
            f"partition(s): {len(jobs)} slice(s) in {len(tasks)} Spark task(s)")
        session = spark() if callable(spark) else spark
        kafka.release_clients()  # range_run._archive says why: the Spark job is the run's long wait
        results = iter(r for task in run_tasks(session, archive_slices, tasks, f"archive {len(planned)} ranges")
                       for r in task)
        written = 0
        for o, p in planned:
            slices = [next(results) for _ in p.jobs]
            refused = [e["refused"] for s in slices if isinstance(s, list) for e in s if "refused" in e]
            failed = [s["failed"] for s in slices if isinstance(s, dict)]
            if refused or failed:
                o.error, o.refused = (refused or failed)[0], bool(refused)
                continue
            try:
                o.archived = write_manifest(p, [e for s in slices for e in s], store, say)
            except Exception as e:  # noqa: BLE001 - no manifest: the range is not archived, a later run writes it
                o.error = _one_line(e)
                continue
            written += 1
            faults.at(f"batch-after-manifest-{written}")

    lows = {tp: marks[tp][0] for tp in known}
    done = [o for o in outcomes if o.ok]
    parts = sorted({(o.range.topic, o.range.partition): o.topic for o in done}.items())
    after = advance_many(kafka, store, [(_prefix(store, t), t, p, lows[(name, p)]) for (name, p), t in parts])
    faults.at("batch-after-commit")
    for o in done:
        o.archived.committed_after = after[(o.range.topic, o.range.partition)]
    notes: list[str] = []
    for (name, p), t in parts:
        for o in [o for o in done if (o.range.topic, o.range.partition) == (name, p)]:
            notes += o.archived.notes
        notes += keep_table(store, _prefix(store, t), t, p, say)
    return Batch(outcomes, time.monotonic() - t0, len(tasks), notes)


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
