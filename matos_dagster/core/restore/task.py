"""The Spark task: an object's records produced into the target in one Kafka transaction, with the marker.

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
The marker belongs to the restore: restoring the same offsets into the same target again
needs another group (or the group deleted).

Only an object's raw columns are produced (records/unify.py's `raw`): a typed topic's typed
columns are what the archive decoded from those bytes, never part of the record restored.
With a target registry (registry.py), the unit carries the id map, and each key and value of a
typed side has its wire prefix's schema id rewritten (schema_ids.py), its payload unchanged.

A record Kafka still refuses as it is produced (the target's settings were checked before,
see target.py) aborts its transaction and fails the run naming the setting (RestoreFailed),
the marker before it.

`restore_unit` is pickled by reference for Spark's Python workers: it stays a module-level
function of this module. No Dagster imports.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from matos_dagster.core import reader
from matos_dagster.core.records.unify import raw
from matos_dagster.core.restore import schema_ids
from matos_dagster.core.restore.plan import RestoreFailed, Unit
from matos_dagster.core.swift.store import Store


def restore_unit(unit: Unit) -> dict:
    """Runs on an executor: restore (or, in a dry run, count) the unit's records; see the module doc."""
    result = {
        "range": str(unit.source), "partition": unit.partition, "start": unit.lo, "end": unit.hi,
        "records": 0, "transactions": 0, "objects": 0, "skipped": False, "resumed_from": None, "marker": None,
        "schema_ids": {},  # side -> outcome -> records (schema_ids.OUTCOMES), with a target registry
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
            table = reader.filter_rows(raw(reader.read_object(store, o["name"], unit.format)), unit.window, lo, unit.hi)
            result["objects"] += 1
            if unit.dry_run or table.num_rows == 0:
                result["records"] += table.num_rows
                continue
            producer.begin_transaction()
            counts = _produce(producer, unit, table, o["name"], schema_ids.for_object(unit.schema_ids, o))
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
            schema_ids.add_counts(result["schema_ids"], counts)
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


def _produce(producer: Producer, unit: Unit, table: pa.Table, name: str = "",
             ids: schema_ids.IdMap | None = None) -> dict[str, dict[str, int]]:
    """Produce the rows, their schema ids rewritten by `ids` (per side: archived -> target id),
    and wait for every delivery report; any failure raises RestoreFailed. Per side, what became
    of the ids (schema_ids.rewrite's outcomes)."""
    keys = table["key"].to_pylist()
    values = table["value"].to_pylist()
    counts: dict[str, dict[str, int]] = {}
    for side, mapping in (ids or {}).items():
        if side == "key":
            keys = schema_ids.rewrite_all(keys, mapping, counts.setdefault(side, {}))
        elif side == "value":
            values = schema_ids.rewrite_all(values, mapping, counts.setdefault(side, {}))
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
    return counts


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


def _committed(consumer: Consumer, topic: str, partitions: list[int], timeout_s: float) -> dict[int, int | None]:
    """The group's committed (stable: no transaction pending) offsets; None where none."""
    tps = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
    out: dict[int, int | None] = {}
    for tp in tps:
        if tp.error is not None:
            raise KafkaException(tp.error)
        out[tp.partition] = None if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset
    return out
