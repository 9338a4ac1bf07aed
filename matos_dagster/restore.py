"""Restoring archived records into a Kafka topic, exactly once, by Spark tasks.

The driver reads listings and manifests only; it plans one *unit* per archived range (the
part of it the selection wants) and runs the units as Spark tasks. Each task fetches its
range's objects from Swift itself and produces the records with its own idempotent,
transactional producer, keeping key, value, headers and timestamp (as CreateTime).

The progress marker. Each restore has a consumer group, `matos-restore-<target>` unless
named otherwise. Its committed offset for a SOURCE topic-partition is the next source
offset still to restore: every record below it is in the target. Records and marker move
together, in one Kafka transaction per archived object:

    begin_transaction
    produce the object's selected records
    send_offsets_to_transaction({source TP: next offset after the object}, group)
    commit_transaction

so a transaction is either committed with its marker or invisible (aborted) to
`read_committed` readers. A task first calls `init_transactions` with a transactional id
fixed by the restore and the source partition, which fences any earlier attempt (a crashed
run, a Spark retry, a zombie executor) and aborts its open transaction; only then does it
read the marker and skip what it covers. Kafka keeps the marker, so an interrupted restore
run again resumes where its last committed transaction ended: nothing lost, nothing twice.

Ranges of one source partition are restored in offset order (in *waves*: the i-th unit of
every partition runs in the i-th Spark job), so the marker only moves forward and records
keep their order in the target partition. Kafka accepts committed offsets only for
topic-partitions that exist, so the source topic must exist with the partitions restored
(it may be empty, or be the target itself). The marker belongs to the restore: restoring
the same offsets into the same target again needs another group (or the group deleted).

The target. Before anything is produced, the target's settings are checked against what the
selected records need, from the manifests alone (`demands`, `target_problems`): timestamp
windows, `max.message.bytes`, and time retention (which goes by the records' old timestamps).
A target the restore creates gets the source's settings that decide those, CreateTime and no
time retention; if even those would refuse, nothing is created. Anything refused is named with
the setting to change (RestoreRefused); a record Kafka still refuses as it is produced aborts its
transaction and fails the run naming the setting (RestoreFailed), the marker before it.

No Dagster imports: the `restore` job is a thin shell around `restore`.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from matos_dagster import reader, spans
from matos_dagster.leaders import leaderless
from matos_dagster.librdkafka_log import LIBRDKAFKA_LOG
from matos_dagster.ranges import OffsetRange, parse_key
from matos_dagster.reader import Window
from matos_dagster.spark_tasks import run_tasks, task_error
from matos_dagster.store import Store, SwiftParams

log = logging.getLogger(__name__)


class RestoreRefused(ValueError):
    """The restore cannot run as asked; nothing was produced."""


class RestoreFailed(RuntimeError):
    """Kafka did not take an object's records; its transaction was aborted, the marker not moved."""


