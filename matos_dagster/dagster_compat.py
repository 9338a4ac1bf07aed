"""The only place that imports Dagster's private modules (`dagster._...`): kept tiny.

Each name here has no public equivalent in Dagster 1.13; if one moves, only this file changes.
"""

from dagster._core.definitions.data_version import DATA_VERSION_IS_USER_PROVIDED_TAG, DATA_VERSION_TAG
from dagster._core.scheduler.instigation import InstigatorType
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.tags import PARTITION_NAME_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG

__all__ = ["AssetCheckExecutionRecordStatus", "InstigatorType", "DATA_VERSION_IS_USER_PROVIDED_TAG", "DATA_VERSION_TAG", "PARTITION_NAME_TAG", "RUN_KEY_TAG", "SENSOR_NAME_TAG",
           "event_log_shard", "submit_asset_backfill", "backfill_status", "prune_check_history"]


def event_log_shard(instance, run_id: str) -> str | None:
    """The file of a run's own event log with SQLite storage (one file per run), else None.

    Deleting a run's events leaves that file behind, empty; run retention removes it too.
    """
    path_for_shard = getattr(instance.event_log_storage, "path_for_shard", None)
    return path_for_shard(run_id) if path_for_shard else None


def submit_asset_backfill(instance, asset_graph, asset_key, partition_keys: list[str], tags: dict, title: str) -> str:
    """Record an asset backfill of these partitions in the instance, as the UI's "Launch backfill"
    does (its GraphQL mutation is the only public way); the daemon runs it. Its id."""
    import time

    from dagster._core.execution.backfill import PartitionBackfill
    from dagster._core.utils import make_new_backfill_id

    backfill = PartitionBackfill.from_asset_partitions(
        backfill_id=make_new_backfill_id(), asset_graph=asset_graph, partition_names=partition_keys,
        asset_selection=[asset_key], backfill_timestamp=time.time(), tags=tags, dynamic_partitions_store=instance,
        all_partitions=False, title=title, description=None, run_config=None)
    instance.add_backfill(backfill)
    return backfill.backfill_id


def backfill_status(instance, backfill_id: str) -> tuple[str, bool]:
    """A backfill's status name (as the UI shows it) and whether it has ended."""
    from dagster._core.execution.backfill import BULK_ACTION_TERMINAL_STATUSES

    status = instance.get_backfill(backfill_id).status
    return status.value, status in BULK_ACTION_TERMINAL_STATUSES


def prune_check_history(instance, keys, keep: int) -> int:
    """Delete each check's evaluations reported without a run but its newest `keep`: their rows of
    the check's history and their events. Dagster bounds neither (its retention covers ticks only,
    and runs are deleted by the retention job, not runless events). The number deleted."""
    import sqlalchemy as db
    from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable as Executions
    from dagster._core.storage.event_log.schema import SqlEventLogStorageTable as Events

    storage = instance.event_log_storage
    if not hasattr(storage, "index_connection"):
        return 0  # not a SQL storage: nothing of ours to prune
    deleted = 0
    for key in keys:
        asset = key.asset_key.to_string()
        with storage.index_connection() as conn:
            old = conn.execute(
                db.select(Executions.c.id, Executions.c.evaluation_event_storage_id,
                          Executions.c.evaluation_event_timestamp)
                .where(Executions.c.asset_key == asset, Executions.c.check_name == key.name,
                       Executions.c.run_id == "")
                .order_by(Executions.c.id.desc()).limit(1_000_000).offset(keep)).fetchall()
            for i in range(0, len(old), 500):  # SQLite takes at most 999 parameters a statement
                chunk = old[i:i + 500]
                conn.execute(Executions.delete().where(Executions.c.id.in_([r[0] for r in chunk])))
                conn.execute(Events.delete().where(Events.c.id.in_([r[1] for r in chunk if r[1] is not None])))
        if old and event_log_shard(instance, "") is not None:
            # SQLite keeps each run's events in a file of their own, runless ones in that of run "":
            # a copy there too, with ids of its own and no asset key, stored by the same statement,
            # so with the same timestamp.
            with storage.run_connection("") as conn:
                for i in range(0, len(old), 500):
                    conn.execute(Events.delete().where(
                        Events.c.run_id == "", Events.c.dagster_event_type == "ASSET_CHECK_EVALUATION",
                        Events.c.timestamp.in_([r[2] for r in old[i:i + 500]])))
        deleted += len(old)
    return deleted
