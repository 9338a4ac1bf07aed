"""Everything pending of a topic as ONE Dagster backfill (Matos' `batch -1 -1` in one command).

    .venv/bin/python -m matos_dagster backfill demo [--partition P] [--wait]

or, in the UI, the `backfill` job from the Launchpad (config: the topic). Both add the pending
ranges as partition keys (the `add_ranges` op, the same cut as `add-ranges`), then record one
asset backfill of exactly those keys in the instance. The daemon (`make run`, `dg dev`) runs it
like a backfill launched from the asset's page: one run per range through the run queue, each
range its own partition with its own materialisation and metadata, and the backfill's page
(Runs -> Backfills) shows its progress per partition.

Order: Dagster does not promise an order among a backfill's runs (1.13 requests them sorted by
partition key, which is offset order within a topic partition, but the queue starts two at once
and their processes race to their first step). The archive is written in offset order anyway:
runs of one topic partition take turns (turns.py), and the run that has the turn first archives
the pending ranges below its own (offset_order.py), so the ranges' manifests and commits come in
offset order per partition; the later runs of those ranges only verify them. Nothing waits for a
run the queue has not started.
"""

import time
from dataclasses import dataclass
from typing import Any, Callable

from dagster import (
    AssetRecordsFilter,
    DagsterInstance,
    DagsterRunStatus,
    In,
    MetadataValue,
    OpExecutionContext,
    RunsFilter,
    in_process_executor,
    job,
    op,
)

from matos_dagster.core.offsets.ranges import parse_key
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dagster_compat import backfill_status, submit_asset_backfill
from matos_dagster.names import DEFAULT, Names

JOB = "backfill"
OP = "submit_backfill"
TOPIC_TAG = "matos/backfill_of"
BACKFILL_TAG = "dagster/backfill"  # Dagster's tag on every run of a backfill


def submit(instance: DagsterInstance, asset_graph, topic: TopicConfig, keys: list[str], names: Names = DEFAULT) -> str:
    """One asset backfill of these (added) keys of `topic`'s archive asset; its id."""
    title = f"{topic.name}: {len(keys)} pending range{'s' if len(keys) != 1 else ''}"
    return submit_asset_backfill(instance, asset_graph, names.asset_key(topic), sorted(keys),
                                 {TOPIC_TAG: topic.name, **names.run_tags}, title)


def daemon_running(instance: DagsterInstance) -> bool:
    """Whether a daemon that runs backfills heartbeats for this instance (else a backfill waits)."""
    status = instance.get_daemon_statuses(["BACKFILL"]).get("BACKFILL")
    return bool(status and status.healthy)


@dataclass(frozen=True)
class Outcome:
    key: str
    run_id: str | None
    status: str  # the run's status, or "NOT LAUNCHED"
    records: int | None  # of the range's materialisation, when it succeeded


def wait(instance: DagsterInstance, backfill_id: str, poll_s: float = 2.0, say=print) -> str:
    """Wait until the backfill has ended; its final status. Progress is said as runs end."""
    seen: set[str] = set()
    while True:
        status, ended = backfill_status(instance, backfill_id)
        runs = instance.get_runs(filters=RunsFilter(tags={BACKFILL_TAG: backfill_id}))
        for run in runs:
            if run.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED) \
                    and run.run_id not in seen:
                seen.add(run.run_id)
                say(f"  {run.tags.get('dagster/partition')}: {run.status.value} (run {run.run_id})")
        if ended:
            return status
        time.sleep(poll_s)


def outcomes(instance: DagsterInstance, backfill_id: str, topic: TopicConfig, keys: list[str],
             names: Names = DEFAULT) -> list[Outcome]:
    """Each key's last run in the backfill, and its records if it was archived; in key order."""
    runs = instance.get_runs(filters=RunsFilter(tags={BACKFILL_TAG: backfill_id}))  # newest first
    last = {}
    for run in runs:
        last.setdefault(run.tags.get("dagster/partition"), run)
    out = []
    for key in sorted(keys):
        run = last.get(key)
        records = None
        if run is not None and run.status == DagsterRunStatus.SUCCESS:
            found = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=names.asset_key(topic), asset_partitions=[key]), limit=1).records
            if found:
                records = found[0].asset_materialization.metadata["records"].value
        out.append(Outcome(key, run.run_id if run else None, run.status.value if run else "NOT LAUNCHED", records))
    return out


def backfill_job(topics: list[TopicConfig], add_ranges, asset_graph: Callable[[], Any], names: Names = DEFAULT):
    """The UI's one launch: the `add_ranges` job's op, then one backfill of the keys it added.

    `asset_graph()` gives the code location's asset graph, which a backfill names: handed in by
    definitions.py, as an op run in process has no repository to ask."""
    by_name = {t.name: t for t in topics}
    add = add_ranges.graph.node_dict[names.of("add_range_keys")].definition

    @op(name=names.of(OP), ins={"keys": In(list)}, description="Record one backfill of the added keys; the daemon runs it.")
    def _submit(context: OpExecutionContext, keys: list) -> str:
        if not keys:
            context.log.info("nothing pending: no backfill")
            return ""
        topic = by_name[parse_key(keys[0]).topic]  # the op before checked the topic
        backfill_id = submit(context.instance, asset_graph(), topic, keys, names)
        context.log.info(f"backfill {backfill_id}: {len(keys)} ranges of {topic.name}; progress in Runs -> Backfills")
        context.add_output_metadata({"backfill_id": backfill_id, "keys": MetadataValue.json(sorted(keys)),
                                     "count": len(keys)})
        return backfill_id

    @job(name=names.of(JOB), tags=names.run_tags, executor_def=in_process_executor, description="Archive everything pending of a topic as one backfill (Matos' `batch -1 -1`).")
    def _job():
        _submit(add())

    return _job