class Kafka(Protocol):  # what restoring asks of the Kafka resource
    timeout_s: int

    def client_config(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Request:
    """What to restore where. Offsets are half-open; times are Kafka milliseconds."""

    topic: str
    prefix: str  # in front of `topic=<topic>/`: MATOS_SWIFT_PREFIX joined with the topic's prefix
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

    @property
    def target_topic(self) -> str:
        return self.target or self.topic

    @property
    def marker_group(self) -> str:
        return self.group or f"matos-restore-{self.target_topic}"

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

    @property
    def partition(self) -> int:
        return self.source.partition

    def __str__(self) -> str:
        return f"{self.source.topic}/{self.partition}[{self.lo}, {self.hi})"


@dataclass
class Report:
    topic: str
    target: str
    group: str
    dry_run: bool
    units: list[dict] = field(default_factory=list)  # one result per unit, in wave order
    created_target: int | None = None  # partitions of the target topic created (or to be)
    target_config: dict[str, str] = field(default_factory=dict)  # settings given to a created target
    notes: list[str] = field(default_factory=list)  # what the operator should know (kept timestamps, ...)
    duration_s: float = 0.0

    @property
    def records(self) -> int:
        return sum(u["records"] for u in self.units)

    @property
    def skipped(self) -> int:
        return sum(1 for u in self.units if u["skipped"])

    def records_by_partition(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for u in self.units:
            out[u["partition"]] = out.get(u["partition"], 0) + u["records"]
        return out


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


def restore(
    req: Request,
    kafka: Kafka,
    store: Store,
    spark: Any,
    say: Callable[[str], None] = log.info,
    fault: Fault | None = None,
) -> Report:
    t0 = time.monotonic()
    conf = kafka.client_config()
    report = Report(req.topic, req.target_topic, req.marker_group, req.dry_run)
    units = plan(req, store, conf, kafka.timeout_s, fault, say)
    mode = "dry run: " if req.dry_run else ""
    if not units:
        say(f"{mode}no archived record of {req.topic} matches the selection (under {req.prefix!r}/topic={req.topic}/)")
        report.duration_s = time.monotonic() - t0
        return report
    sources = sorted({u.partition for u in units})
    needs = demands(units)
    report.created_target, report.target_config, report.notes = _prepare_target(
        req, conf, kafka.timeout_s, sources, needs, say)
    # librdkafka refuses, before sending, a record above its message.max.bytes (1,000,000 by
    # default): the producer must take the largest record the archive took.
    largest = needs.largest_record_bytes if needs.unsized_objects == 0 else max(
        needs.largest_record_bytes or 0, req.max_record_bytes)
    producer_conf = {"message.max.bytes": min(LIBRDKAFKA_MAX_MESSAGE_BYTES,
                                              max(1_000_000, (largest or 0) + PRODUCER_FRAMING))}
    units = [dataclasses.replace(u, producer_conf=producer_conf) for u in units]
    # read_uncommitted: a transaction left open by a crashed run must not keep this waiting;
    # the tasks fence it before they read the marker they act on.
    admin_consumer = Consumer({**conf, "group.id": req.marker_group, "enable.auto.commit": False,
                               "isolation.level": "read_uncommitted", "logger": LIBRDKAFKA_LOG})
    try:
        markers = _committed(admin_consumer, req.topic, sources, kafka.timeout_s)
    finally:
        admin_consumer.close()
    say(
        f"{mode}restoring {len(units)} range(s) of {req.topic} partitions {sources} into {req.target_topic} "
        f"({'same partitions' if req.keep_partition else 'partitioned by key'}); progress marker: group "
        f"{req.marker_group}, committed {_show(markers)}"
    )
    plan_waves = waves(units)
    done = 0
    for i, wave in enumerate(plan_waves, 1):
        try:
            results = run_tasks(spark, restore_unit, wave,
                                f"restore {req.topic} -> {req.target_topic}: wave {i}/{len(plan_waves)}")
        except Exception as e:
            failed = task_error(e, RestoreFailed)
            if failed is None:
                raise
            raise RestoreFailed(f"{failed} ({report.records} record(s) restored before, in earlier waves)") from None
        for res in results:
            done += 1
            report.units.append(res)
            say(f"{mode}[{done}/{len(units)}] {_describe(res, req.dry_run)}")
        say(f"{mode}wave {i}/{len(plan_waves)} done: {report.records} record(s) so far")
    report.duration_s = time.monotonic() - t0
    verb = "would restore" if req.dry_run else "restored"
    say(
        f"{mode}{verb} {report.records} record(s) from {len(units)} range(s) ({report.skipped} already restored) "
        f"of {req.topic} into {req.target_topic} in {report.duration_s:.1f}s"
    )
    return report


# -- the Spark task ----------------------------------------------------------------------


def restore_unit(unit: Unit) -> dict:
    """Runs on an executor: restore (or, in a dry run, count) the unit's records; see the module doc."""
    result = {
        "range": str(unit.source), "partition": unit.partition, "start": unit.lo, "end": unit.hi,
        "records": 0, "transactions": 0, "objects": 0, "skipped": False, "resumed_from": None, "marker": None,
    }
    # A dry run fences nothing, so it must not wait for a transaction a crashed run left open
    # (read_committed asks the broker for stable offsets only).
    isolation = "read_uncommitted" if unit.dry_run else "read_committed"
    consumer = Consumer({**unit.kafka_conf, "group.id": unit.group, "enable.auto.commit": False,
                         "isolation.level": isolation})
    producer = None
    store = None
    try:
        if not unit.dry_run:
            producer = Producer({
                **unit.kafka_conf,
                **unit.producer_conf,
                "transactional.id": unit.transactional_id,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                # Java's default partitioner, so keys land where a Java producer puts them.
                "partitioner": "murmur2_random",
                # A crashed run's open transaction holds back read_committed readers of the target
                # partition until this passes (or a rerun fences it): short, yet room for one object.
                "transaction.timeout.ms": 120_000,
            })
            # Fences earlier attempts of this source partition and aborts their open transaction,
            # so the marker read next is the last committed one.
            producer.init_transactions(unit.timeout_s * 3)
        marker = _committed(consumer, unit.source.topic, [unit.partition], unit.timeout_s)[unit.partition]
        result["marker"] = marker
        lo = unit.lo if marker is None else max(unit.lo, marker)
        if lo >= unit.hi:
            result["skipped"] = True
            return result
        if lo > unit.lo:
            result["resumed_from"] = lo
        objects = [o for o in unit.objects if o["last_offset"] >= lo]
        time_window = unit.window.since_ms is not None or unit.window.until_ms is not None
        for i, o in enumerate(objects):
            # The marker after this object: past its last offset, or the unit's end for the last.
            after = unit.hi if i == len(objects) - 1 else min(unit.hi, o["last_offset"] + 1)
            if unit.dry_run and not time_window and o["first_offset"] >= lo and o["last_offset"] < unit.hi:
                result["records"] += o["records"]  # the manifest's count is exact here
                result["objects"] += 1
                continue
            if store is None:
                store = Store(unit.swift)
            table = reader.filter_rows(reader.read_object(store, o["name"], unit.format), unit.window, lo, unit.hi)
            result["objects"] += 1
            if unit.dry_run or table.num_rows == 0:
                result["records"] += table.num_rows
                continue
            producer.begin_transaction()
            _produce(producer, unit, table, o["name"])
            producer.send_offsets_to_transaction(
                [TopicPartition(unit.source.topic, unit.partition, after)],
                consumer.consumer_group_metadata(),
                unit.timeout_s,
            )
            result["transactions"] += 1
            _maybe_fail(unit, result["transactions"])
            producer.commit_transaction(unit.timeout_s * 4)
            result["records"] += table.num_rows
            result["marker"] = after
        return result
    except Exception:
        if producer is not None:
            try:  # a crash (kill) gets no abort: the next init_transactions does it instead
                producer.abort_transaction(unit.timeout_s)
            except Exception:
                pass
        raise
    finally:
        consumer.close()
        if store is not None:
            store.close()


def _produce(producer: Producer, unit: Unit, table: pa.Table, name: str = "") -> None:
    """Produce the rows and wait for every delivery report; any failure raises RestoreFailed."""
    keys = table["key"].to_pylist()
    values = table["value"].to_pylist()
    headers = table["headers"].to_pylist()
    stamps = pc.cast(table["timestamp"], pa.int64()).to_pylist()
    failures: list[KafkaError] = []

    def delivered(err, msg):
        if err is not None:
            failures.append(err)

    for key, value, hs, ts in zip(keys, values, headers, stamps):
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if hs:
            kwargs["headers"] = [(h["key"], h["value"]) for h in hs]
        if ts is not None:  # else Kafka stamps it now: the archive knows no time for it
            kwargs["timestamp"] = ts
        if unit.keep_partition:
            kwargs["partition"] = unit.partition
        while True:
            try:
                producer.produce(unit.target, **kwargs)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(unit.timeout_s * 4)
    if failures or left:
        raise RestoreFailed(_delivery_failure(unit, name, failures, left))


def _delivery_failure(unit: Unit, name: str, failures: list[KafkaError], left: int) -> str:
    what = f"{len(failures) + left} record(s) of {unit} (object {name}) were not delivered to topic {unit.target}"
    undo = "; their transaction is aborted and the progress marker stays before them: fix the cause and run the " \
           "restore again to go on from there"
    if not failures:
        return f"{what}: {left} still unacknowledged after {unit.timeout_s * 4:.0f}s{undo}"
    err = failures[0]
    fix = ""
    if err.code() in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE):
        fix = (f" A record is larger than topic {unit.target}'s max.message.bytes (or the producer's "
               f"message.max.bytes, {unit.producer_conf.get('message.max.bytes')}): raise max.message.bytes on {unit.target}.")
    elif err.code() == KafkaError.INVALID_TIMESTAMP:
        fix = (f" Topic {unit.target} refuses the records' timestamps: raise its message.timestamp.before.max.ms "
               f"/ message.timestamp.after.max.ms.")
    return f"{what}: Kafka says {err.name()}: {err.str()}.{fix}{undo}"


def _maybe_fail(unit: Unit, transactions: int) -> None:
    f = unit.fault
    if f is None or f.partition != unit.partition or f.start != unit.lo or f.after != transactions:
        return
    if f.how == "exit":
        os._exit(17)
    raise RuntimeError(f"fault drill: {unit} failed before committing transaction {transactions}")


# -- the driver's checks -----------------------------------------------------------------


# A record's framing in a batch of one: the batch header (61 bytes) and the record's varints.
# Many headers add a few bytes each beyond this: Kafka then refuses the object, which stops
# the restore with RestoreFailed naming max.message.bytes.
RECORD_FRAMING = 128
PRODUCER_FRAMING = 64 * 1024  # the producer's own limit is a guard only: generous
LIBRDKAFKA_MAX_MESSAGE_BYTES = 1_000_000_000
NO_LIMIT = 2**63 - 1  # Java's Long.MAX_VALUE, Kafka's "no limit" for the timestamp windows
# Topic settings copied from the source to a target the restore creates, because they decide
# whether the target takes the records as they were: the timestamp windows (records keep
# their archived timestamps, which may be far in the past or future), the largest batch, and
# whether the topic is compacted. `difference.max.ms` exists on brokers before Kafka 4.
COPIED_SETTINGS = (
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms",
    "max.message.bytes",
    "cleanup.policy",
)
# Set on a created target whatever the source has: CreateTime, else the broker would stamp
# each record with the time of the restore; and no time retention, because Kafka's retention
# goes by the records' timestamps, so with the source's (or the broker's) retention.ms every
# restored record older than it would be deleted at the next retention check.
CREATED_SETTINGS = {"message.timestamp.type": "CreateTime", "retention.ms": "-1"}
# What a topic without its own value gets: the broker's setting of this name.
BROKER_SETTINGS = {
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "max.message.bytes": "message.max.bytes",
    "cleanup.policy": "log.cleanup.policy",
}


@dataclass(frozen=True)
class Demands:
    """What the selected records ask of a target topic, from their manifests (no object read)."""

    min_timestamp: int | None = None  # of the records that have one; the others get the restore's time
    max_timestamp: int | None = None
    largest_record_bytes: int | None = None  # key, value, header keys and values of the largest record
    unsized_objects: int = 0  # objects of manifests written before largest_record_bytes


def demands(units: Iterable[Unit]) -> Demands:
    lo: list[int] = []
    hi: list[int] = []
    largest = []
    unsized = 0
    for u in units:
        since, until = u.window.since_ms, u.window.until_ms
        for o in u.objects:
            if o["min_timestamp"] is not None:
                lo.append(o["min_timestamp"] if since is None else max(o["min_timestamp"], since))
                hi.append(o["max_timestamp"] if until is None else min(o["max_timestamp"], until - 1))
            if o.get("largest_record_bytes") is None:
                unsized += 1
            else:
                largest.append(o["largest_record_bytes"])
    return Demands(min(lo, default=None), max(hi, default=None), max(largest, default=None), unsized)


def target_problems(topic: str, config: dict[str, str | None], needs: Demands, now_ms: int) -> list[str]:
    """Why `topic` with these settings would refuse (or soon delete) the records; empty if it takes them.

    Pure: `config` is the topic's effective settings, `now_ms` the broker's clock as the driver
    sees it. Each reason names the setting and a value that would do.
    """
    out = []
    create_time = (config.get("message.timestamp.type") or "CreateTime") == "CreateTime"
    lo, hi = needs.min_timestamp, needs.max_timestamp
    if create_time and lo is not None:
        before = _int(config.get("message.timestamp.before.max.ms"))
        after = _int(config.get("message.timestamp.after.max.ms"))
        diff = _int(config.get("message.timestamp.difference.max.ms"))
        if before is not None and now_ms - lo > before:
            out.append(
                f"message.timestamp.before.max.ms is {before}, and the oldest record to restore is stamped "
                f"{_iso(lo)}: set it to more than {now_ms - lo} (or {NO_LIMIT}: no limit)")
        if after is not None and hi - now_ms > after:
            out.append(
                f"message.timestamp.after.max.ms is {after}, and the newest record to restore is stamped "
                f"{_iso(hi)}: set it to more than {hi - now_ms} (or {NO_LIMIT}: no limit)")
        if diff is not None and max(now_ms - lo, hi - now_ms) > diff:
            out.append(
                f"message.timestamp.difference.max.ms is {diff}, and the records to restore are stamped from "
                f"{_iso(lo)} to {_iso(hi)}: set it to more than {max(now_ms - lo, hi - now_ms)} (or {NO_LIMIT})")
    largest = needs.largest_record_bytes
    limit = _int(config.get("max.message.bytes"))
    if largest is not None and limit is not None and largest + RECORD_FRAMING > limit:
        out.append(
            f"max.message.bytes is {limit}, and the largest record to restore has {largest} bytes (plus "
            f"{RECORD_FRAMING} of framing): set it to at least {largest + RECORD_FRAMING}")
    retention = _int(config.get("retention.ms"))
    deletes = "delete" in (config.get("cleanup.policy") or "delete")
    if deletes and retention is not None and retention >= 0 and lo is not None and now_ms - lo > retention:
        out.append(
            f"retention.ms is {retention}, and Kafka's retention goes by the records' timestamps: the restored "
            f"records stamped before {_iso(now_ms - retention)} (the oldest is {_iso(lo)}) would be deleted at "
            f"its next retention check: set it to more than {now_ms - lo} (or -1) for the time you need them")
    return out


def _prepare_target(
    req: Request, conf: dict, timeout_s: float, sources: list[int], needs: Demands, say
) -> tuple[int | None, dict[str, str], list[str]]:
    """Make sure the target takes the records as they were and the marker can be committed,
    creating the target if it does not exist. Checks everything before changing anything.

    Returns (partitions of a target created or to be, in a dry run; its settings; notes).
    """
    admin = AdminClient({**conf, "logger": LIBRDKAFKA_LOG})
    need = max(sources) + 1
    target = req.target_topic
    target_parts = _partitions(admin, target, timeout_s)
    if target_parts is not None and req.keep_partition and need > len(target_parts):
        raise RestoreRefused(
            f"target topic {target} has {len(target_parts)} partition(s); keeping source partitions "
            f"needs at least {need}. Add partitions to it, or set keep_partition: false to partition by key."
        )
    if req.topic == target:
        source_parts = list(range(need)) if target_parts is None else target_parts  # None: would be created
    else:
        source_parts = _partitions(admin, req.topic, timeout_s) or []
    missing = [p for p in sources if p not in source_parts]
    if missing:
        raise RestoreRefused(
            f"the restore's progress marker is committed on the source topic-partitions ({req.topic} "
            f"partitions {missing}), and Kafka keeps committed offsets only for topic-partitions that exist. "
            f"Create topic {req.topic} with at least {need} partition(s) (it may stay empty), or restore into "
            f"{req.topic} itself."
        )
    now_ms = int(time.time() * 1000)
    notes: list[str] = []
    if needs.min_timestamp == 0:
        notes.append("some records are stamped 0 (1970-01-01T00:00:00.000): librdkafka, which the restore produces "
                     "with, reads timestamp 0 as 'now', so they get the time of the restore")
    if target_parts is not None:
        config = _topic_config(admin, target, timeout_s)
        problems = target_problems(target, config, needs, now_ms)
        if problems:
            raise RestoreRefused(
                f"target topic {target} would not keep the records as archived; nothing was produced. Change its "
                f"settings (kafka-configs --alter --entity-type topics --entity-name {target} --add-config ...), "
                f"or restore into a new topic, which the restore creates with the settings it needs:\n- "
                + "\n- ".join(problems))
        if config.get("message.timestamp.type") == "LogAppendTime":
            notes.append(f"target topic {target} has message.timestamp.type=LogAppendTime: Kafka stamps each "
                         "restored record with the time it is written, not its archived timestamp")
        if needs.unsized_objects:
            notes.append(f"{needs.unsized_objects} object(s) come from manifests without largest_record_bytes "
                         f"(written by an older version): Kafka checks their record sizes as they are produced")
        for n in notes:
            say(n)
        return None, {}, notes
    for n in notes:
        say(n)
    settings = dict(CREATED_SETTINGS)
    copied_from = "the broker's defaults"
    if req.topic != target:
        source_config = _topic_config(admin, req.topic, timeout_s)
        settings.update({k: v for k in COPIED_SETTINGS if (v := source_config.get(k)) is not None})
        copied_from = f"topic {req.topic}"
    effective = {**_broker_defaults(admin, timeout_s), **settings}
    problems = target_problems(target, effective, needs, now_ms)
    if problems:
        raise RestoreRefused(
            f"topic {target} does not exist, and created with the settings of {copied_from} it would not keep the "
            f"records as archived; nothing was created or produced. Create {target} yourself with at least {need} "
            f"partition(s) and these settings, then run the restore again:\n- " + "\n- ".join(problems))
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    if req.dry_run:
        say(f"dry run: would create topic {target} with {need} partition(s) and {shown}")
        return need, settings, notes
    fs = admin.create_topics([NewTopic(target, num_partitions=need, replication_factor=-1, config=settings)])
    try:
        fs[target].result(timeout_s)
    except KafkaException as e:
        if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
            raise
    _wait_for_leaders(admin, target, need, timeout_s)
    say(f"created topic {target} with {need} partition(s) for the restore, with {shown} (settings from "
        f"{copied_from}; CreateTime so the archived timestamps are kept, retention.ms=-1 so Kafka does not "
        f"delete the restored records by their old timestamps: lower it when you are done)")
    return need, settings, notes


def _wait_for_leaders(admin: AdminClient, topic: str, partitions: int, timeout_s: float) -> None:
    """Return once every partition of a topic just created has a leader (see `leaderless`)."""
    deadline = time.monotonic() + timeout_s
    while leaderless(admin.list_topics(topic, timeout=timeout_s).topics.get(topic), partitions):
        if time.monotonic() >= deadline:
            raise RestoreFailed(f"topic {topic} was created but has no leader for every partition after "
                                f"{timeout_s:.0f}s: check the brokers' logs")
        time.sleep(0.2)


def _topic_config(admin: AdminClient, topic: str, timeout_s: float) -> dict[str, str | None]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout_s)
    return {name: e.value for name, e in entries.items()}


