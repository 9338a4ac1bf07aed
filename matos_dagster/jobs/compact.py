"""The compact job: merge a topic's small archived ranges into large ones (core/compact/run.py's protocol).

    dg launch --job compact --config-json '{"ops": {"compact_archive": {"config": {"topic": "demo"}}}}'

Runs on `MATOS_COMPACT_CRON` (one run per topic, tagged `matos/compact=<topic>`; dagster.yaml
lets one such run per topic go at a time), and from the UI's Launchpad. Settings per topic in
the topics file: `compact_bytes`, `compact_min_age_s`, `compact_grace_s`.
"""

from dagster import (
    Config,
    DefaultScheduleStatus,
    Failure,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Output,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    job,
    op,
    schedule,
)
from pydantic import Field

from matos_dagster.core.compact.run import Compacted, compact_topic
from matos_dagster.core.topics import TopicConfig
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

TAG = "matos/compact"


class CompactConfig(Config):
    topic: str = Field(description="A topic of the topics file.")
    partition: int = Field(default=-1, description="Partition; -1: every partition of the topic.")
    max_groups: int = Field(default=0, description="Groups merged per partition in this run; 0: every one due.")


def compact_job(topics: list[TopicConfig]) -> JobDefinition:
    by_name = {t.name: t for t in topics}

    @op(name="compact_archive", description="Merge adjacent archived ranges below the committed offset into large ones.")
    def _compact(context: OpExecutionContext, config: CompactConfig, kafka: KafkaResource, swift: SwiftResource,
                 spark: SparkResource) -> Output[int]:
        topic = by_name.get(config.topic)
        if topic is None:
            raise Failure(f"topic {config.topic!r} is not in the topics file; it has {sorted(by_name)}")
        if config.max_groups < 0:
            raise Failure(f"max_groups must be 0 (every group due) or a count, got {config.max_groups}")
        parts = kafka.partitions(topic.name)
        if config.partition != -1 and config.partition not in parts:
            raise Failure(f"topic {topic.name!r} has no partition {config.partition}; it has {parts}")
        chosen = parts if config.partition == -1 else [config.partition]
        # Only below the committed offset: archiving of new ranges, at and after it, goes on.
        committed = kafka.committed(topic.name, chosen, topic.group)
        with swift.store() as store:
            done = compact_topic(topic, committed, store, spark.spark_session, say=context.log.info,
                                 max_groups=config.max_groups)
        for p in done.partitions:
            for note in p.notes:
                context.log.info(f"{topic.name}/{p.partition}: {note}")
        return Output(done.total("ranges_merged"), metadata=metadata(done))

    @job(name="compact", description="Compact a topic's archive: small ranges become large objects, exactly once.",
         tags={"kind": "compaction"})
    def _job():
        _compact()

    return _job


def compact_schedule(job_def: JobDefinition, topics: list[TopicConfig], cron: str) -> ScheduleDefinition:
    @schedule(name="compact_schedule", job=job_def, cron_schedule=cron, default_status=DefaultScheduleStatus.RUNNING)
    def _schedule(context: ScheduleEvaluationContext):
        for t in topics:
            yield RunRequest(
                run_key=f"{t.name}:{context.scheduled_execution_time.isoformat()}" if context.scheduled_execution_time else None,
                run_config={"ops": {"compact_archive": {"config": {"topic": t.name}}}},
                tags={TAG: t.name},
            )

    return _schedule


def metadata(done: Compacted) -> dict:
    return {
        "ranges_merged": MetadataValue.int(done.total("ranges_merged")),
        "ranges_written": MetadataValue.int(sum(len(p.groups) for p in done.partitions)),
        "objects_before": MetadataValue.int(done.total("objects_before")),
        "objects_after": MetadataValue.int(done.total("objects_after")),
        "bytes_before": MetadataValue.int(done.total("bytes_before")),
        "bytes_after": MetadataValue.int(done.total("bytes_after")),
        "records": MetadataValue.int(done.total("records")),
        "replaced_folders_deleted": MetadataValue.int(done.total("folders_deleted")),
        "duration_s": MetadataValue.float(round(done.duration_s, 3)),
        "ranges": MetadataValue.json({str(p.partition): [list(g) for g in p.groups] for p in done.partitions}),
    }
