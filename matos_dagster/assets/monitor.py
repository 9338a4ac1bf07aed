"""The monitor asset check of each archive asset, and what runs it.

The check is not partitioned: it judges the whole topic at once (partitioned checks are a
preview feature of Dagster 1.13). It runs on a schedule without archiving anything, and a
sensor runs it after every materialisation of the archive asset.
"""

import time

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetChecksDefinition,
    AssetKey,
    AssetSelection,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    MetadataValue,
    RunRequest,
    ScheduleDefinition,
    SensorDefinition,
    TableColumn,
    TableRecord,
    TableSchema,
    asset_check,
    asset_sensor,
    define_asset_job,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from matos_dagster import layout, monitor
from matos_dagster.archive import archived_ranges
from matos_dagster.resources import KafkaResource, SwiftResource
from matos_dagster.topics import TopicConfig

CHECK_NAME = "monitor"

_COLUMNS = TableSchema(
    columns=[
        TableColumn("partition", "int"),
        TableColumn("status", "string"),
        TableColumn("log_start", "int"),
        TableColumn("log_end", "int"),
        TableColumn("committed", "int"),
        TableColumn("archived_hwm", "int"),
        TableColumn("ranges", "int"),
        TableColumn("lag_records", "int"),
        TableColumn("lag_seconds", "float"),
        TableColumn("gaps", "string"),
        TableColumn("overlaps", "string"),
        TableColumn("lost", "string"),
        TableColumn("why", "string"),
    ]
)


def monitor_check(topic: TopicConfig) -> AssetChecksDefinition:
    asset_key = AssetKey(topic.asset_name)
    check_key = AssetCheckKey(asset_key, CHECK_NAME)

    @asset_check(
        asset=asset_key,
        name=CHECK_NAME,
        blocking=False,
        description=(
            f"Per partition of `{topic.name}`: offsets, archived high-water mark, lag, gaps, overlaps, "
            "data loss. OK, WARN (lag high and not shrinking) or ERROR (gap, overlap, loss, stall)."
        ),
    )
    def _monitor(context: AssetCheckExecutionContext, kafka: KafkaResource, swift: SwiftResource) -> AssetCheckResult:
        now = time.time()
        parts = kafka.partitions(topic.name)
        marks = kafka.watermarks(topic.name, parts)
        committed = kafka.committed(topic.name, parts, topic.group)
        history = _history(context, check_key)
        with swift.store() as store:
            prefix = layout.join(store.params.prefix, topic.prefix)
            ranges = {p: archived_ranges(store, prefix, topic.name, p) for p in parts}
        reports = []
        for p in parts:
            low, high = marks[p]
            position = committed[p] if committed[p] is not None else low
            oldest = kafka.timestamp_at(topic.name, p, position) if high > position else None
            reports.append(
                monitor.evaluate_partition(
                    topic, p, low, high, committed[p], ranges[p], oldest, history.get(p, []), now
                )
            )
        status = monitor.overall(reports)
        return AssetCheckResult(
            passed=status == monitor.OK,
            severity=AssetCheckSeverity.WARN if status == monitor.WARN else AssetCheckSeverity.ERROR,
            description=f"{status}: " + ("; ".join(f"p{r.partition}: {', '.join(r.reasons)}" for r in reports if r.reasons) or "all partitions archived in order, lag normal"),
            metadata={
                "status": MetadataValue.text(status),
                "partitions": MetadataValue.table([_row(r) for r in reports], schema=_COLUMNS),
                "total_lag_records": MetadataValue.int(sum(r.lag_records for r in reports)),
                "max_lag_seconds": MetadataValue.float(round(max((r.lag_seconds for r in reports), default=0.0), 1)),
                "archived_offsets": MetadataValue.int(sum(b - a for p in parts for a, b in ranges[p])),
                "archived_ranges": MetadataValue.int(sum(len(ranges[p]) for p in parts)),
                "partitions_in_error": MetadataValue.int(sum(r.status == monitor.ERROR for r in reports)),
                "samples": MetadataValue.json({str(r.partition): [now, r.committed, r.lag_records] for r in reports}),
            },
        )

    return _monitor


def monitor_job_name(topic: TopicConfig) -> str:
    return f"monitor_{topic.asset_name}"


def monitor_automation(
    topic: TopicConfig, check: AssetChecksDefinition, cron: str
) -> tuple[ScheduleDefinition, SensorDefinition]:
    """A schedule that runs the check alone, and a sensor that runs it after each archive run."""
    job = define_asset_job(monitor_job_name(topic), selection=AssetSelection.checks(check))
    schedule = ScheduleDefinition(
        name=f"{monitor_job_name(topic)}_schedule", job=job, cron_schedule=cron,
        default_status=DefaultScheduleStatus.RUNNING,
    )

    @asset_sensor(
        name=f"{monitor_job_name(topic)}_after_archive",
        asset_key=AssetKey(topic.asset_name),
        job=job,
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=15,
    )
    def _after_archive(context, asset_event):
        # One check run per archive run that materialised the asset.
        return RunRequest(run_key=f"after-{asset_event.run_id}")

    return schedule, _after_archive


def _history(context: AssetCheckExecutionContext, check_key: AssetCheckKey) -> dict[int, list[monitor.Sample]]:
    """This partition's samples of the last evaluations, oldest first, from the check's own metadata."""
    records = context.instance.event_log_storage.get_asset_check_execution_history(
        check_key,
        limit=monitor.WINDOW - 1,
        status={AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED},
    )
    out: dict[int, list[monitor.Sample]] = {}
    for rec in reversed(records):
        evaluation = rec.event.asset_check_evaluation if rec.event else None
        samples = evaluation.metadata.get("samples") if evaluation else None
        if samples is None:
            continue
        for p, (t, committed, lag) in samples.value.items():
            out.setdefault(int(p), []).append(monitor.Sample(t, committed, lag))
    return out


def _row(r: monitor.PartitionReport) -> TableRecord:
    spans = lambda xs: ", ".join(f"[{a}, {b})" for a, b in xs)  # noqa: E731
    return TableRecord(
        {
            "partition": r.partition,
            "status": r.status,
            "log_start": r.log_start,
            "log_end": r.log_end,
            "committed": r.committed if r.committed is not None else -1,
            "archived_hwm": r.ahwm if r.ahwm is not None else -1,
            "ranges": r.archived_ranges,
            "lag_records": r.lag_records,
            "lag_seconds": round(r.lag_seconds, 1),
            "gaps": spans(r.gaps),
            "overlaps": spans(r.overlaps),
            "lost": spans(r.lost),
            "why": "; ".join(r.reasons),
        }
    )
