"""Every setting of the project: its `MATOS_` environment variable, default, kind and meaning.

One table, the only source: the configuration reference in the documentation is generated
from it (`python -m matos_dagster.core.settings`), and a test fails when the two differ or when
the code reads a `MATOS_` variable that is not here. Each setting's kind checks its value
before anything touches the network, so a bad one is refused in one line naming it.

The connections (Kafka's brokers, Swift's endpoint and credentials, the Spark master, the topics
file) have no default in a library: unset, they are refused in one line naming them. Only the
repository's development setup (MATOS_DEV=true: the Makefile exports it, the tests and the dev
tooling set it) defaults them to the local stack, whose state lives in the checkout's `.devstack`;
installed with pip, nothing is written under the package. No Dagster imports: Spark workers and
the local stack read this too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# What a value may be, said the way the refusal says it: the kinds, re-exported for the callers.
from matos_dagster.core.setting_kinds import (
    FLAG, Choice, Cron, File, Number, Pairs, Servers, SparkMaster, Text, Url, Whole, has_userinfo, without_userinfo,
)

__all__ = ["FLAG", "Choice", "Cron", "File", "Number", "Pairs", "Servers", "SparkMaster", "Text", "Url", "Whole",
           "has_userinfo", "without_userinfo"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # matos_dagster/core/settings.py

PRODUCT, LOCAL_STACK = "product", "local stack"


class SettingError(ValueError):
    """A setting whose value its kind refuses; the message names the setting and what it takes."""


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str
    kind: object = Text()
    secret: bool = False
    group: str = PRODUCT
    dev: str | None = None  # the default of the repository's development setup (MATOS_DEV=true), if another


DEV = "MATOS_DEV"
# The connections a library cannot guess: outside the development setup, unset is refused.
CONNECTIONS = {
    "MATOS_KAFKA_BOOTSTRAP_SERVERS": "your Kafka brokers, `host:port[,host:port]`",
    "MATOS_SWIFT_AUTH_URL": "your Swift auth URL (v1) or Keystone URL (v3)",
    "MATOS_SWIFT_USER": "your Swift user (v1: `account:user`)",
    "MATOS_SWIFT_KEY": "your Swift key (v1) or password",
    "MATOS_SPARK_MASTER": "a Spark Connect server `sc://host:port`, or `local[*]`",
    "MATOS_TOPICS_FILE": "the YAML file of the topics to archive",
}


PORT = Whole(least=1, most=65535)

SETTINGS: tuple[Setting, ...] = (
    # Kafka
    Setting("MATOS_KAFKA_BOOTSTRAP_SERVERS", "", "Kafka brokers, `host:port[,host:port]`.", kind=Servers(),
            dev="127.0.0.1:9092"),
    Setting("MATOS_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT", "`PLAINTEXT`, `SSL` or `SASL_SSL`.", kind=Choice(("PLAINTEXT", "SSL", "SASL_SSL"))),
    Setting("MATOS_KAFKA_SASL_MECHANISM", "PLAIN",
            "`PLAIN` (IBM Message Hub / Event Streams: user `token`, password the API key), "
            "`SCRAM-SHA-256` or `SCRAM-SHA-512`.", kind=Choice(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"))),
    Setting("MATOS_KAFKA_USERNAME", "", "SASL user name."),
    Setting("MATOS_KAFKA_PASSWORD", "", "SASL password or API key.", secret=True),
    Setting("MATOS_KAFKA_CA_FILE", "", "PEM file of the CA that signed the brokers' certificates; empty: system CAs.", kind=File()),
    Setting("MATOS_KAFKA_GROUP", "matos-archiver",
            "Consumer group whose committed offsets record what is archived (a topic may set its own)."),
    Setting("MATOS_KAFKA_CLIENT_ID", "matos-dagster", "Client id the brokers see in their logs and quotas."),
    Setting("MATOS_KAFKA_TIMEOUT_S", "15", "Seconds to wait for an answer from Kafka before failing.", kind=Whole(unit="seconds")),
    # Swift
    Setting("MATOS_SWIFT_AUTH_VERSION", "1", "`1` (tempauth, swauth) or `3` (Keystone v3).", kind=Choice(("1", "3"))),
    Setting("MATOS_SWIFT_AUTH_URL", "", "Swift auth endpoint (v1) or Keystone URL (v3).", kind=Url(),
            dev="http://127.0.0.1:8080/auth/v1.0"),
    Setting("MATOS_SWIFT_USER", "",
            "v1 user (`account:user`); Keystone v3: the user name (with MATOS_SWIFT_DOMAIN) if there is no user id.",
            dev="test:tester"),
    Setting("MATOS_SWIFT_KEY", "", "v1 key, or the Keystone v3 password.", secret=True, dev="testing"),
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
            "Keystone v3 interface of the object-store endpoint: `public`, `internal` or `admin`.", kind=Choice(("public", "internal", "admin"))),
    Setting("MATOS_SWIFT_CONTAINER", "matos-archive", "Container the archive is written to (created private if missing)."),
    Setting("MATOS_SWIFT_PREFIX", "kafka", "Object name prefix in front of every archive path."),
    Setting("MATOS_SWIFT_VERIFY_TLS", "true", "Verify the Swift endpoint's certificate; `false` only with a warning.", kind=FLAG),
    Setting("MATOS_SWIFT_CA_FILE", "", "PEM file of the CA for Swift's certificate; empty: system CAs.", kind=File()),
    Setting("MATOS_SWIFT_RETRIES", "5", "Retries of a failed Swift request (with back-off) before failing.", kind=Whole(least=0)),
    Setting("MATOS_SWIFT_TIMEOUT_S", "60", "Seconds to wait for one Swift request.", kind=Whole(unit="seconds")),
    # Spark
    Setting("MATOS_SPARK_MASTER", "",
            "A Spark Connect server (`sc://host:port`; the local stack runs one), or a `spark.master` for a "
            "driver per run: `local[*]`, `spark://host:7077`.", kind=SparkMaster(), dev="sc://127.0.0.1:15002"),
    Setting("MATOS_SPARK_CONF", "",
            "More Spark settings, `key=value` pairs separated by `;` "
            "(e.g. `spark.executor.memory=2g;spark.ui.enabled=false`). A driver of the run's own (`local[*]`, "
            "`spark://`) defaults to `spark.driver.memory=512m` and `spark.driver.defaultJavaOptions=-XX:+UseSerialGC "
            "-Xms64m -XX:TieredStopAtLevel=1` (it only coordinates); set them here to change that.", kind=Pairs()),
    Setting("MATOS_NATIVE_READER", "true",
            "`false`: slice tasks read with the Python reader even where the native one is built (both write "
            "the same bytes). Read by the Spark tasks: set it where they run.", kind=FLAG),
    # Archive
    Setting("MATOS_TOPICS_FILE", "", "YAML file of the topics to archive.", kind=File(),
            dev=str(PROJECT_ROOT / "topics.yaml")),
    Setting("MATOS_SENSOR_INTERVAL_S", "30",
            "Seconds between two ticks of the lag, monitor and days sensors; the lag sensor also asks Kafka at its "
            "first tick after a run of its ranges ended (it ticks every 10 s, or this if less).",
            kind=Whole(unit="seconds")),
    Setting("MATOS_RUN_MAX_RANGES", "1000", "Ranges one `archive_ranges` run carries at most: a tick with more due requests more runs.", kind=Whole(unit="ranges")),
    Setting("MATOS_HEARTBEAT_S", "15",
            "Seconds between two heartbeats of an archive run (a run tag written by a thread of its own).", kind=Number(least=1, unit="seconds")),
    Setting("MATOS_DEAD_RUN_AFTER_S", "90",
            "An archive run with no heartbeat for this long is dead (its process is gone): the lag sensor fails "
            "it and requests its range again. At least 3 x MATOS_HEARTBEAT_S.", kind=Number(least=3, unit="seconds")),
    Setting("MATOS_MONITOR_INTERVAL_S", "300",
            "The oldest a topic's monitor verdict may be: the monitor sensor (a tick every MATOS_SENSOR_INTERVAL_S) "
            "evaluates each topic again before its verdict is this old, and at the next tick after its committed "
            "offsets move.", kind=Whole(unit="seconds")),
    Setting("MATOS_REEVALUATE_S", "120",
            "A topic whose committed offsets moved is evaluated again by the monitor sensor, and its days by the days "
            "sensor, once its last evaluation is this old (0: at the next tick). In a busy estate they move at every "
            "tick: each evaluation then covers the ranges of several ticks.", kind=Whole(least=0, unit="seconds")),
    Setting("MATOS_COMPACT_CRON", "37 * * * *",
            "When the `compact` job merges each topic's small archived ranges into large ones (cron).", kind=Cron()),
    Setting("MATOS_EXPIRE_CRON", "17 3 * * *",
            "When the `expire` job removes archived records older than each topic's archive_retention_days (cron).",
            kind=Cron()),
    # Typed columns (the topics file's key_format / value_format): Confluent's Schema Registry
    Setting("MATOS_SCHEMA_REGISTRY_URL", "",
            "Confluent Schema Registry the typed columns' schemas come from, `http(s)://host:port`; empty: none (a "
            "topic with `avro`, `protobuf` or `json_schema` then needs a schema file). An archive run hands it to its Spark "
            "tasks, which ask it once for each schema id.",
            kind=Url(empty=True, credentials="MATOS_SCHEMA_REGISTRY_USERNAME and MATOS_SCHEMA_REGISTRY_PASSWORD")),
    Setting("MATOS_SCHEMA_REGISTRY_USERNAME", "",
            "Basic-auth user of the schema registry (an API key); empty: no auth."),
    Setting("MATOS_SCHEMA_REGISTRY_PASSWORD", "", "Basic-auth password of the schema registry (an API secret).",
            secret=True),
    Setting("MATOS_SCHEMA_REGISTRY_CA_FILE", "",
            "PEM file of the CA for the registry's certificate; empty: system CAs.", kind=File()),
    Setting("MATOS_TARGET_SCHEMA_REGISTRY_USERNAME", "",
            "Basic-auth user of the registry a restore registers the archived schemas in (the restore's "
            "`target_schema_registry_url`, another cluster's); empty: no auth."),
    Setting("MATOS_TARGET_SCHEMA_REGISTRY_PASSWORD", "",
            "Basic-auth password of the restore's target schema registry.", secret=True),
    Setting("MATOS_TARGET_SCHEMA_REGISTRY_CA_FILE", "",
            "PEM file of the CA for the restore's target schema registry's certificate; empty: system CAs.",
            kind=File()),
    # Reading in place: Swift's S3 API and the Iceberg tables (docs/operations/reading.md)
    Setting("MATOS_S3_ENDPOINT", "",
            "Swift's S3 API (s3api middleware), `http(s)://host:port`; empty: the host of Swift's storage URL.", kind=Url(empty=True)),
    Setting("MATOS_S3_ACCESS_KEY", "",
            "S3 access key; empty with tempauth (v1): MATOS_SWIFT_USER. Keystone: an EC2 credential's access key "
            "(`openstack ec2 credentials create`; the proxy needs s3token before authtoken)."),
    Setting("MATOS_S3_SECRET_KEY", "", "S3 secret key; empty with tempauth (v1): MATOS_SWIFT_KEY. Keystone: the EC2 "
            "credential's secret.", secret=True),
    Setting("MATOS_S3_REGION", "us-east-1", "Region the S3 API signs with (s3api's `location`)."),
    Setting("MATOS_ICEBERG_TABLES", "false",
            "`true`: each archive run adds its range's Parquet objects to the topic's Iceberg table.", kind=FLAG),
    Setting("MATOS_ICEBERG_CATALOG", "",
            "pyiceberg catalog properties, `key=value` pairs separated by `;` (e.g. `type=rest;uri=https://...`); "
            "empty: in the development setup an embedded sqlite SqlCatalog, `<MATOS_DEVSTACK_DIR>/iceberg/catalog.db`; "
            "elsewhere it must be set when MATOS_ICEBERG_TABLES is true.", secret=True, kind=Pairs()),
    Setting("MATOS_ICEBERG_NAMESPACE", "", "Catalog namespace of the tables (one per topic); empty: the container's name."),
    # Forgetting (docs/operations/forgetting.md)
    Setting("MATOS_ERASURE_KEY", "",
            "Key of the keyed hash (HMAC-SHA256) by which the archive records which Kafka keys it erased, never "
            "the keys: text, `hex:...` or `base64:...`, at least 16 bytes. Required by `matos forget` and the "
            "`forget` job; while a topic's erasure ledger applies, its archive runs need it too.", secret=True),
    # Retention of Dagster's own records (the archive in Swift is never pruned)
    Setting("MATOS_RETENTION_CRON", "7 * * * *", "When the `retention` job prunes old partition keys and runs (cron).", kind=Cron()),
    Setting("MATOS_KEEP_KEYS", "1000",
            "Partition keys kept per topic partition (the newest); older keys of archived, committed ranges "
            "are removed. Their ranges stay in Swift: read, verified and restored as before.", kind=Whole()),
    Setting("MATOS_KEEP_RUNS", "1000",
            "Finished runs kept per job (the newest), with their event logs and compute logs; older ones are deleted "
            "(not the newest successful run of each day or hour: it holds that window's materialisation).", kind=Whole()),
    Setting("MATOS_KEEP_FAILED_RUNS_DAYS", "14", "Days a failed run is kept for an operator, beyond MATOS_KEEP_RUNS.", kind=Number(unit="days")),
    Setting(DEV, "false",
            "`true` in the repository's development setup only (the Makefile exports it; the tests and the dev "
            "tooling set it): the connections then default to the local stack, and the Dagster instance and "
            "the Iceberg catalog to MATOS_DEVSTACK_DIR. Elsewhere an unset connection is refused, naming it.",
            kind=FLAG),
    # Local stack
    Setting("MATOS_DEVSTACK_DIR", "",
            "Where the local stack keeps its data, logs and downloads. In the development setup the product "
            "reads it too: the Dagster instance is `<MATOS_DEVSTACK_DIR>/dagster` when DAGSTER_HOME is unset, "
            "and the Iceberg catalog `<MATOS_DEVSTACK_DIR>/iceberg/catalog.db` when MATOS_ICEBERG_CATALOG is "
            "empty.", group=LOCAL_STACK, dev=str(PROJECT_ROOT / ".devstack")),
    Setting("MATOS_DEVSTACK_CACHE", "",
            "Download cache of the local stack (Kafka jars, Swift venv); empty: `<MATOS_DEVSTACK_DIR>/cache`.", group=LOCAL_STACK),
    Setting("MATOS_DEVSTACK_KAFKA_PORT", "9092", "Port of the local Kafka broker.", kind=PORT, group=LOCAL_STACK),
    Setting("MATOS_DEVSTACK_SWIFT_PORT", "8080", "Port of the local Swift proxy.", kind=PORT, group=LOCAL_STACK),
    Setting("MATOS_DEVSTACK_AUTH", "tempauth",
            "Swift's auth in the local stack: `tempauth` (v1), or `keystone` (a local Keystone v3 runs too; "
            "`up` prints the MATOS_SWIFT_* settings for it).", kind=Choice(("tempauth", "keystone")), group=LOCAL_STACK),
    Setting("MATOS_DEVSTACK_DAGSTER_STORAGE", "sqlite",
            "The local stack's Dagster storage: `sqlite` (`make run`'s), or `postgres`: `up` also starts the "
            "PostgreSQL server of dagster.postgres.yaml and prints its DAGSTER_PG_* settings.",
            kind=Choice(("sqlite", "postgres")), group=LOCAL_STACK),
    Setting("MATOS_DEVSTACK_KEYSTONE_PORT", "5000", "Port of the local Keystone (with MATOS_DEVSTACK_AUTH=keystone).", kind=PORT, group=LOCAL_STACK),
    Setting("MATOS_DEVSTACK_SPARK_PORT", "15002",
            "Port of the local Spark Connect server (`MATOS_SPARK_MASTER=sc://127.0.0.1:<port>` uses it).", kind=PORT, group=LOCAL_STACK),
    Setting("MATOS_DEVSTACK_REGISTRY_PORT", "8081",
            "Port of the local Schema Registry stand-in: the project's own Confluent-compatible stand-in "
            "(dev/matos_dev/stack/registry.py), not Confluent's Schema Registry.", kind=PORT, group=LOCAL_STACK),
)

BY_NAME = {s.name: s for s in SETTINGS}
# Read by the code but not settings: fault points for the crash tests (tests/end_to_end/test_faults.py).
TEST_HOOKS = ("MATOS_FAULT",)


def development(environ: dict[str, str] | None = None) -> bool:
    """Whether this is the repository's development setup (MATOS_DEV=true), where the local stack is the default."""
    return (os.environ if environ is None else environ).get(DEV, "").strip() == "true"


