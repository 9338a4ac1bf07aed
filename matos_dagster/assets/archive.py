"""One archive asset per configured topic, partitioned by offset ranges (dynamic partitions)."""

import time

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    DagsterInstance,
    DynamicPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    asset,
)

from matos_dagster.core.archive.incarnation import current_incarnation, record_first_sight
from matos_dagster.core.archive.range_run import Archived, DataLoss, RangeRefused, check, in_turn
from matos_dagster.core.iceberg.hooks import TableState, table_state
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.offsets.ranges import KEY_FORM, OffsetRange, parse_key
from matos_dagster.core.runs import heartbeat, offset_order
from matos_dagster.core.runs import turns as core_turns
from matos_dagster.core.schemas import typed
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dead_runs import beating
from matos_dagster.names import DEFAULT, Names
from matos_dagster.turns import CLAIM_TAG, RANGE_TAG, TOPIC_PARTITION_TAG, claim, wait_for_turns, where

__all__ = ["CLAIM_TAG", "RANGE_TAG", "TOPIC_PARTITION_TAG", "archive_asset", "claim_turn", "metadata", "ranges_partitions",
           "take_turn"]



def ranges_partitions(topic: TopicConfig, names: Names = DEFAULT) -> DynamicPartitionsDefinition:
    return DynamicPartitionsDefinition(name=names.partitions(topic))


def archive_asset(topic: TopicConfig, names: Names = DEFAULT, group: str = "archive") -> AssetsDefinition:
    @asset(
        name=topic.asset_name,
        key_prefix=names.key_prefix,
        partitions_def=ranges_partitions(topic, names),
        group_name=group,
        kinds={"kafka", "swift", "spark"},
        description=(
            f"Kafka topic `{topic.name}` archived into Swift as {topic.format}, one offset range a "
            f"partition. Partition keys: `{KEY_FORM}`, half-open `[start, end)`."
        ),
        metadata={"topic": topic.name, "consumer_group": topic.group, "format": topic.format},
        required_resource_keys=names.keys("kafka", "swift", "spark"),
    )
    def _archive(context: AssetExecutionContext) -> MaterializeResult:
        kafka, swift, spark = names.resources(context, "kafka", "swift", "spark")
        r = parse_key(context.partition_key)
        # The heartbeat tells a dead run from a slow one (dead_runs.py): it beats from its own
        # thread through the wait for a turn and the archiving, until the body returns.
        thresholds = heartbeat.Thresholds.from_settings()
        # The claim first, then the heartbeat: Dagster's add_run_tags rewrites the run's whole tag
        # set from what it read, so a beat written meanwhile from the other thread could drop the
        # claim, and another run would not wait for this one.
        mine = claim_turn(context.instance, context.run.run_id, r, names)
        with beating(context.instance, context.run.run_id, thresholds, context.log.warning):
            return _archive_in_turn(context, r, kafka, swift, spark, thresholds, mine)

    def _archive_in_turn(context, r, kafka, swift, spark, thresholds, mine) -> MaterializeResult:
        waited = take_turn(context.instance, context.run.run_id, r, say=context.log.info, thresholds=thresholds,
                           mine=mine, names=names)
        # The run's questions to Kafka (check, plan, each range's, the commits) on kept clients.
        with kafka.kept_clients(), swift.store() as store:
            # Kafka is asked once a run for the partition and its committed offset: the walk's plan and
            # each archive_range start from that, or from what the range before left (archive.in_turn).
            checked = check(kafka, r, topic.group)
            # Which log of the topic's name the key's range is of (a topic deleted and created again is a
            # new incarnation, archived under its own prefix): asked after the check, so that an unknown
            # topic is named as such; the offset read again if this run recorded a new incarnation.
            inc = current_incarnation(kafka, store, topic, context.log.warning, first_sight=False)
            if inc.number > 1:
                checked = check(kafka, r, topic.group)
            prefix = inc.prefix(layout.join(store.params.prefix, topic.prefix))
            # Spark only if there is something to write: a range already archived is only verified.
            # The topic's typed columns, with the MATOS_SCHEMA_REGISTRY_* settings (None: bytes only).
            typing = typed.for_topic(topic)
            archive = in_turn(topic, kafka, store, lambda: spark.spark_session, checked, say=context.log.info,
                              typing=typing, incarnation=inc)

            # The pending ranges below this one first, in offset order (offset_order.py).
            def keys():
                return context.instance.get_dynamic_partitions(names.partitions(topic))

            first = offset_order.archive_first(r, offset_order.plan(r, topic, kafka, store, keys, checked.committed, prefix),
                                               archive, (RangeRefused, DataLoss), context.log.info, context.log.warning)
            done = archive(r)
            record_first_sight(store, topic, inc)  # the topic's first log, once the input was good
            location = f"{store.url}/{store.container}/{done.manifest_name.rsplit('/', 1)[0]}/"
            table = _table_state(store, topic, r.partition, context.log.warning, inc.number)
        for note in [n for a in first.archived for n in a.notes] + done.notes:
            context.log.warning(note)
        meta = metadata(done, location)
        if table is not None:
            meta.update(table_metadata(table))
        meta["waited_for_other_runs_s"] = MetadataValue.float(round(waited, 3))
        if first.archived or first.stopped_at is not None:
            meta.update(first_metadata(first))
        return MaterializeResult(metadata=meta)

    return _archive


