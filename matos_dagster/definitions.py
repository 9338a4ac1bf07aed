"""The project's own code location: the archive of library.py's `archive_definitions`, built from the
MATOS_ settings (`workspace.yaml`, `dg`, `dagster -m matos_dagster.definitions`, the `matos` CLI).

Every setting reaches the resources here, through `EnvVar`, and nowhere else. Unset settings take
the defaults of `settings.py`; the connections have none outside the repository's development setup
(MATOS_DEV=true, where they point at the local stack): unset, loading refuses in one line each.

The topics file names topics and patterns. Each topic has its assets; the topics a pattern
matches are listed from Kafka when the code location loads (a topic created later is archived
by the lag sensor at once, and has its assets from the next load of the code location).
"""

from __future__ import annotations

import os

from dagster import EnvVar

from matos_dagster.core import settings, topics
from matos_dagster.library import archive_definitions, matched_now
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

settings.check()  # a bad setting is one line naming it, before any resource is built
settings.apply_defaults()

TOPIC_SET = topics.load(os.environ["MATOS_TOPICS_FILE"], default_group=os.environ["MATOS_KAFKA_GROUP"])

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

TOPICS = matched_now(TOPIC_SET, RESOURCES["kafka"])

defs = archive_definitions(
    TOPIC_SET, **RESOURCES,
    sensor_interval_s=int(os.environ["MATOS_SENSOR_INTERVAL_S"]),
    monitor_interval_s=int(os.environ["MATOS_MONITOR_INTERVAL_S"]),
    retention_cron=os.environ["MATOS_RETENTION_CRON"],
    compact_cron=os.environ["MATOS_COMPACT_CRON"],
    expire_cron=os.environ["MATOS_EXPIRE_CRON"],
    topics_at_load=TOPICS,
)