def _broker_defaults(admin: AdminClient, timeout_s: float) -> dict[str, str | None]:
    """What a new topic gets from the broker for the settings that matter here."""
    md = admin.list_topics(timeout=timeout_s)
    broker = ConfigResource(ConfigResource.Type.BROKER, str(min(md.brokers)))
    entries = admin.describe_configs([broker])[broker].result(timeout_s)
    return {k: entries[b].value for k, b in BROKER_SETTINGS.items() if b in entries}


def _int(v: str | None) -> int | None:
    try:
        return None if v is None else int(v)
    except ValueError:
        return None


def _iso(ms: int) -> str:
    try:
        return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"


def _partitions(admin: AdminClient, topic: str, timeout_s: float) -> list[int] | None:
    """The topic's partitions, None if it does not exist."""
    md = admin.list_topics(topic=topic, timeout=timeout_s)
    t = md.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        return None
    return sorted(t.partitions)


def _committed(consumer: Consumer, topic: str, partitions: list[int], timeout_s: float) -> dict[int, int | None]:
    """The group's committed (stable: no transaction pending) offsets; None where none."""
    tps = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
    out: dict[int, int | None] = {}
    for tp in tps:
        if tp.error is not None:
            raise KafkaException(tp.error)
        out[tp.partition] = None if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset
    return out


def _show(markers: dict[int, int | None]) -> str:
    return ", ".join(f"p{p}={'none' if o is None else o}" for p, o in sorted(markers.items()))


def _describe(res: dict, dry_run: bool) -> str:
    where = f"{res['range']} offsets [{res['start']}, {res['end']})"
    if res["skipped"]:
        return f"{where}: already restored (marker at {res['marker']}), skipped"
    resumed = f", resumed at {res['resumed_from']}" if res["resumed_from"] is not None else ""
    if dry_run:
        return f"{where}: {res['records']} record(s) to restore from {res['objects']} object(s){resumed}"
    return f"{where}: {res['records']} record(s) in {res['transactions']} transaction(s){resumed}"
