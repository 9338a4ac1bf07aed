"""The only place that imports Dagster's private modules (`dagster._...`): kept tiny.

Each name here has no public equivalent in Dagster 1.13; if one moves, only this file changes.
"""

from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.tags import PARTITION_NAME_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG

__all__ = ["AssetCheckExecutionRecordStatus", "PARTITION_NAME_TAG", "RUN_KEY_TAG", "SENSOR_NAME_TAG",
           "event_log_shard"]


def event_log_shard(instance, run_id: str) -> str | None:
    """The file of a run's own event log with SQLite storage (one file per run), else None.

    Deleting a run's events leaves that file behind, empty; run retention removes it too.
    """
    path_for_shard = getattr(instance.event_log_storage, "path_for_shard", None)
    return path_for_shard(run_id) if path_for_shard else None
