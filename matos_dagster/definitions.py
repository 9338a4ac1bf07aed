"""The one `Definitions` of matos-dagster: assets, resources, jobs, sensors and checks.

Every setting reaches the resources here, through `EnvVar`, and nowhere else. Unset
settings take the defaults of `settings.py`, which point at the local stack.

The topics file names topics and patterns. Each topic has its assets; the topics a pattern
matches are listed from Kafka when the code location loads (a topic created later is archived
by the lag sensor at once, and has its assets from the next load of the code location).
"""

from __future__ import annotations

import logging
import os

from dagster import Definitions, EnvVar, in_process_executor

from matos_dagster.assets.archive import archive_asset
from matos_dagster.assets.monitor import monitor_check, monitor_job
from matos_dagster.assets.windows import summary_asset, windows_asset, windows_automation
from matos_dagster.core import settings, topics
from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.errors import KafkaUnavailable
from matos_dagster.jobs.archive_ranges import archive_ranges_job
from matos_dagster.jobs.backfill import backfill_job
from matos_dagster.jobs.compact import compact_job, compact_schedule
from matos_dagster.jobs.iceberg import iceberg_job
from matos_dagster.jobs.load import load
from matos_dagster.jobs.loss import acknowledge_loss_job
from matos_dagster.jobs.ranges import add_ranges_job
from matos_dagster.jobs.restore import restore_job
from matos_dagster.jobs.retention import retention_job, retention_schedule
from matos_dagster.jobs.verify import verify_job
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource
from matos_dagster.sensors.days import days_sensor
from matos_dagster.sensors.lag import lag_sensor
from matos_dagster.sensors.monitor import monitor_sensor

log = logging.getLogger(__name__)

settings.check()  # a bad setting is one line naming it, before any resource is built
settings.apply_defaults()

TOPIC_SET = topics.load(os.environ["MATOS_TOPICS_FILE"], default_group=os.environ["MATOS_KAFKA_GROUP"])


def _topics_at_load() -> list:
    """The named topics, and those of the cluster that a pattern matches now."""
    if not TOPIC_SET.patterns:
        return list(TOPIC_SET)
    kafka = KafkaResource(**{name: os.environ[f"MATOS_KAFKA_{name.upper()}"] for name in (
        "bootstrap_servers", "security_protocol", "sasl_mechanism", "username", "password", "ca_file", "group",
        "client_id")}, timeout_s=min(10, int(os.environ["MATOS_KAFKA_TIMEOUT_S"])))
    try:
        return TOPIC_SET.resolve(many.topics(kafka)).topics
    except KafkaUnavailable as e:
        log.warning(f"the topics the patterns match are not known now ({e}); the lag sensor archives them "
                    "meanwhile, and their assets appear at the next load of the code location")
        return list(TOPIC_SET)


TOPICS = _topics_at_load()

RESOURCES = {
    "kafka": KafkaResource(
        bootstrap_servers=EnvVar("MATOS_KAFKA_BOOTSTRAP_SERVERS"),
        security_protocol=EnvVar("MATOS_KAFKA_SECURITY_PROTOCOL"),
        sasl_mechanism=EnvVar("MATOS_KAFKA_SASL_MECHANISM"),
        username=EnvVar("MATOS_KAFKA_USERNAME"),
        password=EnvVar("MATOS_KAFKA_PASSWORD"),
        ca_file=EnvVar("MATOS_KAFKA_CA_FILE"),
        group=EnvVar("MATOS_KAFKA_GROUP"),
        client_id=EnvVar("MATOS_KAFKA_CLIENT_ID"),
        timeout_s=EnvVar.int("MATOS_KAFKA_TIMEOUT_S"),
    ),
    "swift": SwiftResource(
        auth_version=EnvVar("MATOS_SWIFT_AUTH_VERSION"),
        auth_url=EnvVar("MATOS_SWIFT_AUTH_URL"),
        user=EnvVar("MATOS_SWIFT_USER"),
        key=EnvVar("MATOS_SWIFT_KEY"),
        user_id=EnvVar("MATOS_SWIFT_USER_ID"),
        project_id=EnvVar("MATOS_SWIFT_PROJECT_ID"),
        region=EnvVar("MATOS_SWIFT_REGION"),
        domain=EnvVar("MATOS_SWIFT_DOMAIN"),
        project_name=EnvVar("MATOS_SWIFT_PROJECT_NAME"),
        project_domain=EnvVar("MATOS_SWIFT_PROJECT_DOMAIN"),
        app_credential_id=EnvVar("MATOS_SWIFT_APP_CREDENTIAL_ID"),
        app_credential_secret=EnvVar("MATOS_SWIFT_APP_CREDENTIAL_SECRET"),
        interface=EnvVar("MATOS_SWIFT_INTERFACE"),
        container=EnvVar("MATOS_SWIFT_CONTAINER"),
        prefix=EnvVar("MATOS_SWIFT_PREFIX"),
        verify_tls=EnvVar("MATOS_SWIFT_VERIFY_TLS"),
        ca_file=EnvVar("MATOS_SWIFT_CA_FILE"),
        retries=EnvVar.int("MATOS_SWIFT_RETRIES"),
        timeout_s=EnvVar.int("MATOS_SWIFT_TIMEOUT_S"),
    ),
    "spark": SparkResource(master=EnvVar("MATOS_SPARK_MASTER"), conf=EnvVar("MATOS_SPARK_CONF")),
}

CHECKS = [monitor_check(t) for t in TOPICS]
SENSOR_INTERVAL_S = int(os.environ["MATOS_SENSOR_INTERVAL_S"])
MONITOR = monitor_sensor(TOPIC_SET, int(os.environ["MATOS_MONITOR_INTERVAL_S"]), SENSOR_INTERVAL_S)
RETENTION = retention_job(TOPIC_SET)
COMPACT = compact_job(TOPIC_SET)
ADD_RANGES = add_ranges_job(TOPIC_SET)
TIMED = [t for t in TOPICS if t.time_window != "none"]  # event-time windows (assets/windows.py)

defs = Definitions(
    assets=[archive_asset(t) for t in TOPICS] + [windows_asset(t) for t in TIMED]
    + [summary_asset(t) for t in TIMED if t.windows_summary],
    asset_checks=CHECKS,
    jobs=[load, archive_ranges_job(TOPIC_SET), ADD_RANGES,
          backfill_job(TOPIC_SET, ADD_RANGES, lambda: defs.resolve_asset_graph()), acknowledge_loss_job(TOPIC_SET),
          restore_job(TOPICS), verify_job(TOPIC_SET), RETENTION, COMPACT, iceberg_job(TOPIC_SET), monitor_job(CHECKS),
          ],
    sensors=[lag_sensor(TOPIC_SET, SENSOR_INTERVAL_S), MONITOR]
    # A pattern may match a topic with days at any tick: the sensor then reports its windows.
    + ([days_sensor(TOPIC_SET, SENSOR_INTERVAL_S), windows_automation(SENSOR_INTERVAL_S)]
       if TIMED or any(p.settings.time_window != "none" for p in TOPIC_SET.patterns)
       else []),
    schedules=[retention_schedule(RETENTION, os.environ["MATOS_RETENTION_CRON"]),
               compact_schedule(COMPACT, os.environ["MATOS_COMPACT_CRON"])],
    resources=RESOURCES,
    # Every Spark step in its own process would start its own JVM: run steps in the run's process.
    executor=in_process_executor,
)
