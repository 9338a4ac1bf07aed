"""The one `Definitions` of matos-dagster: assets, resources, jobs, sensors and checks.

Every setting reaches the resources here, through `EnvVar`, and nowhere else. Unset
settings take the defaults of `settings.py`, which point at the local stack.
"""

from __future__ import annotations

import os

from dagster import Definitions, EnvVar, in_process_executor

from matos_dagster.assets.archive import archive_asset, ranges_partitions
from matos_dagster.assets.monitor import monitor_automation, monitor_check
from matos_dagster.assets.windows import summary_asset, windows_asset, windows_automation, windows_job, windows_sensor
from matos_dagster.core import settings, topics
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
from matos_dagster.sensors.lag import lag_sensor

settings.check()  # a bad setting is one line naming it, before any resource is built
settings.apply_defaults()

TOPICS = topics.load(os.environ["MATOS_TOPICS_FILE"], default_group=os.environ["MATOS_KAFKA_GROUP"])

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
MONITORS = [monitor_automation(t, c, os.environ["MATOS_MONITOR_CRON"]) for t, c in zip(TOPICS, CHECKS)]
SENSOR_INTERVAL_S = int(os.environ["MATOS_SENSOR_INTERVAL_S"])
RETENTION = retention_job(TOPICS)
COMPACT = compact_job(TOPICS)
ADD_RANGES = add_ranges_job(TOPICS)
TIMED = [t for t in TOPICS if t.time_window != "none"]  # event-time windows (assets/windows.py)
WINDOW_JOBS = [windows_job(t) for t in TIMED]

defs = Definitions(
    assets=[archive_asset(t) for t in TOPICS] + [windows_asset(t) for t in TIMED]
    + [summary_asset(t) for t in TIMED if t.windows_summary],
    asset_checks=CHECKS,
    jobs=[load, ADD_RANGES, backfill_job(TOPICS, ADD_RANGES, lambda: defs.resolve_asset_graph()), acknowledge_loss_job(TOPICS), restore_job(TOPICS), verify_job(TOPICS), RETENTION, COMPACT,
          iceberg_job(TOPICS), *WINDOW_JOBS],
    sensors=[lag_sensor(t, ranges_partitions(t), SENSOR_INTERVAL_S) for t in TOPICS] + [s for _, s in MONITORS]
    + [windows_sensor(t, j, SENSOR_INTERVAL_S) for t, j in zip(TIMED, WINDOW_JOBS)]
    + ([windows_automation(SENSOR_INTERVAL_S)] if TIMED else []),
    schedules=[schedule for schedule, _ in MONITORS]
    + [retention_schedule(RETENTION, os.environ["MATOS_RETENTION_CRON"]),
       compact_schedule(COMPACT, TOPICS, os.environ["MATOS_COMPACT_CRON"])],
    resources=RESOURCES,
    # Every Spark step in its own process would start its own JVM: run steps in the run's process.
    executor=in_process_executor,
)