def first_metadata(first: offset_order.First) -> dict:
    """The ranges this run archived before its own (offset order), and where it stopped short."""
    meta = {
        "archived_first": MetadataValue.json([a.range.key for a in first.archived]),
        "archived_first_records": MetadataValue.int(sum(a.records_written for a in first.archived)),
    }
    if first.stopped_at is not None:
        meta["not_archived_first"] = MetadataValue.text(f"{first.stopped_at.key}: {first.reason}")
    return meta


def _table_state(store, topic: TopicConfig, partition: int, warn, incarnation: int = 1) -> TableState | None:
    """The topic's Iceberg table after this run (MATOS_ICEBERG_TABLES; None when off)."""
    try:
        return table_state(store, topic, partition, incarnation)
    except TableError as e:  # the range is archived: only the table's figures are missing
        warn(str(e))
        return None


def table_metadata(t: TableState) -> dict:
    """The table's snapshot and size after the run: `iceberg_records` plots the table growing."""
    meta = {
        "iceberg_table": MetadataValue.text(t.table),
        "iceberg_records": MetadataValue.int(t.records),
        "iceberg_files": MetadataValue.int(t.files),
    }
    if t.snapshot_id is not None:  # an id, not a quantity: text, so Dagster does not plot it
        meta["iceberg_snapshot_id"] = MetadataValue.text(str(t.snapshot_id))
    if t.watermark is not None:
        meta["iceberg_watermark"] = MetadataValue.int(t.watermark)
    return meta


def claim_turn(instance: DagsterInstance, run_id: str, r: OffsetRange, names: Names = DEFAULT) -> core_turns.Claim:
    """Claim `r`'s topic partition for this run: its turn, the run tags other runs wait on (turns.py)."""
    w = where(r)
    return claim(instance, run_id, {w}, {TOPIC_PARTITION_TAG: w, RANGE_TAG: f"{w} [{r.start}, {r.end})", **names.run_tags})


def take_turn(instance: DagsterInstance, run_id: str, r: OffsetRange, say, poll_s: float = 1.0,
              thresholds: heartbeat.Thresholds | None = None, mine: core_turns.Claim | None = None,
              names: Names = DEFAULT) -> float:
    """Wait until no other run is archiving in `r`'s topic partition (turns.py); the seconds waited.

    `mine`: this run's claim (claim_turn), made here if not given. The run that waited then
    archives its range, or, if the other run archived this very range (manifest there, offset
    committed past it), only verifies it (archive.archived_and_committed).
    """
    thresholds = thresholds or heartbeat.Thresholds.from_settings()
    mine = mine or claim_turn(instance, run_id, r, names)
    return wait_for_turns(instance, mine, {where(r)}, say, thresholds, poll_s, names=names)


def metadata(done: Archived, location: str, now: float | None = None) -> dict:
    """The materialisation's metadata, typed so that Dagster's plots mean something.

    Dagster 1.13 plots only int and float entries (not timestamps), against the partition
    key for a partitioned asset (its default: one point a key, in the order keys were added,
    from each key's latest materialisation) or against the materialisation's time (the
    toggle: runs a second apart share a minute label). It never plots one entry against
    another, so offsets cannot be the x-axis; what we can do is make each y meaningful per
    range: its offsets, its records and bytes, how far behind the log end and how long after
    its newest record it was archived. A run that only verified writes 0 records, at 0 records/s.
    """
    m = done.manifest
    meta = {
        "records": MetadataValue.int(m["records"]),
        "records_written": MetadataValue.int(done.records_written),
        "bytes": MetadataValue.int(m["bytes"]),
        "record_bytes": MetadataValue.int(m["record_bytes"]),
        "objects": MetadataValue.int(len(m["objects"])),
        "start": MetadataValue.int(done.range.start),
        "end": MetadataValue.int(done.range.end),
        "duration_s": MetadataValue.float(round(done.duration_s, 3)),
        "records_per_s": MetadataValue.float(round(done.records_per_s, 1)),
        "slices": MetadataValue.int(done.slices),
        "already_archived": MetadataValue.bool(done.already_archived),
        "verified_existing_archive": MetadataValue.bool(done.verified_only),
        "archived_at": MetadataValue.timestamp(time.time() if now is None else now),
        "swift_location": MetadataValue.url(location),
        "manifest": MetadataValue.text(done.manifest_name),
    }
    for side, t in m.get("typed", {}).items():  # a typed topic's: records decoded and not, per side
        meta[f"{side}_decoded"] = MetadataValue.int(t["decoded"])
        meta[f"{side}_failed"] = MetadataValue.int(t["failed"])
        meta[f"{side}_schema_ids"] = MetadataValue.text(", ".join(map(str, t["schema_ids"])) or "none")
    if done.reader:  # which slice reader read the records (native or python): see README, Install
        meta["reader"] = MetadataValue.text(done.reader)
    if done.committed_after is not None:
        meta["committed_offset"] = MetadataValue.int(done.committed_after)
    if done.log_end is not None:
        # How far the archive was behind the partition's log end when this range was read.
        meta["lag_behind_log_end"] = MetadataValue.int(max(0, done.log_end - done.range.end))
    if m["first_offset"] is not None:
        meta["first_offset"] = MetadataValue.int(m["first_offset"])
        meta["last_offset"] = MetadataValue.int(m["last_offset"])
    if m["min_timestamp"] is not None:
        meta["first_timestamp"] = MetadataValue.timestamp(m["min_timestamp"] / 1000)
        meta["last_timestamp"] = MetadataValue.timestamp(m["max_timestamp"] / 1000)
        if not done.verified_only:  # a rerun's delay would only say when someone reran it
            at = meta["archived_at"].value
            meta["seconds_after_newest_record"] = MetadataValue.float(round(at - m["max_timestamp"] / 1000, 3))
    return meta
