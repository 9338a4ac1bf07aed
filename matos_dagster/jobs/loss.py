"""The acknowledge_loss job: go on after records were deleted from Kafka before they were archived.

    dg launch --job acknowledge_loss --config-json \\
        '{"ops": {"record_loss": {"config": {"topic": "demo", "partition": 0, "reason": "retention ran during the outage"}}}}'

or from the UI: Jobs > acknowledge_loss > Launchpad, with the same config. It records the
lost offsets in the archive (`_loss.json` beside the manifests) and commits the group's
offset past them; the sensor then goes on by itself. See matos_dagster/core/archive/loss.py.
"""

from dagster import Config, Failure, MetadataValue, OpExecutionContext, Output, in_process_executor, job, op
from pydantic import Field

from matos_dagster.core.archive import loss
from matos_dagster.core.archive.incarnation import current_incarnation
from matos_dagster.core.swift import layout
from matos_dagster.core.topic_set import as_set, not_found
from matos_dagster.names import DEFAULT, Names


class LossConfig(Config):
    topic: str = Field(description="A topic of the topics file.")
    partition: int = Field(description="The partition whose records were deleted before they were archived.")
    reason: str = Field(description="Why the records are gone; recorded with the loss in the archive.")
    start: int = Field(default=-1, description="First lost offset; -1 (with end -1): the group's committed offset.")
    end: int = Field(default=-1, description="End of the lost span, exclusive; -1 (with start -1): the log start offset.")


def acknowledge_loss_job(topics, names: Names = DEFAULT):
    """`topics`: the topics file (a TopicSet; a list of TopicConfig for named topics only)."""
    topics = as_set(topics)

    @op(name=names.of(loss.OP), description="Record deleted, unarchived offsets as lost in the archive; commit past them.",
        required_resource_keys=names.keys("kafka", "swift"))
    def _acknowledge(context: OpExecutionContext, config: LossConfig) -> Output[int]:
        kafka, swift = names.resources(context, "kafka", "swift")
        topic = topics.get(config.topic)
        if topic is None:
            raise Failure(not_found(topics, config.topic))
        span = (None, None) if (config.start, config.end) == (-1, -1) else (config.start, config.end)
        with swift.store() as store:
            try:
                # Into the topic's current log's archive (a topic created again: its incarnation's).
                inc = current_incarnation(kafka, store, topic, context.log.warning)
                done = loss.acknowledge(kafka, store, inc.prefix(layout.join(store.params.prefix, topic.prefix)), topic,
                                        config.partition, config.reason, *span)
            except loss.LossRefused as e:
                raise Failure(description=f"nothing recorded: {e}") from None
        for note in done.notes:
            context.log.info(note)
        context.log.info(f"{topic.name}/{config.partition}: group {topic.group} committed offset "
                         f"{done.committed_before} -> {done.committed_after}")
        return Output(done.lost_offsets, metadata={
            "recorded": MetadataValue.json([list(s) for s in done.recorded]),
            "lost_offsets": MetadataValue.int(done.lost_offsets),
            "log_start": MetadataValue.int(done.log_start),
            "committed_before": MetadataValue.int(-1 if done.committed_before is None else done.committed_before),
            "committed_after": MetadataValue.int(-1 if done.committed_after is None else done.committed_after),
        })

    @job(name=names.of(loss.JOB), tags=names.run_tags, executor_def=in_process_executor, description="Acknowledge a data loss: record it in the archive and go on past it.")
    def _job():
        _acknowledge()

    return _job
