"""Every setting of the project: its `MATOS_` environment variable, default and meaning.

One table, so the README's configuration table and the defaults can never disagree
(`python -m matos_dagster.settings` prints the README table). The defaults point at the
local stack (`python -m matos_dagster.devstack up`), so `dagster dev` runs with no
configuration at all. No Dagster imports: executors and the devstack read this too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    # Kafka
    Setting("MATOS_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092", "Kafka brokers, `host:port[,host:port]`."),
    Setting("MATOS_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT", "`PLAINTEXT`, `SSL` or `SASL_SSL`."),
    Setting("MATOS_KAFKA_SASL_MECHANISM", "PLAIN",
            "`PLAIN` (IBM Message Hub / Event Streams: user `token`, password the API key), "
            "`SCRAM-SHA-256` or `SCRAM-SHA-512`."),
    Setting("MATOS_KAFKA_USERNAME", "", "SASL user name."),
    Setting("MATOS_KAFKA_PASSWORD", "", "SASL password or API key.", secret=True),
    Setting("MATOS_KAFKA_CA_FILE", "", "PEM file of the CA that signed the brokers' certificates; empty: system CAs."),
    Setting("MATOS_KAFKA_GROUP", "matos-archiver",
            "Consumer group whose committed offsets record what is archived (a topic may set its own)."),
    Setting("MATOS_KAFKA_CLIENT_ID", "matos-dagster", "Client id the brokers see in their logs and quotas."),
    Setting("MATOS_KAFKA_TIMEOUT_S", "15", "Seconds to wait for an answer from Kafka before failing."),
    # Swift
    Setting("MATOS_SWIFT_AUTH_VERSION", "1", "`1` (tempauth, swauth) or `3` (Keystone v3)."),
    Setting("MATOS_SWIFT_AUTH_URL", "http://127.0.0.1:8080/auth/v1.0", "Swift auth endpoint (v1) or Keystone URL (v3)."),
    Setting("MATOS_SWIFT_USER", "test:tester",
            "v1 user (`account:user`); Keystone v3: the user name (with MATOS_SWIFT_DOMAIN) if there is no user id."),
    Setting("MATOS_SWIFT_KEY", "testing", "v1 key, or the Keystone v3 password.", secret=True),
    Setting("MATOS_SWIFT_USER_ID", "", "Keystone v3 user id."),
    Setting("MATOS_SWIFT_PROJECT_ID", "", "Keystone v3 project id."),
    Setting("MATOS_SWIFT_PROJECT_NAME", "", "Keystone v3 project name, instead of the project id."),
    Setting("MATOS_SWIFT_PROJECT_DOMAIN", "",
            "Keystone v3 domain name of MATOS_SWIFT_PROJECT_NAME; empty: MATOS_SWIFT_DOMAIN."),
    Setting("MATOS_SWIFT_DOMAIN", "", "Keystone v3 user domain name (with MATOS_SWIFT_USER, the user name)."),
    Setting("MATOS_SWIFT_APP_CREDENTIAL_ID", "",
            "Keystone v3 application credential id; set, it replaces user, password and project."),
    Setting("MATOS_SWIFT_APP_CREDENTIAL_SECRET", "", "Secret of the Keystone v3 application credential.",
            secret=True),
    Setting("MATOS_SWIFT_REGION", "", "Keystone v3 region of the object-store endpoint; empty: the first one."),
    Setting("MATOS_SWIFT_INTERFACE", "public",
            "Keystone v3 interface of the object-store endpoint: `public`, `internal` or `admin`."),
    Setting("MATOS_SWIFT_CONTAINER", "matos-archive", "Container the archive is written to (created private if missing)."),
    Setting("MATOS_SWIFT_PREFIX", "kafka", "Object name prefix in front of every archive path."),
    Setting("MATOS_SWIFT_VERIFY_TLS", "true", "Verify the Swift endpoint's certificate; `false` only with a warning."),
    Setting("MATOS_SWIFT_CA_FILE", "", "PEM file of the CA for Swift's certificate; empty: system CAs."),
    Setting("MATOS_SWIFT_RETRIES", "5", "Retries of a failed Swift request (with back-off) before failing."),
    Setting("MATOS_SWIFT_TIMEOUT_S", "60", "Seconds to wait for one Swift request."),
    # Spark
    Setting("MATOS_SPARK_MASTER", "sc://127.0.0.1:15002",
            "A Spark Connect server (`sc://host:port`; the local stack runs one), or a `spark.master` for a "
            "driver per run: `local[*]`, `spark://host:7077`."),
    Setting("MATOS_SPARK_CONF", "",
            "More Spark settings, `key=value` pairs separated by `;` "
            "(e.g. `spark.executor.memory=2g;spark.ui.enabled=false`)."),
    # Archive
    Setting("MATOS_TOPICS_FILE", str(PROJECT_ROOT / "topics.yaml"), "YAML file of the topics to archive."),
    Setting("MATOS_SENSOR_INTERVAL_S", "30", "Seconds between two ticks of each topic's lag sensor."),
    Setting("MATOS_HEARTBEAT_S", "15",
            "Seconds between two heartbeats of an archive run (a run tag written by a thread of its own)."),
    Setting("MATOS_DEAD_RUN_AFTER_S", "90",
            "An archive run with no heartbeat for this long is dead (its process is gone): the lag sensor fails "
            "it and requests its range again. At least 3 x MATOS_HEARTBEAT_S."),
    Setting("MATOS_MONITOR_CRON", "*/5 * * * *", "When the monitor check runs on its own (cron)."),
    Setting("MATOS_COMPACT_CRON", "37 * * * *",
            "When the `compact` job merges each topic's small archived ranges into large ones (cron)."),
    # Reading in place: Swift's S3 API and the Iceberg tables (README "The archive as an Iceberg table")
    Setting("MATOS_S3_ENDPOINT", "",
            "Swift's S3 API (s3api middleware), `http(s)://host:port`; empty: the host of Swift's storage URL."),
    Setting("MATOS_S3_ACCESS_KEY", "",
            "S3 access key; empty with tempauth (v1): MATOS_SWIFT_USER. Keystone: an EC2 credential's access key "
            "(`openstack ec2 credentials create`; the proxy needs s3token before authtoken)."),
    Setting("MATOS_S3_SECRET_KEY", "", "S3 secret key; empty with tempauth (v1): MATOS_SWIFT_KEY. Keystone: the EC2 "
            "credential's secret.", secret=True),
    Setting("MATOS_S3_REGION", "us-east-1", "Region the S3 API signs with (s3api's `location`)."),
    Setting("MATOS_ICEBERG_TABLES", "false",
            "`true`: each archive run adds its range's Parquet objects to the topic's Iceberg table."),
    Setting("MATOS_ICEBERG_CATALOG", "",
            "pyiceberg catalog properties, `key=value` pairs separated by `;` (e.g. `type=rest;uri=https://...`); "
            "empty: an embedded sqlite SqlCatalog, `<MATOS_DEVSTACK_DIR>/iceberg/catalog.db`.", secret=True),
    Setting("MATOS_ICEBERG_NAMESPACE", "", "Catalog namespace of the tables (one per topic); empty: the container's name."),
    # Retention of Dagster's own records (the archive in Swift is never pruned)
    Setting("MATOS_RETENTION_CRON", "7 * * * *", "When the `retention` job prunes old partition keys and runs (cron)."),
    Setting("MATOS_KEEP_KEYS", "1000",
            "Partition keys kept per topic partition (the newest); older keys of archived, committed ranges "
            "are removed. Their ranges stay in Swift: read, verified and restored as before."),
    Setting("MATOS_KEEP_RUNS", "1000",
            "Finished runs kept per job (the newest), with their event logs and compute logs; older ones are deleted."),
    Setting("MATOS_KEEP_FAILED_RUNS_DAYS", "14", "Days a failed run is kept for an operator, beyond MATOS_KEEP_RUNS."),
    # Local stack
    Setting("MATOS_DEVSTACK_DIR", str(PROJECT_ROOT / ".devstack"),
            "Where the local stack keeps its data, logs and downloads."),
    Setting("MATOS_DEVSTACK_CACHE", "",
            "Download cache of the local stack (Kafka jars, Swift venv); empty: `<MATOS_DEVSTACK_DIR>/cache`."),
    Setting("MATOS_DEVSTACK_KAFKA_PORT", "9092", "Port of the local Kafka broker."),
    Setting("MATOS_DEVSTACK_SWIFT_PORT", "8080", "Port of the local Swift proxy."),
    Setting("MATOS_DEVSTACK_AUTH", "tempauth",
            "Swift's auth in the local stack: `tempauth` (v1), or `keystone` (a local Keystone v3 runs too; "
            "`up` prints the MATOS_SWIFT_* settings for it)."),
    Setting("MATOS_DEVSTACK_KEYSTONE_PORT", "5000", "Port of the local Keystone (with MATOS_DEVSTACK_AUTH=keystone)."),
    Setting("MATOS_DEVSTACK_SPARK_PORT", "15002",
            "Port of the local Spark Connect server (`MATOS_SPARK_MASTER=sc://127.0.0.1:<port>` uses it)."),
)

BY_NAME = {s.name: s for s in SETTINGS}


def get(name: str) -> str:
    """The setting's value: its environment variable if set, else its default."""
    return os.environ.get(name, BY_NAME[name].default)


def apply_defaults(environ: dict[str, str] | None = None) -> None:
    """Put every unset setting's default into the environment.

    Dagster's `EnvVar` fails on an unset variable; filling the defaults in first keeps
    `EnvVar` the one way settings (secrets included) reach the resources, while a new
    machine still needs no configuration.
    """
    env = os.environ if environ is None else environ
    for s in SETTINGS:
        env.setdefault(s.name, s.default)


def markdown_table() -> str:
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for s in SETTINGS:
        default = s.default.replace(str(PROJECT_ROOT), "<project>")
        shown = f"`{default}`" if default else "(empty)"
        rows.append(f"| `{s.name}` | {shown} | {s.help}{' Secret.' if s.secret else ''} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
