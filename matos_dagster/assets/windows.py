"""A topic's event-time windows as Dagster partitions: `days_<topic>` (or `hours_<topic>`), each
partition materialised once the day is completely archived (core/days/completeness.py says
when), and again when late records of it are archived (a new data version: what depends on
the day is then stale, and automation runs it again).

The days sensor (sensors/days.py) evaluates every topic's windows and reports each window that
completes as its partition's materialisation, without a run; the asset itself, materialised from
the UI, reads the window's record and says the same of it (`window_result`). `summary_<topic>` (a topic
with `windows_summary: true`) is an example of work that depends on a day: it reads the day's
records straight from the ranges the record names.
"""


import time

import pyarrow.compute as pc
from dagster import (
    AssetExecutionContext,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DailyPartitionsDefinition,
    DataVersion,
    DefaultSensorStatus,
    Failure,
    HourlyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    TableColumn,
    TableRecord,
    TableSchema,
    TimeWindowPartitionsDefinition,
    asset,
)

from matos_dagster.core.days import evaluate, windows
from matos_dagster.core.expire import days as expire_days
from matos_dagster.core.expire import run as expire_run
from matos_dagster.core.days.completeness import Rules
from matos_dagster.core.days.read import WindowNotComplete, read_window, window_records
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig
from matos_dagster.names import DEFAULT, Names

_COLUMNS = TableSchema(columns=[
    TableColumn("partition", "int"), TableColumn("records", "int"), TableColumn("bytes", "int"),
    TableColumn("first_offset", "int"), TableColumn("last_offset", "int"), TableColumn("late", "int"),
    TableColumn("ranges", "string"), TableColumn("lost", "string"),
])


def windows_partitions(topic: TopicConfig) -> TimeWindowPartitionsDefinition:
    if topic.time_window == "hour":
        return HourlyPartitionsDefinition(start_date=f"{topic.windows_start}-00:00", timezone="UTC")
    return DailyPartitionsDefinition(start_date=topic.windows_start, timezone="UTC")


def rules(topic: TopicConfig) -> Rules:
    return Rules(length_ms=windows.window_ms(topic.time_window), allowed_lateness_ms=int(topic.allowed_lateness_s * 1000),
                 idle_ms=int(topic.idle_s * 1000), future_margin_ms=int(topic.future_margin_s * 1000),
                 first_ms=windows.parse(topic.windows_start, windows.DAY_MS)[0])


def windows_asset(topic: TopicConfig, names: Names = DEFAULT):
    @asset(
        name=topic.windows_asset_name,
        key_prefix=names.key_prefix,
        partitions_def=windows_partitions(topic),
        group_name=names.of(GROUP),
        required_resource_keys=names.keys("swift"),
        description=(f"The {topic.time_window}s of `{topic.name}` (records' timestamps, UTC) that are completely "
                     "archived: a partition is materialised when its window is complete, and again when late "
                     "records of it are archived."),
    )
    def _window(context: AssetExecutionContext) -> MaterializeResult:
        cutoff = expire_run.cutoff(topic, int(time.time() * 1000))
        if expire_days.is_expired(topic, context.partition_key, cutoff):  # core/expire/: its records are gone
            return MaterializeResult(metadata={"expired": True, "records": 0, "stamped_before": MetadataValue.int(cutoff)})
        with names.resource(context, "swift").store() as store:
            prefix = layout.join(store.params.prefix, topic.prefix)
            try:
                # The newest incarnation's record of it (a topic created again has one per incarnation).
                doc = window_records(store, prefix, topic.name, context.partition_key)[-1][1]
            except WindowNotComplete as e:
                raise Failure(str(e)) from None
        return window_result(doc)

    return _window


def window_result(doc: dict) -> MaterializeResult:
    """What a complete window's record says it holds, as its materialisation: by the asset's own
    run (the UI) and by the days sensor's report alike."""
    per = evaluate.summary(doc)
    rows = [TableRecord({"partition": p, "records": s["records"], "bytes": s["bytes"],
                         "first_offset": -1 if s["first_offset"] is None else s["first_offset"],
                         "last_offset": -1 if s["last_offset"] is None else s["last_offset"],
                         "late": s["late"], "ranges": ", ".join(s["ranges"]),
                         "lost": ", ".join(f"[{a}, {b})" for a, b in s["lost"])}) for p, s in per.items()]
    return MaterializeResult(
        metadata={
            "records": MetadataValue.int(sum(s["records"] for s in per.values())),
            "bytes": MetadataValue.int(sum(s["bytes"] for s in per.values())),
            "late_records": MetadataValue.int(sum(s["late"] for s in per.values())),
            # Offsets acknowledged lost that may have held records of the window (acknowledge_loss).
            "lost_offsets": MetadataValue.int(sum(b - a for s in per.values() for a, b in s["lost"])),
            "partitions": MetadataValue.table(rows, schema=_COLUMNS),
            "window": MetadataValue.json({"start_ms": doc["start"], "end_ms": doc["end"]}),
        },
        data_version=DataVersion(evaluate.version_of(doc)),
    )


GROUP = "event_time"


def windows_automation(interval_s: int, names: Names = DEFAULT) -> AutomationConditionSensorDefinition:
    """Evaluates the automation conditions of the `event_time` group (the summaries, and a user's own
    assets placed in it), running by default: Dagster's own default automation sensor starts stopped,
    and what depends on a day should run when the day completes without anyone turning it on. A
    named archive's group is `<name>_event_time`: an asset may have one automation sensor only."""
    group = names.of(GROUP)
    return AutomationConditionSensorDefinition(
        names.of("event_time_automation"), target=AssetSelection.groups(group),
        default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=interval_s,
        description=f"Runs the assets of group `{group}` whose automation condition asks for it (what depends on "
                    "a day, when the day completes or changes).")


def summary_asset(topic: TopicConfig, names: Names = DEFAULT):
    """An example of a user's own asset on a day, deployed for a topic with `windows_summary: true`:
    it depends on the day and runs when it is complete (or changes), reading the day's records
    directly (all of them into memory: an example, not a tool for a large day)."""
    name = "summary_" + topic.asset_name.removeprefix("archive_")

    @asset(
        name=name,
        key_prefix=names.key_prefix,
        partitions_def=windows_partitions(topic),
        deps=[names.windows_key(topic)],
        # Eager, for every day and not only the latest: a late record gives an older day a new version.
        automation_condition=AutomationCondition.eager().without(AutomationCondition.in_latest_time_window()),
        group_name=names.of(GROUP),
        description=f"Per {topic.time_window} of `{topic.name}`: records, bytes and keys, read from the archive "
                    "once the window is complete (an example of depending on a window).",
        required_resource_keys=names.keys("swift"),
    )
    def _summary(context: AssetExecutionContext) -> MaterializeResult:
        with names.resource(context, "swift").store() as store:
            prefix = layout.join(store.params.prefix, topic.prefix)
            table = read_window(store, prefix, topic.name, context.partition_key)
        keys = table["key"].unique() if table.num_rows else []
        return MaterializeResult(metadata={
            "records": MetadataValue.int(table.num_rows),
            "distinct_keys": MetadataValue.int(len(keys)),
            "value_bytes": MetadataValue.int(pc.sum(pc.binary_length(table["value"])).as_py() or 0),
        })

    return _summary