def default(s: Setting, environ: dict[str, str] | None = None) -> str:
    """The setting's default here: the development setup's, if it has one and this is that setup."""
    return s.dev if s.dev is not None and development(environ) else s.default


def get(name: str) -> str:
    """The setting's value: its environment variable if set, else its default."""
    return os.environ.get(name, default(BY_NAME[name]))


def missing(environ: dict[str, str] | None = None) -> list[str]:
    """One line per connection setting that is not set and has no default here (outside the development setup)."""
    env = os.environ if environ is None else environ
    needed = [n for n in CONNECTIONS if not env.get(n, default(BY_NAME[n], env)).strip()]
    if env.get("MATOS_SWIFT_AUTH_VERSION", "1") == "3":  # Keystone v3: ids, names or an application credential
        needed = [n for n in needed if n not in ("MATOS_SWIFT_USER", "MATOS_SWIFT_KEY")]
    return [f"{n} is not set: set it to {CONNECTIONS[n]}" for n in needed]


def flag(name: str) -> bool:
    """A `true`/`false` setting's value; SettingError for any other spelling."""
    value = get(name).strip()
    problem = _problem(BY_NAME[name], value)
    if problem:
        raise SettingError(problem)
    return value == "true"


def _problem(s: Setting, value: str) -> str | None:
    try:
        s.kind.check(value)
    except ValueError:
        shown = "(empty)" if value == "" else ("(hidden)" if s.secret else repr(without_userinfo(value)))
        return f"{s.name} is {shown}: it takes {s.kind.takes}"
    return None


