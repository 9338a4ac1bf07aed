"""A run's many materialisations stored as Dagster's event batches, not one by one.

An `archive_ranges` run of a busy estate reports a thousand ranges; `context.log_event` stores
each in transactions of its own (on sqlite 11 ms of CPU apiece). Dagster stores events in batches
when DAGSTER_EVENT_BATCH_SIZE is set and the events carry a batch id, as the materialisations of
a run over a range of partitions do: these get one here. The instance's storage decides what a
batch costs: the project's sqlite (instance_storage.py) one transaction per shard for the whole
batch; PostgreSQL's one insert a batch, but it records only the batch's last event as its
asset's latest, so there each asset's materialisations are a batch of their own.

Dagster offers no public call for it: the op context's event list is appended to as
`log_event` does. Where that is not there (another Dagster), each is logged with `log_event`.
"""

from __future__ import annotations

import os

from dagster import AssetMaterialization, OpExecutionContext

from matos_dagster.instance_storage import BatchedSqliteEventLogStorage

BATCH_SIZE = "DAGSTER_EVENT_BATCH_SIZE"


def log_materialisations(context: OpExecutionContext, materialisations: list[AssetMaterialization]) -> None:
    """Each of `materialisations` logged as `context.log_event` would, in as few batches as the
    instance's storage allows."""
    step, events = getattr(context, "_step_execution_context", None), getattr(context, "_events", None)
    try:
        from dagster._core.events import DagsterEvent, DagsterEventBatchMetadata, generate_event_batch_id
    except ImportError:
        step = None
    if step is None or not isinstance(events, list):
        for m in materialisations:
            context.log_event(m)
        return
    # Read when the events are stored, after the op: this run's process only (a run worker of its own).
    os.environ.setdefault(BATCH_SIZE, "10000")
    whole = isinstance(context.instance.event_log_storage, BatchedSqliteEventLogStorage)
    batches: dict = {}
    for m in materialisations:
        batches.setdefault(None if whole else m.asset_key, []).append(m)
    for batch in batches.values():
        batch_id = generate_event_batch_id()
        for i, m in enumerate(batch):
            events.append(DagsterEvent.asset_materialization(step, m, DagsterEventBatchMetadata(batch_id, i == len(batch) - 1)))
