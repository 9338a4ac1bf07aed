"""The retention job: keep Dagster's partition keys and run storage bounded (retention.py's rules).

    dg launch --job retention        # as its schedule does
    dg launch --job retention \\
        --config-json '{"ops": {"apply_retention": {"config": {"dry_run": true}}}}'   # say, change nothing

Runs on `MATOS_RETENTION_CRON`. Keys: `MATOS_KEEP_KEYS` per topic partition. Runs (with their
event logs and compute logs): `MATOS_KEEP_RUNS` per job, failed ones `MATOS_KEEP_FAILED_RUNS_DAYS`.
Only Dagster's records are removed; the archive in Swift stays whole.
"""

import os
import time

from dagster import (
    Config,
    DagsterInstance,
    DagsterRunStatus,
    DefaultScheduleStatus,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Output,
    RunsFilter,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from matos_dagster.core.runs import retention
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.store import Store
from matos_dagster.core.kafka import many
from matos_dagster.core.topic_set import as_set
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dagster_compat import PARTITION_NAME_TAG, event_log_shard
from matos_dagster.names import DEFAULT, Names

_FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
_UNFINISHED = [s for s in DagsterRunStatus if s not in _FINISHED]
_PAGE = 1000


class RetentionConfig(Config):
    dry_run: bool = Field(default=False, description="Report what would be removed; remove nothing.")
    keep_keys: int = Field(default=-1, description="Keys kept per topic partition; -1: MATOS_KEEP_KEYS.")
    keep_runs: int = Field(default=-1, description="Finished runs kept per job; -1: MATOS_KEEP_RUNS.")
    keep_failed_days: float = Field(default=-1, description="Days failed runs are kept; -1: MATOS_KEEP_FAILED_RUNS_DAYS.")

    def policy(self) -> retention.Policy:
        return retention.Policy(
            keep_keys=self.keep_keys if self.keep_keys != -1 else int(os.environ["MATOS_KEEP_KEYS"]),
            keep_runs=self.keep_runs if self.keep_runs != -1 else int(os.environ["MATOS_KEEP_RUNS"]),
            keep_failed_days=self.keep_failed_days if self.keep_failed_days != -1
            else float(os.environ["MATOS_KEEP_FAILED_RUNS_DAYS"]),
        )


def retention_job(topics, names: Names = DEFAULT) -> JobDefinition:
    """`topics`: the topics file (a TopicSet; a list of TopicConfig for named topics only), whose
    topics are resolved against Kafka at each run: a pattern's topics are pruned too."""
    topics = as_set(topics)

    @op(name=names.of("apply_retention"), description="Remove old partition keys and old runs from Dagster (never from Swift).",
        required_resource_keys=names.keys("kafka", "swift"))
    def _apply(context: OpExecutionContext, config: RetentionConfig) -> Output[int]:
        kafka, swift = names.resources(context, "kafka", "swift")
        try:
            policy = config.policy()
        except ValueError as e:
            raise ValueError(f"retention: {e}") from None
        instance = context.instance
        verb = "would remove" if config.dry_run else "removed"
        meta: dict = {"dry_run": MetadataValue.bool(config.dry_run)}
        in_flight = _keys_in_flight(instance)
        pruned_total = 0
        # A plain Store: retention never creates the container (a missing one prunes nothing).
        with Store(swift.params()) as store:
            existing = many.topics(kafka)
            # A topic deleted from Kafka keeps its keys: whether its ranges are committed cannot be asked.
            for topic in [t for t in topics.resolve(existing).topics if t.name in existing]:
                pruned, kept = prune_keys(instance, topic, kafka, store, policy.keep_keys, in_flight, config.dry_run,
                                          names)
                pruned_total += pruned
                context.log.info(f"{topic.name}: {verb} {pruned} partition keys, {kept} kept")
                meta[f"keys_pruned_{topic.name}"] = MetadataValue.int(pruned)
                meta[f"keys_kept_{topic.name}"] = MetadataValue.int(kept)
        deleted = delete_runs(instance, policy, config.dry_run, skip_run_id=context.run_id)
        context.log.info(f"{verb} {deleted} runs with their event logs and compute logs")
        meta["runs_deleted"] = MetadataValue.int(deleted)
        meta["keys_pruned"] = MetadataValue.int(pruned_total)
        return Output(pruned_total + deleted, metadata=meta)

    @job(name=names.of("retention"), tags=names.run_tags, executor_def=in_process_executor, description="Keep Dagster's partition keys and runs bounded; the archive in Swift stays whole.")
    def _job():
        _apply()

    return _job


def retention_schedule(job_def: JobDefinition, cron: str, names: Names = DEFAULT) -> ScheduleDefinition:
    return ScheduleDefinition(name=names.of("retention_schedule"), job=job_def, cron_schedule=cron,
                              default_status=DefaultScheduleStatus.RUNNING)


def prune_keys(instance: DagsterInstance, topic: TopicConfig, kafka, store, keep: int,
               in_flight: set[str], dry_run: bool, names: Names = DEFAULT) -> tuple[int, int]:
    """(keys removed, keys left) for one topic; a key goes only once its manifest is seen in Swift."""
    keys = instance.get_dynamic_partitions(names.partitions(topic))
    if len(keys) <= keep:
        return 0, len(keys)
    parts = kafka.partitions(topic.name)
    committed = kafka.committed(topic.name, parts, topic.group)
    # Keys name ranges of the topic's current incarnation (a topic created again: its own prefix).
    prefix = layout.join(store.params.prefix, topic.prefix)
    prefix = incarnations.current(store, prefix, topic.name).prefix(prefix)
    removed = 0
    for r in retention.prunable_keys(keys, keep, committed, in_flight):
        # One HEAD per key removed: the work follows the keys added since the last run, not history.
        if store.head(layout.manifest_name(prefix, r)) is None:
            continue
        if not dry_run:
            instance.delete_dynamic_partition(names.partitions(topic), r.key)
        removed += 1
    return removed, len(keys) - removed


def delete_runs(instance: DagsterInstance, policy: retention.Policy, dry_run: bool, skip_run_id: str | None = None) -> int:
    """Delete the finished runs the policy lets go, with their events, compute logs and event-log file."""
    now = time.time()
    doomed = list(retention.deletable_runs(_finished_runs(instance), policy, now))
    if dry_run:
        return len(doomed)
    for run_id in doomed:
        if run_id == skip_run_id:
            continue
        instance.delete_run(run_id)  # the run record and its events (materialisations included)
        instance.compute_log_manager.delete_logs(prefix=[run_id])
        shard = event_log_shard(instance, run_id)
        if shard and os.path.exists(shard):
            os.remove(shard)
    return len(doomed)


def _finished_runs(instance: DagsterInstance):
    """Every finished run, newest first, a page at a time."""
    cursor = None
    while True:
        records = instance.get_run_records(RunsFilter(statuses=_FINISHED), limit=_PAGE, cursor=cursor)
        for rec in records:
            run = rec.dagster_run
            yield retention.RunInfo(
                run.run_id, run.job_name, True, run.status == DagsterRunStatus.FAILURE, rec.create_timestamp.timestamp(),
                run.tags.get(PARTITION_NAME_TAG),
            )
        if len(records) < _PAGE:
            return
        cursor = records[-1].dagster_run.run_id


def _keys_in_flight(instance: DagsterInstance) -> set[str]:
    """Partition keys of runs queued, starting or running: never pruned under a run."""
    runs = instance.get_runs(RunsFilter(statuses=_UNFINISHED))
    return {r.tags[PARTITION_NAME_TAG] for r in runs if PARTITION_NAME_TAG in r.tags}