def problems(environ: dict[str, str] | None = None, group: str = PRODUCT, connections: bool = True) -> list[str]:
    """One line per setting of `group` whose value (set, or its default) its kind refuses, and with
    `connections`, per connection setting that is missing (`missing`). Without, an unset connection
    setting is not looked at: an archive of a project of one's own has its connections in its resources."""
    env = os.environ if environ is None else environ
    lacking = missing(env) if group == PRODUCT else []
    unset = {line.split(" ", 1)[0] for line in lacking}
    found = [_problem(s, env.get(s.name, default(s, env))) for s in SETTINGS if s.group == group and s.name not in unset]
    return (lacking if connections else []) + [p for p in found if p]


def check(environ: dict[str, str] | None = None, group: str = PRODUCT, connections: bool = True) -> None:
    """SettingError, one line per bad setting, before anything reaches the network."""
    found = problems(environ, group, connections)
    if found:
        raise SettingError("\n".join(found))


def apply_defaults(environ: dict[str, str] | None = None) -> None:
    """Put every unset setting's default into the environment.

    Dagster's `EnvVar` fails on an unset variable; filling the defaults in first keeps
    `EnvVar` the one way settings (secrets included) reach the resources, while a new
    machine still needs no configuration.
    """
    env = os.environ if environ is None else environ
    for s in SETTINGS:
        env.setdefault(s.name, default(s, env))


