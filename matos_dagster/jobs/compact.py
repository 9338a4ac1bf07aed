"""The compact job: merge a topic's small archived ranges into large ones (core/compact/run.py's protocol).

    dg launch --job compact --config-json '{"ops": {"compact_archive": {"config": {"topic": "demo"}}}}'

Runs on `MATOS_COMPACT_CRON` (one run for every topic, tagged `matos/compact=*`; a run of one
topic, from the UI's Launchpad or `matos compact`, is tagged with the topic; dagster.yaml lets one
run per tag value go at a time). Each partition is compacted in its turn (turns.py), as archive runs
and erasures write in theirs. Settings per topic in
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
    in_process_executor,
    job,
    op,
    schedule,
)
from pydantic import Field

from matos_dagster.core.compact.run import Compacted, compact_topic
from matos_dagster.core.runs import heartbeat
from matos_dagster.core.topic_set import as_set, not_found
from matos_dagster.core.kafka import many
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.chosen_incarnation import kafkas
from matos_dagster.dead_runs import beating
from matos_dagster.names import DEFAULT, Names
from matos_dagster.turns import partition_by_partition

TAG = "matos/compact"


class CompactConfig(Config):
    topic: str = Field(default="", description="A topic of the topics file; empty: every topic of it (names and "
                       "patterns) that Kafka has, in one run.")
    partition: int = Field(default=-1, description="Partition; -1: every partition of the topic.")
    max_groups: int = Field(default=0, description="Groups merged per partition in this run; 0: every one due.")


def compact_job(topics, names: Names = DEFAULT) -> JobDefinition:
    """`topics`: the topics file (a TopicSet; a list of TopicConfig for named topics only)."""
    topics = as_set(topics)

    @op(name=names.of("compact_archive"), description="Merge adjacent archived ranges below the committed offset into large ones.",
        required_resource_keys=names.keys("kafka", "swift", "spark"))
    def _compact(context: OpExecutionContext, config: CompactConfig) -> Output[int]:
        kafka, swift, spark = names.resources(context, "kafka", "swift", "spark")
        if config.max_groups < 0:
            raise Failure(f"max_groups must be 0 (every group due) or a count, got {config.max_groups}")
        if not config.topic:
            if config.partition != -1:
                raise Failure("partition needs a topic: give the topic, or leave partition at -1")
            chosen = topics.resolve(many.topics(kafka)).topics
        elif (topic := topics.get(config.topic)) is None:
            raise Failure(not_found(topics, config.topic))
        else:
            chosen = [topic]
        dones = []
        instance, run_id = context.instance, context.run.run_id
        thresholds = heartbeat.Thresholds.from_settings()
        # Each partition compacted in its turn (turns.py), one turn held at a time: no archive run or
        # erasure writes in a partition's folders while its merges are switched in and its old ones deleted.
        in_turn = partition_by_partition(instance, run_id, thresholds, context.log.info, names)
        with swift.store() as store, beating(instance, run_id, thresholds, context.log.warning):
            for topic in chosen:
                parts = kafka.partitions(topic.name)
                if config.partition != -1 and config.partition not in parts:
                    raise Failure(f"topic {topic.name!r} has no partition {config.partition}; it has {parts}")
                # Only below the committed offset: archiving of new ranges, at and after it, goes on.
                committed = kafka.committed(topic.name, parts if config.partition == -1 else [config.partition],
                                            topic.group)
                # The committed offsets are of Kafka's log now: compact its incarnation only, never an
                # earlier one's ranges below them (core/swift/chosen_incarnation.py).
                kafka_id = many.topic_ids(kafka, [topic.name]).get(topic.name)
                incarnation, prefix = kafkas(lambda: store, layout.join(store.params.prefix, topic.prefix),
                                             topic.name, kafka_id)
                if incarnation.number > 1:
                    context.log.info(f"{topic.name}: compacting its {incarnation}")
                done = compact_topic(topic, committed, store, spark.spark_session, say=context.log.info,
                                     max_groups=config.max_groups, prefix=prefix, in_turn=in_turn)
                for p in done.partitions:
                    for note in p.notes:
                        context.log.info(f"{topic.name}/{p.partition}: {note}")
                dones.append(done)
        total = Compacted(config.topic or "*", [p for d in dones for p in d.partitions], sum(d.duration_s for d in dones))
        return Output(total.total("ranges_merged"), metadata=metadata(total, dones))

    @job(name=names.of("compact"), executor_def=in_process_executor, tags={"kind": "compaction", **names.run_tags},
         description="Compact a topic's archive: small ranges become large objects, exactly once.")
    def _job():
        _compact()

    return _job


def compact_schedule(job_def: JobDefinition, cron: str, names: Names = DEFAULT) -> ScheduleDefinition:
    """One run for every topic: an estate of hundreds of topics must not queue a run per topic."""
    return every_topic_schedule("compact_schedule", job_def, "compact_archive", TAG, cron, names)


def every_topic_schedule(name: str, job_def: JobDefinition, op_name: str, tag: str, cron: str,
                         names: Names = DEFAULT) -> ScheduleDefinition:
    """A schedule whose runs take every topic (the op's empty config), tagged `tag` so that one goes
    at a time per archive (dagster.yaml)."""
    @schedule(name=names.of(name), job=job_def, cron_schedule=cron, default_status=DefaultScheduleStatus.RUNNING)
    def _schedule(context: ScheduleEvaluationContext):
        return RunRequest(
            run_key=context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else None,
            run_config={"ops": {names.of(op_name): {"config": {}}}},
            tags={tag: names.of("*")},
        )

    return _schedule


def metadata(done: Compacted, per_topic: list[Compacted] = ()) -> dict:
    """`per_topic`: each topic's result: where each partition's unmerged ranges begin (`unmerged_from`),
    which the metrics exporter reads from the run to count the compaction backlog, not from Swift."""
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
        "unmerged_from": MetadataValue.json({d.topic: {str(p.partition): p.unmerged_from for p in d.partitions
                                                       if p.unmerged_from is not None} for d in per_topic}),
    }
