"""The archive as a library: `archive_definitions` builds its Dagster definitions for given topics and
connections, so that it lives in a project of one's own beside other assets (the `KafkaArchive`
component builds them too; the project's own definitions.py builds them from the MATOS_ settings).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import DagsterInvalidConfigError, Definitions, ExecutorDefinition, in_process_executor

from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import monitor_check, monitor_job
from matos_dagster.assets.windows import summary_asset, windows_asset, windows_automation
from matos_dagster.core import topics as topics_file
from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.errors import KafkaUnavailable
from matos_dagster.core.setting_kinds import Cron, Whole
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig
from matos_dagster.jobs.archive_ranges import archive_ranges_job
from matos_dagster.jobs.backfill import backfill_job
from matos_dagster.jobs.compact import compact_job, compact_schedule
from matos_dagster.jobs.expire import expire_job, expire_schedule
from matos_dagster.jobs.forget import forget_job
from matos_dagster.jobs.iceberg import iceberg_job
from matos_dagster.jobs.load import load_job
from matos_dagster.jobs.loss import acknowledge_loss_job
from matos_dagster.jobs.ranges import add_ranges_job
from matos_dagster.jobs.restore import restore_job
from matos_dagster.jobs.retention import retention_job, retention_schedule
from matos_dagster.jobs.verify import verify_job
from matos_dagster.names import Names
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource
from matos_dagster.sensors.days import days_sensor
from matos_dagster.sensors.lag import BUSY_INTERVAL_S, lag_sensor
from matos_dagster.sensors.monitor import monitor_sensor

log = logging.getLogger(__name__)

LISTING_TIMEOUT_S = 10  # at most this long for the pattern's topics when the definitions load


@dataclass(frozen=True)
class Built:
    """What `archive_definitions` built an archive of: what `matos --archive NAME` needs beside the
    definitions (cli/archive.py), which keep no trace of the topics file they were made from."""

    names: Names
    topic_set: TopicSet
    topics: list[TopicConfig]  # those with assets
    group: str


BUILT: dict[str, Built] = {}  # by archive name, the last built in this process


def archive_definitions(
    topics: TopicSet | str | Path | Mapping[str, Any],
    kafka: KafkaResource,
    swift: SwiftResource,
    spark: SparkResource,
    *,
    name: str = "",
    group: str = "archive",
    sensor_interval_s: int = 30,
    monitor_interval_s: int = 300,
    retention_cron: str = "7 * * * *",
    compact_cron: str = "37 * * * *",
    expire_cron: str = "17 3 * * *",
    topics_at_load: Sequence[TopicConfig] | None = None,
    executor: ExecutorDefinition | None = in_process_executor,
) -> Definitions:
    """The archive of `topics` from `kafka` into `swift`, moved by `spark`, as Dagster definitions.

    Assets (an archive asset per topic, partitioned by offset ranges, with its monitor check; a topic's
    days), the jobs (`archive_ranges`, `add_ranges`, `backfill`, `restore`, `verify`, `compact`,
    `retention`, `acknowledge_loss`, `iceberg_table`, `monitor_checks`, `load`, `forget`), the sensors (`lag`,
    `monitor`, `days`, `event_time_automation`), the schedules and the three resources. Merge them
    with your own (`Definitions.merge`), or return them from a `@definitions` function. Nothing is
    read from the environment or the network when this module is imported; building reads Kafka's
    topic list only if the topics have patterns (below).

    Every name is derived from `name`, so that two archives (two Kafka clusters, or two containers)
    live side by side in one deployment: with `name="eu"` the asset keys are `eu/archive_<topic>`,
    the jobs, sensors and schedules `eu_archive_ranges`, `eu_lag`, ..., the resource keys `eu_kafka`,
    `eu_swift`, `eu_spark`, the dynamic partitions `eu_archive_<topic>_ranges` and the group of the
    days `eu_event_time`. With the default `""` they are those of the project's own definitions.

    Settings the runs and sensors read at run time stay `MATOS_` environment variables of the
    processes that run them: `MATOS_RUN_MAX_RANGES`, `MATOS_HEARTBEAT_S`, `MATOS_DEAD_RUN_AFTER_S`,
    the `MATOS_KEEP_*` of the retention job, the `MATOS_SCHEMA_REGISTRY_*` of typed topics, the
    `MATOS_ICEBERG_*`, `MATOS_S3_*` and `MATOS_NATIVE_READER` (each has a default).

    Args:
        topics: What to archive: a `TopicSet` (`matos_dagster.core.topics.load`), the path of a
            topics file, or a topics file's document as a dict (`{"topics": [{"name": "orders"}],
            "defaults": {...}}`), every key of the topics file allowed.
        kafka: The Kafka cluster, e.g. `KafkaResource(bootstrap_servers=EnvVar("KAFKA_SERVERS"), ...)`.
        swift: The Swift container the archive is written to.
        spark: Where the archive's Spark tasks run (a Spark Connect server, or a master).
        name: The archive's name, from which every Dagster name is derived (letters, digits, `_`).
        group: The asset group of the archive assets.
        sensor_interval_s: Seconds between two ticks of the lag, monitor and days sensors; the
            lag sensor also asks Kafka at its first tick after a run of its ranges ended (it ticks
            every 10 s, or this if less).
        monitor_interval_s: The oldest a topic's monitor verdict may be, in seconds.
        retention_cron: When the `retention` job prunes old partition keys and runs.
        compact_cron: When the `compact` job merges small archived ranges into large ones.
        expire_cron: When the `expire` job removes records older than each topic's `archive_retention_days`.
        topics_at_load: The topics that get their assets now; default: the named topics and those
            of Kafka that a pattern matches, listed once with `kafka` (10 s at most; without an
            answer, the named ones, said in a warning). The lag sensor archives a topic a pattern
            matches from the tick after it is created, whatever this says; its assets come with the
            next load of the code location.
        executor: The executor of the assets' runs; `None` leaves it to your project (the
            archive's jobs run in process whatever it is, as Spark is better started once a run).

    Returns:
        The archive's definitions.

    Raises:
        ValueError: a name, interval or cron that cannot be used, in one line naming it.
        matos_dagster.core.topics.TopicsFileError: topics that cannot be archived, in one line.
    """
    names = Names(name)
    # The MATOS_ settings' own kinds check the arguments that stand for them.
    seconds = Whole(unit="seconds")
    for what, value, kind in (("sensor_interval_s", sensor_interval_s, seconds),
                              ("monitor_interval_s", monitor_interval_s, seconds),
                              ("retention_cron", retention_cron, Cron()), ("compact_cron", compact_cron, Cron()),
                              ("expire_cron", expire_cron, Cron())):
        try:
            if isinstance(value, bool) or not isinstance(value, str if isinstance(kind, Cron) else int):
                raise ValueError
            kind.check(str(value))
        except ValueError:
            raise ValueError(f"{what} is {value!r}: it takes {kind.takes}") from None
    topic_set = as_topic_set(topics)
    listed = list(topics_at_load) if topics_at_load is not None else matched_now(topic_set, kafka)
    timed = [t for t in listed if t.time_window != "none"]
    checks = [monitor_check(t, names) for t in listed]
    add_ranges = add_ranges_job(topic_set, names)
    retention = retention_job(topic_set, names)
    compact = compact_job(topic_set, names)
    expire = expire_job(topic_set, names)
    defs: Definitions | None = None

    def asset_graph():  # the backfill job's: the graph of these definitions, once they are made
        return defs.resolve_asset_graph()

    defs = Definitions(
        assets=[archive_asset(t, names, group) for t in listed] + [windows_asset(t, names) for t in timed]
        + [summary_asset(t, names) for t in timed if t.windows_summary],
        asset_checks=checks,
        jobs=[load_job(names), archive_ranges_job(topic_set, names), add_ranges,
              backfill_job(topic_set, add_ranges, asset_graph, names), acknowledge_loss_job(topic_set, names),
              restore_job(listed, names), verify_job(topic_set, names), retention, compact,
              iceberg_job(topic_set, names), monitor_job(checks, names), forget_job(topic_set, names), expire],
        sensors=[lag_sensor(topic_set, sensor_interval_s, names=names, busy_interval_s=BUSY_INTERVAL_S),
                 monitor_sensor(topic_set, monitor_interval_s, sensor_interval_s, names=names)]
        # A pattern may match a topic with days at any tick: the sensor then reports its windows.
        + ([days_sensor(topic_set, sensor_interval_s, names=names), windows_automation(sensor_interval_s, names)]
           if timed or any(p.settings.time_window != "none" for p in topic_set.patterns) else []),
        schedules=[retention_schedule(retention, retention_cron, names), compact_schedule(compact, compact_cron, names),
                   expire_schedule(expire, expire_cron, names)],
        resources={names.of("kafka"): kafka, names.of("swift"): swift, names.of("spark"): spark},
        executor=executor,
    )
    BUILT[names.archive] = Built(names, topic_set, listed, group)
    return defs


def as_topic_set(topics: TopicSet | str | Path | Mapping[str, Any], base: Path | None = None) -> TopicSet:
    """`topics` as a TopicSet: a topics file's path is read, a document parsed (schema files relative to `base`)."""
    if isinstance(topics, TopicSet):
        return topics
    if isinstance(topics, (str, Path)):
        return topics_file.load(topics)
    if isinstance(topics, Mapping):
        return topics_file.parse(dict(topics), base=base)
    raise TypeError(f"topics is a {type(topics).__name__}: give a TopicSet, a topics file's path or its document "
                    "(a dict with `topics:`)")


def matched_now(topic_set: TopicSet, kafka: KafkaResource) -> list[TopicConfig]:
    """The named topics, and those of the cluster that a pattern matches now."""
    if not topic_set.patterns:
        return list(topic_set)
    try:
        client = kafka.process_config_and_initialize()  # its EnvVar settings, read now
        client = client.model_copy(update={"timeout_s": min(LISTING_TIMEOUT_S, client.timeout_s)})
        return topic_set.resolve(many.topics(client)).topics
    except (KafkaUnavailable, DagsterInvalidConfigError) as e:
        unset = re.search(r'environment variable "(\w+)" which is not set', str(e))
        why = f"environment variable {unset.group(1)} is not set" if unset else str(e).splitlines()[0]
        log.warning(f"the topics the patterns match are not known now ({why}); the lag sensor archives them "
                    "meanwhile, and their assets appear at the next load of the code location")
        return list(topic_set)
