"""The only place that imports Dagster's private modules (`dagster._...`): kept tiny.

Each name here has no public equivalent in Dagster 1.13; if one moves, only this file changes.
"""

from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.tags import PARTITION_NAME_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG

__all__ = ["AssetCheckExecutionRecordStatus", "PARTITION_NAME_TAG", "RUN_KEY_TAG", "SENSOR_NAME_TAG",
           "event_log_shard", "submit_asset_backfill", "backfill_status"]


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
