"""The restore job: archived records back into a Kafka topic, exactly once.

    dg launch --job restore -c restore.yaml

with, for example,

    ops: {restore_records: {config: {topic: demo, partition: 0, start: 0, end: 5000,
                                     target_topic: demo-restored, dry_run: true}}}

Select by `partition` + `[start, end)`, or by archive partition `keys`, and/or by a time
window `[since_ms, until_ms)`. The exactly-once design (one transaction per object with a
progress marker in the consumer group `matos-restore-<target>`) is in `matos_dagster/core/restore/task.py`.
`target_schema_registry_url` registers the archived schemas in another registry and rewrites
the records' schema ids to its own (`matos_dagster/core/restore/registry.py`); its credentials
come from the MATOS_TARGET_SCHEMA_REGISTRY_* settings, never from run config.
"""

from typing import Optional

from dagster import Config, MetadataValue, OpExecutionContext, Output, in_process_executor, job, op
from pydantic import Field

from matos_dagster.core.restore import schema_ids
from matos_dagster.core.restore.plan import Request, RestoreRefused
from matos_dagster.core.days.read import WindowNotComplete, window_selection
from matos_dagster.core.restore.registry import target_registry
from matos_dagster.core.restore.run import Report
from matos_dagster.core.restore.run import restore as run_restore
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.chosen_incarnation import IncarnationError, choose
from matos_dagster.core.topics import TopicConfig
from matos_dagster.names import DEFAULT, Names


class RestoreConfig(Config):
    topic: str = Field(description="Source topic, as archived.")
    partition: int = Field(default=-1, description="Source partition; -1: every archived partition.")
    start: int = Field(default=-1, description="First source offset; -1: from the first archived.")
    end: int = Field(default=-1, description="End source offset, exclusive; -1: to the last archived.")
    keys: list[str] = Field(
        default=[], description="Archive partition keys (`<topic>:p<partition>:<start>-<end>`) instead of "
        "partition/start/end.",
    )
    window: str = Field(default="", description="A complete day (`YYYY-MM-DD`) or hour (`YYYY-MM-DD-HH:00`) of the "
                        "topic's days asset: its records only, read from the offsets its record names; instead of "
                        "partition/start/end/keys/since/until.")
    since_ms: int = Field(default=-1, description="Only records stamped at or after this (Kafka ms); -1: no bound.")
    until_ms: int = Field(default=-1, description="Only records stamped before this (Kafka ms); -1: no bound.")
    target_topic: str = Field(default="", description="Topic to restore into; empty: the source topic. "
                              "Created if missing, with partitions up to the highest source partition restored "
                              "and the source topic's timestamp limits, max.message.bytes and cleanup.policy.")
    keep_partition: bool = Field(
        default=True, description="Restore each record into its source partition number; false: let the "
        "target's partitioner place it by key (murmur2, as Java producers do).",
    )
    dry_run: bool = Field(default=False, description="Report the ranges and records that would be restored; "
                          "produce nothing.")
    group: str = Field(default="", description="Consumer group of the progress marker; empty: "
                       "matos-restore-<target>. Use a new one to restore the same records again on purpose.")
    target_schema_registry_url: str = Field(
        default="", description="Schema registry of the target cluster, `http(s)://host:port`: before producing, "
        "register there every archived schema the restored records name (under `<target_topic>-value` / `-key`) and "
        "rewrite each record's schema id to the one it gives (payload unchanged). Credentials: "
        "MATOS_TARGET_SCHEMA_REGISTRY_USERNAME and MATOS_TARGET_SCHEMA_REGISTRY_PASSWORD. Empty: records keep "
        "their schema ids, byte-exact.",
    )
    incarnation: str = Field(
        default="", description="Which log of the topic's name, when it was deleted and created again: its number "
        "(1 the first) or Kafka's topic id; empty: the newest. Each has its own marker group (a later one's is "
        "matos-restore-<target>-incarnation-<n>).",
    )
    prefix: Optional[str] = Field(
        default=None, description="Prefix between MATOS_SWIFT_PREFIX and topic=<topic>/; unset: the topic's "
        "prefix in the topics file (empty if it is not there).",
    )


def _opt(v: int) -> int | None:
    return None if v == -1 else v


