"""The expire job: remove archived records stamped before a topic's `archive_retention_days` (core/expire/run.py).

    dg launch --job expire --config-json '{"ops": {"expire_archive": {"config": {"topic": "orders"}}}}'

Runs on `MATOS_EXPIRE_CRON` (one run for every topic with a retention, tagged `matos/expire=*`), or
from the UI's Launchpad, or `matos expire`. Each partition is expired in its turn (turns.py), so no
archive run writes in a folder while this run rewrites it. A topic without `archive_retention_days`
keeps every record.
"""

from dagster import (
    AssetMaterialization,
    Config,
    Failure,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Output,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from matos_dagster.core.expire.days import expired as expired_days
from matos_dagster.core.expire.run import expire_topics
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.expire.span import ExpiryError
from matos_dagster.core.kafka import many
from matos_dagster.core.runs import heartbeat
from matos_dagster.core.topic_set import as_set, not_found
from matos_dagster.dead_runs import beating
from matos_dagster.jobs.compact import every_topic_schedule
from matos_dagster.names import DEFAULT, Names
from matos_dagster.turns import partition_by_partition

OP = "expire_archive"
TAG = "matos/expire"


class ExpireConfig(Config):
    topic: str = Field(default="", description="A topic of the topics file; empty: every topic of it (names and "
                       "patterns) that Kafka has and that has archive_retention_days.")


def expire_job(topics, names: Names = DEFAULT) -> JobDefinition:
    """`topics`: the topics file (a TopicSet)."""
    topics = as_set(topics)

    @op(name=names.of(OP), description="Remove archived records stamped before each topic's archive_retention_days.",
        required_resource_keys=names.keys("kafka", "swift"))
    def _expire(context: OpExecutionContext, config: ExpireConfig) -> Output[int]:
        kafka, swift = names.resources(context, "kafka", "swift")
        instance, run_id = context.instance, context.run.run_id
        thresholds = heartbeat.Thresholds.from_settings()
        if not config.topic:
            chosen = topics.resolve(many.topics(kafka)).topics
        elif (topic := topics.get(config.topic)) is None:
            raise Failure(not_found(topics, config.topic))
        elif topic.archive_retention_days is None:
            raise Failure(f"topic {config.topic!r} has no archive_retention_days in the topics file: it keeps every "
                          "record; set it (days) to expire what is older")
        else:
            chosen = [topic]

        in_turn = partition_by_partition(instance, run_id, thresholds, context.log.info, names)
        try:
            with swift.store() as store, beating(instance, run_id, thresholds, context.log.warning):
                done = expire_topics(store, [t for t in chosen if t.archive_retention_days is not None], run_id,
                                     in_turn, context.log.info)
        except (ExpiryError, TableError) as e:
            raise Failure(str(e)) from None
        for t in chosen:  # the days (or hours) now before the cutoff show as expired on the days asset
            mine = [p for p in done.partitions if p.topic == t.name]
            record = done.record["topics"].get(t.name)
            if not mine or record is None:
                continue
            previous = None if any(p.previous_cutoff is None for p in mine) else min(p.previous_cutoff for p in mine)
            for key in expired_days(t, record["stamped_before"], previous):
                context.log_event(AssetMaterialization(
                    asset_key=names.windows_key(t), partition=key,
                    metadata={"expired": True, "records": 0, "stamped_before": MetadataValue.int(record["stamped_before"]),
                              "expiry_record": MetadataValue.text(done.record_name)}))
        return Output(done.records, metadata={
            "records_expired": MetadataValue.int(done.records),
            "ranges_expired": MetadataValue.int(sum(len(p.spans) for p in done.partitions)),
            "objects_rewritten": MetadataValue.int(sum(len(p.rewritten) for p in done.partitions)),
            "objects_deleted": MetadataValue.int(sum(p.deleted for p in done.partitions)),
            "manifests_read": MetadataValue.int(sum(p.manifests_read for p in done.partitions)),
            "record": MetadataValue.text(done.record_name),
            "partitions": MetadataValue.json({f"{p.topic}/{p.partition}": p.records for p in done.partitions}),
        })

    @job(name=names.of("expire"), executor_def=in_process_executor, tags={"kind": "expiry", **names.run_tags},
         description="Expire archived records older than each topic's archive_retention_days.")
    def _job():
        _expire()

    return _job


def expire_schedule(job_def: JobDefinition, cron: str, names: Names = DEFAULT) -> ScheduleDefinition:
    """One run for every topic, as compaction's."""
    return every_topic_schedule("expire_schedule", job_def, OP, TAG, cron, names)
