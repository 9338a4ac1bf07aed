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
    AssetChecksDefinition,
    AssetCheckSeverity,
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

from matos_dagster.core.days import evaluate as days_evaluate
from matos_dagster.core.monitor import marks as monitor_marks
from matos_dagster.core.monitor import report as monitor
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dagster_compat import AssetCheckExecutionRecordStatus
from matos_dagster.resources import KafkaResource, SwiftResource

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
        TableColumn("acknowledged_loss", "string"),
        TableColumn("not_decoded", "int"),  # a typed topic's records that did not decode (raw bytes kept)
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
        with kafka.kept_clients():  # one admin and one consumer for the three questions
            parts = kafka.partitions(topic.name)
            marks = kafka.watermarks(topic.name, parts)
            committed = kafka.committed(topic.name, parts, topic.group)
        reports, started = [], {}
        with swift.store() as store:
            prefix = layout.join(store.params.prefix, topic.prefix)
            where = f"{store.container}/{prefix}"
            history, known = _history(context, check_key, where)
            # Incremental: each partition is listed from where the last evaluation (on this
            # instance, or any: the archive's mark) found it contiguous and sound, so an
            # evaluation costs the same at any history.
            marked = {p: monitor_marks.read_mark(store, prefix, topic.name, p) for p in parts}
            entries, given = {}, {}
            for p in parts:
                archive = PartitionArchive(store, prefix, topic.name, p)
                given[p], started[p] = monitor.start_from(archive, known.get(p), marked[p], marks[p][1])
                entries[p] = monitor.read_entries(archive, given[p], marks[p][1])
            listings = store.listings
            typed = topic.key_format != "none" or topic.value_format != "none"
            counts = {p: monitor.typed_counts(PartitionArchive(store, prefix, topic.name, p), entries[p])
                      for p in parts} if typed else {}
            for p in parts:
                low, high = marks[p]
                position = committed[p] if committed[p] is not None else low
                oldest = kafka.timestamp_at(topic.name, p, position) if high > position else None
                reports.append(
                    monitor.evaluate_partition(
                        topic, p, low, high, committed[p], entries[p], oldest, history.get(p, []), now, given[p],
                        counts.get(p),
                    )
                )
            event_time = days_evaluate.counts(store, prefix, topic.name) if topic.time_window != "none" else None
            for r in reports:  # written when it moves only
                if r.known is not None and r.known != marked[r.partition]:
                    monitor_marks.write_mark(store, prefix, topic.name, r.partition, r.known)
        status = monitor.overall(reports)
        problems = "; ".join(f"p{r.partition}: {', '.join(r.reasons)}" for r in reports if r.reasons)
        acknowledged = "; ".join(f"p{r.partition} {_spans(r.acknowledged)}" for r in reports if r.acknowledged)
        description = f"{status}: " + (problems or "all partitions archived in order, lag normal")
        if acknowledged:
            description += f" (acknowledged loss: {acknowledged})"
        not_decoded = sum(n for r in reports for n in r.not_decoded.values())
        if not_decoded:
            description += f" ({not_decoded} records did not decode: raw bytes archived, typed columns null)"
        return AssetCheckResult(
            passed=status == monitor.OK,
            severity=AssetCheckSeverity.WARN if status == monitor.WARN else AssetCheckSeverity.ERROR,
            description=description,
            metadata={
                "status": MetadataValue.text(status),
                "partitions": MetadataValue.table([_row(r) for r in reports], schema=_COLUMNS),
                "total_lag_records": MetadataValue.int(sum(r.lag_records for r in reports)),
                "max_lag_seconds": MetadataValue.float(round(max((r.lag_seconds for r in reports), default=0.0), 1)),
                "archived_offsets": MetadataValue.int(sum(r.archived_offsets for r in reports)),
                "archived_ranges": MetadataValue.int(sum(r.archived_ranges for r in reports)),
                "acknowledged_lost_offsets": MetadataValue.int(
                    sum(b - a for r in reports for a, b in r.acknowledged)),
                "partitions_in_error": MetadataValue.int(sum(r.status == monitor.ERROR for r in reports)),
                **_decode_metadata(reports),
                # The topic's days (assets/windows.py): records of a complete day archived late, records
                # stamped beyond the future margin (in their days), without a timestamp or outside the days.
                **({k: MetadataValue.int(v) for k, v in event_time.items() if k != "complete_to_ms"}
                   if event_time else {}),
                "swift_listing_requests": MetadataValue.int(listings),
                # Per partition: from what this evaluation started (monitor.start_from).
                "started_from": MetadataValue.json({str(p): started[p] for p in parts}),
                "samples": MetadataValue.json({str(r.partition): [now, r.committed, r.lag_records] for r in reports}),
                "archive_state": MetadataValue.json({
                    "where": where,
                    "partitions": {str(r.partition): r.known.to_json() for r in reports if r.known is not None},
                }),
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


def _history(
    context: AssetCheckExecutionContext, check_key: AssetCheckKey, where: str
) -> tuple[dict[int, list[monitor.Sample]], dict[int, monitor.Known]]:
    """From the check's own metadata of its last evaluations: each partition's samples, oldest
    first, and what the latest evaluation knew of its archive (if it looked at the same one)."""
    records = context.instance.event_log_storage.get_asset_check_execution_history(
        check_key,
        limit=monitor.WINDOW - 1,
        status={AssetCheckExecutionRecordStatus.SUCCEEDED, AssetCheckExecutionRecordStatus.FAILED},
    )
    out: dict[int, list[monitor.Sample]] = {}
    known: dict[int, monitor.Known] = {}
    state_seen = False
    for rec in records:  # newest first
        evaluation = rec.event.asset_check_evaluation if rec.event else None
        meta = evaluation.metadata if evaluation else {}
        state = meta.get("archive_state")
        if state is not None and not state_seen:
            state_seen = True
            if state.value.get("where") == where:
                for p, doc in state.value.get("partitions", {}).items():
                    k = monitor.Known.from_json(doc)
                    if k is not None:
                        known[int(p)] = k
        samples = meta.get("samples")
        if samples is None:
            continue
        for p, (t, committed, lag) in samples.value.items():
            out.setdefault(int(p), []).insert(0, monitor.Sample(t, committed, lag))
    return out, known


def _decode_metadata(reports: list[monitor.PartitionReport]) -> dict:
    """A typed topic's `<side>_decoded` and `<side>_not_decoded` records, over its partitions."""
    out = {}
    for side in sorted({s for r in reports for s in r.decoded}):
        out[f"{side}_decoded"] = MetadataValue.int(sum(r.decoded.get(side, 0) for r in reports))
        out[f"{side}_not_decoded"] = MetadataValue.int(sum(r.not_decoded.get(side, 0) for r in reports))
    return out


def _spans(xs) -> str:
    return ", ".join(f"[{a}, {b})" for a, b in xs)


def _row(r: monitor.PartitionReport) -> TableRecord:
    spans = _spans
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
            "acknowledged_loss": spans(r.acknowledged),
            "not_decoded": sum(r.not_decoded.values()),
            "why": "; ".join(r.reasons),
        }
    )