def restore_job(topics: list[TopicConfig] = (), names: Names = DEFAULT):
    prefixes = {t.name: t.prefix for t in topics}
    max_record_bytes = {t.name: t.max_record_bytes for t in topics}

    @op(name=names.of("restore_records"), description="Restore archived records into a Kafka topic, exactly once.",
        required_resource_keys=names.keys("kafka", "swift", "spark"))
    def _restore(context: OpExecutionContext, config: RestoreConfig) -> Output[int]:
        kafka, swift, spark = names.resources(context, "kafka", "swift", "spark")
        topic_prefix = config.prefix if config.prefix is not None else prefixes.get(config.topic, "")
        with swift.store() as store:
            try:
                chosen = choose(store, layout.join(store.params.prefix, topic_prefix), config.topic,
                                config.incarnation or None)
            except IncarnationError as e:
                raise RestoreRefused(f"incarnation: {e}") from None
            prefix = chosen.prefix
            if len(chosen.all) > 1:
                context.log.info(f"restoring {config.topic}'s {chosen.incarnation} (of {len(chosen.all)})")
            keys, since_ms, until_ms = tuple(config.keys), _opt(config.since_ms), _opt(config.until_ms)
            if config.window:
                if keys or since_ms is not None or until_ms is not None or config.partition != -1 or _opt(
                        config.start) is not None or _opt(config.end) is not None:
                    raise RestoreRefused("window selects the records by itself: give it without partition, "
                                  "start, end, keys, since_ms or until_ms")
                try:
                    keys, since_ms, until_ms = window_selection(store, prefix, config.topic, config.window)
                except WindowNotComplete as e:
                    raise RestoreRefused(str(e)) from None
                if not keys:
                    context.log.info(f"window {config.window} of {config.topic} holds no record: nothing to restore")
                    return Output(0, metadata={"records": 0})
            req = Request(
                topic=config.topic,
                prefix=prefix,
                partitions=None if config.partition == -1 else (config.partition,),
                start=_opt(config.start),
                end=_opt(config.end),
                keys=keys,
                since_ms=since_ms,
                until_ms=until_ms,
                scan_all=bool(config.window),
                target=config.target_topic,
                keep_partition=config.keep_partition,
                dry_run=config.dry_run,
                group=config.group,
                target_registry=target_registry(config.target_schema_registry_url),
                incarnation=chosen.incarnation.number,
                **({"max_record_bytes": max_record_bytes[config.topic]} if config.topic in max_record_bytes else {}),
            )
            report = run_restore(req, kafka, store, spark.spark_session, say=context.log.info)
        return Output(report.records, metadata=metadata(report))

    @job(name=names.of("restore"), tags=names.run_tags, executor_def=in_process_executor,
         description="Restore archived records from Swift into a Kafka topic, exactly once.")
    def _job():
        _restore()

    return _job


def metadata(report: Report) -> dict:
    meta = {
        "dry_run": MetadataValue.bool(report.dry_run),
        "source_topic": MetadataValue.text(report.topic),
        "target_topic": MetadataValue.text(report.target),
        "marker_group": MetadataValue.text(report.group),
        "records": MetadataValue.int(report.records),
        "ranges": MetadataValue.int(len(report.units)),
        "ranges_already_restored": MetadataValue.int(report.skipped),
        "transactions": MetadataValue.int(sum(u["transactions"] for u in report.units)),
        "duration_s": MetadataValue.float(round(report.duration_s, 3)),
        **{f"records_p{p}": MetadataValue.int(n) for p, n in sorted(report.records_by_partition().items())},
    }
    if report.created_target is not None:
        meta["created_target_partitions"] = MetadataValue.int(report.created_target)
        meta["created_target_settings"] = MetadataValue.json(report.target_config)
    if report.schema_ids:
        meta["schema_ids_target"] = MetadataValue.json(
            {side: {str(a): b for a, b in sorted(m.items())} for side, m in report.schema_ids.items()})
    for side, counts in report.schema_id_counts().items():
        for outcome in schema_ids.OUTCOMES:
            meta[f"{side}_schema_ids_{outcome.replace(' ', '_')}"] = MetadataValue.int(counts.get(outcome, 0))
    if report.notes:
        meta["notes"] = MetadataValue.md("\n".join(f"- {n}" for n in report.notes))
    rows = [
        f"| {u['partition']} | {u['start']} | {u['end']} | {u['records']} | "
        f"{'already restored' if u['skipped'] else ('resumed at %d' % u['resumed_from'] if u['resumed_from'] is not None else '')} |"
        for u in report.units[:500]
    ]
    more = f"\n\n({len(report.units) - 500} more)" if len(report.units) > 500 else ""
    meta["ranges_table"] = MetadataValue.md(
        "| partition | start | end | records | note |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows) + more
    )
    return meta

