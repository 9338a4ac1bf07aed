"""Every metric the exporter serves: its name, kind, labels and HELP text, in one list.

The exporter (matos_dagster/exporter/) builds its samples from these entries and nothing else, and
`python -m matos_dagster.core.metrics.catalog` prints docs/reference/metrics.md's generated part
from them (a test compares the two), so a metric is documented the day it exists. Names follow
Prometheus' conventions: `matos_` first, the unit last (`_seconds`, `_bytes`), `_total` for counters.
No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass

PARTITION = ("archive", "topic", "partition")
TOPIC = ("archive", "topic")
ARCHIVE = ("archive",)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # gauge, counter or summary
    labels: tuple[str, ...]
    help: str
    source: str  # where its value comes from (the reference page's last column)


KAFKA = "Kafka (a few batched requests per scrape)"
CURSOR = "the lag sensor's cursor and ticks"
VERDICT = "the monitor's latest verdict"
RUNS = "Dagster's run storage (runs ended since the exporter started)"
EXPORTER = "the exporter itself"
RECORDS = "the archive's erasure and expiry records in Swift (listed at most once a minute)"

METRICS: list[Metric] = [
    Metric("matos_log_start_offset", "gauge", PARTITION, "Log start offset of the partition in Kafka.", KAFKA),
    Metric("matos_log_end_offset", "gauge", PARTITION, "Log end offset (high watermark) of the partition in Kafka.",
           KAFKA),
    Metric("matos_committed_offset", "gauge", PARTITION,
           "Offset the archive committed for the partition (everything below it is archived); -1 when none.", KAFKA),
    Metric("matos_lag_records", "gauge", PARTITION, "Records in Kafka not yet archived: log end minus the committed "
           "offset (or the log start when none).", KAFKA),
    Metric("matos_lag_seconds", "gauge", PARTITION, "Age of the oldest record not yet archived (now minus its "
           "timestamp), as of this scrape; 0 when none waits.", KAFKA),
    Metric("matos_batch_max_age_seconds", "gauge", TOPIC, "The topic's batch age (batch_age_s of the topics file): "
           "the lag sensor requests a range when the oldest waiting record is this old.", "the topics file"),
    Metric("matos_newest_archived_offset", "gauge", PARTITION, "Last offset of the newest range archived (of the "
           "ranges this exporter saw archived, or the topic's latest materialisation).", RUNS),
    Metric("matos_newest_archived_timestamp_seconds", "gauge", PARTITION, "When the newest range of the partition "
           "was archived (Unix time).", RUNS),
    Metric("matos_archived_records_total", "counter", PARTITION, "Records archived by the runs that ended since the "
           "exporter started.", RUNS),
    Metric("matos_archived_bytes_total", "counter", PARTITION, "Bytes written to Swift by the runs that ended since "
           "the exporter started.", RUNS),
    Metric("matos_undecodable_records", "gauge", PARTITION, "A typed topic's archived records whose key or value did "
           "not decode (kept as raw bytes).", VERDICT),
    Metric("matos_monitor_verdict", "gauge", PARTITION, "The monitor's verdict of the partition: 0 OK, 1 WARN, "
           "2 ERROR.", VERDICT),
    Metric("matos_monitor_verdict_age_seconds", "gauge", TOPIC, "Age of the topic's latest monitor verdict.",
           VERDICT),
    Metric("matos_lost_offsets", "gauge", PARTITION, "Offsets deleted from Kafka before they were archived, not "
           "acknowledged yet (`matos acknowledge-loss`).", VERDICT),
    Metric("matos_acknowledged_lost_offsets", "gauge", PARTITION, "Offsets recorded as lost in the archive "
           "(acknowledged).", VERDICT),
    Metric("matos_records_erased_total", "counter", PARTITION, "Records erased from the partition's archive by "
           "`matos forget` (in every log the topic's name had), from the erasures' records; 0 where none was.",
           RECORDS),
    Metric("matos_records_expired_total", "counter", PARTITION, "Records removed from the partition's archive by "
           "expiry by age, from the expiries' records; served for the partitions where some expired.", RECORDS),
    Metric("matos_waiting_for_operator", "gauge", PARTITION, "1 when the lag sensor no longer requests the "
           "partition's failed range by itself: an operator must fix the cause and re-run it.", CURSOR),
    Metric("matos_ranges_requested_total", "counter", ARCHIVE, "Ranges requested in the archive's batch runs "
           "created since the exporter started.", RUNS),
    Metric("matos_ranges_archived_total", "counter", ARCHIVE, "Ranges archived by the batch runs that ended since "
           "the exporter started.", RUNS),
    Metric("matos_ranges_failed_total", "counter", ARCHIVE, "Ranges of failed or canceled batch runs that were not "
           "archived.", RUNS),
    Metric("matos_runs_dead_total", "counter", ARCHIVE, "Batch runs judged dead (their heartbeat stopped) and "
           "failed.", RUNS),
    Metric("matos_batch_run_duration_seconds", "summary", ARCHIVE, "Duration of the archive's batch runs that "
           "ended, from start to end.", RUNS),
    Metric("matos_runs", "gauge", ("archive", "state"), "The archive's batch runs now queued or in progress.",
           "Dagster's run storage"),
    Metric("matos_oldest_range_waiting_seconds", "gauge", ARCHIVE, "Age of the oldest range requested and not yet "
           "archived; 0 when none.", CURSOR),
    Metric("matos_windows_complete_until_timestamp_seconds", "gauge", TOPIC, "End of the newest complete day (or "
           "hour) of a topic with time windows: its window asset's latest materialised partition (Unix time).",
           "the window assets' latest materialisations"),
    Metric("matos_compaction_backlog_offsets", "gauge", TOPIC, "Offsets archived and committed that compaction "
           "has not merged yet, summed over the topic's partitions: from where the latest compact run left each "
           "partition's unmerged ranges (its first archived offset before any) to its committed offset. Bounded "
           "while compaction runs; growing when it does not.", "the compact runs' outputs and the monitor's latest "
           "verdict"),
    Metric("matos_sensor_tick_duration_seconds", "gauge", ("archive", "sensor"), "Duration of the sensor's latest "
           "finished tick (lag, monitor).", CURSOR),
    Metric("matos_sensor_tick_age_seconds", "gauge", ("archive", "sensor"), "Age of the sensor's latest finished "
           "tick: how fresh what it decided is.", CURSOR),
    Metric("matos_up", "gauge", ("archive", "component"), "1 when the exporter's last refresh of the component "
           "(kafka, dagster, swift) succeeded within the scrape timeout; 0: the values served are the last known.",
           EXPORTER),
    Metric("matos_scrape_errors_total", "counter", ("archive", "component"), "Refreshes of the component that "
           "failed or went over the scrape timeout.", EXPORTER),
    Metric("matos_refresh_duration_seconds", "gauge", ("archive", "component"), "Duration of the component's "
           "latest refresh.", EXPORTER),
]

BY_NAME = {m.name: m for m in METRICS}


def reference() -> str:
    """The generated part of docs/reference/metrics.md, exactly (a test compares them)."""
    rows = ["| metric | type | labels | what | from |", "| --- | --- | --- | --- | --- |"]
    for m in METRICS:
        rows.append(f"| `{m.name}` | {m.kind} | {', '.join(f'`{x}`' for x in m.labels)} | {m.help} | {m.source} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