def markdown_table(group: str = PRODUCT) -> str:
    rows = ["| variable | default | takes | meaning |", "| --- | --- | --- | --- |"]
    for s in SETTINGS:
        if s.group != group:
            continue
        shown = f"`{s.default}`" if s.default else ("(required)" if s.name in CONNECTIONS else "(empty)")
        if s.dev is not None:
            shown += f"; development: `{s.dev.replace(str(PROJECT_ROOT), '<project>')}`"
        takes = s.kind.takes.replace("|", "\\|")
        rows.append(f"| `{s.name}` | {shown} | {takes} | {s.help}{' Secret.' if s.secret else ''} |")
    return "\n".join(rows)


def reference() -> str:
    """The settings reference of the documentation, exactly (a test compares them)."""
    return (f"### The product's settings\n\n{markdown_table(PRODUCT)}\n\n"
            f"### The local stack's settings\n\nRead by `make up` / `python -m matos_dev.stack`; "
            f"in the development setup (MATOS_DEV=true), `MATOS_DEVSTACK_DIR` is also where the product falls back "
            f"to for the Dagster instance and the Iceberg catalog. Elsewhere set DAGSTER_HOME and "
            f"MATOS_ICEBERG_CATALOG.\n\n"
            f"{markdown_table(LOCAL_STACK)}\n")


if __name__ == "__main__":
    print(reference(), end="")
