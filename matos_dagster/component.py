"""`KafkaArchive`, the `dg` component: the archive in a Dagster project of one's own, from its `defs.yaml`.

    dg scaffold defs matos_dagster.KafkaArchive orders_archive

writes `defs/orders_archive/defs.yaml` (`KafkaArchiveScaffolder`), which `dg check defs` accepts as
it is. The component builds what `archive_definitions` (library.py) builds. Connection settings
written `"{{ env.X }}"` become Dagster `EnvVar`s: the variable is read by the process that uses the
resource, and only its name is in Dagster's records (a value would be stored in every run's job
snapshot, passwords included).
"""

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Optional, Union

from dagster import (
    Component,
    ComponentLoadContext,
    Definitions,
    EnvVar,
    Model,
    Resolvable,
    ResolutionContext,
    Resolver,
    Scaffolder,
    ScaffoldRequest,
    scaffold_with,
)
from pydantic import Field, create_model

from matos_dagster.library import archive_definitions, as_topic_set
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource

# `{{ env.X }}` or `{{ env('X') }}` alone: the whole value is the variable's.
_ENV = re.compile(r"""\s*\{\{\s*env(?:\.(\w+)|\(\s*['"](\w+)['"]\s*\))\s*\}\}\s*""")


# Settings a user writes as a YAML mapping as well as the resource's string (`key=value;...`).
MAPPINGS = {("SparkResource", "conf")}


def _connection_model(resource: type) -> type[Model]:
    """The `defs.yaml` form of a resource: each of its settings, optional, a value or `{{ env.X }}`."""
    def kind(name: str) -> Any:
        if (resource.__name__, name) in MAPPINGS:
            return Optional[Union[str, dict[str, Union[str, int, float, bool]]]]
        return Optional[Union[str, int]]

    return create_model(
        f"{resource.__name__.removesuffix('Resource')}Connection", __base__=Model,
        **{name: (kind(name), Field(default=None, description=info.description))
           for name, info in resource.model_fields.items()})


def _pairs(field: str, mapping: dict) -> str:
    """A mapping as the resource's `key=value;...` string; a `;` or `=` that would change its meaning refused."""
    for key, value in mapping.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if ";" in f"{key}{text}" or "=" in str(key):
            raise ValueError(f"{field}: {key}: {text!r} has a `;` (or its key a `=`), which the setting cannot carry")
    return ";".join(f"{key}={str(v).lower() if isinstance(v, bool) else v}" for key, v in mapping.items())


def _resolve_connection(resource: type):
    """The resolver of a connection: `{{ env.X }}` as EnvVar("X"), any other value as given (templated)."""

    def resolve(context: ResolutionContext, model: Model) -> Any:
        values = {}
        for name, raw in model.model_dump(exclude_none=True).items():
            whole = _ENV.fullmatch(raw) if isinstance(raw, str) else None
            if whole:
                variable = whole.group(1) or whole.group(2)
                values[name] = EnvVar.int(variable) if resource.model_fields[name].annotation is int else EnvVar(variable)
            else:
                values[name] = context.resolve_value(raw)
        try:
            for name, value in values.items():
                if isinstance(value, dict):
                    values[name] = _pairs(".".join(map(str, [*context.path, name])), value)
            return resource(**values)
        except ValueError as e:  # pydantic's: a required setting missing, a number that is not one
            problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in getattr(e, "errors", list)())
            raise ValueError(f"{'.'.join(map(str, context.path))}: {problems or e}") from None

    return Resolver(resolve, model_field_type=_connection_model(resource), inject_before_resolve=False,
                    description=CONNECTIONS[resource.__name__])


CONNECTIONS = {
    "KafkaResource": "The Kafka cluster: the `MATOS_KAFKA_*` settings without their prefix (below).",
    "SwiftResource": "The Swift container: the `MATOS_SWIFT_*` settings without their prefix (below).",
    "SparkResource": "Where the archive's Spark tasks run: `master` and `conf` (below).",
}


def _about(text: str) -> Resolver:
    """A plain attribute with its meaning, which `dg` and the generated reference show."""
    return Resolver.default(description=text)


def _archive_name(folder: str) -> str:
    """A component folder's name as an archive name (letters, digits, `_`, a letter first)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", folder)
    return name if re.match(r"[A-Za-z]", name) else f"archive_{name}"


class KafkaArchiveScaffolder(Scaffolder):
    """Writes a `defs.yaml` to start from: one topic, connections read from environment variables."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(STARTER.format(type=request.type_name,
                                                                       name=_archive_name(request.target_path.name)))


STARTER = """\
type: {type}

attributes:
  # Every Dagster name of this archive comes from it: asset keys {name}/archive_<topic>, jobs and
  # sensors {name}_archive_ranges, {name}_lag, ..., resources {name}_kafka, {name}_swift, {name}_spark.
  name: {name}
  group: archive
  # The topics to archive, by name or by pattern; every key of a topics file, and its `defaults`.
  topics:
    - name: orders
    # - pattern: "logs\\\\..*"
    #   exclude: ["logs\\\\.debug\\\\..*"]
  defaults:
    group: matos-archiver        # the consumer group whose committed offsets say what is archived
  # "{{{{ env.X }}}}" is read from the environment where the resource is used, never stored.
  kafka:
    bootstrap_servers: "{{{{ env.KAFKA_BOOTSTRAP_SERVERS }}}}"
    # security_protocol: SASL_SSL
    # username: token
    # password: "{{{{ env.KAFKA_PASSWORD }}}}"
  swift:
    auth_url: "{{{{ env.SWIFT_AUTH_URL }}}}"   # v1: .../auth/v1.0; Keystone v3: auth_version: "3", .../v3
    user: "{{{{ env.SWIFT_USER }}}}"           # v1: account:user; Keystone v3: user_id, project_id
    key: "{{{{ env.SWIFT_KEY }}}}"
    container: matos-archive
  spark:
    master: "{{{{ env.SPARK_MASTER }}}}"       # sc://host:15002 (Spark Connect), local[*], spark://host:7077
"""


@scaffold_with(KafkaArchiveScaffolder)
@dataclass
class KafkaArchive(Component, Resolvable):
    """Archive Kafka topics into an OpenStack Swift container, batch by batch, exactly once.

    The component of `archive_definitions`: an archive asset per topic (partitioned by offset ranges)
    with its monitor check, the topic's days, the `lag`, `monitor` and `days` sensors, the jobs and
    schedules, and the three resources. `dg scaffold defs matos_dagster.KafkaArchive <name>` writes a
    `defs.yaml` to start from:

    ```yaml
    type: matos_dagster.KafkaArchive
    attributes:
      name: eu
      topics:
        - name: orders
        - pattern: "logs\\\\..*"
      kafka:
        bootstrap_servers: "{{ env.KAFKA_EU_SERVERS }}"
      swift:
        auth_url: "{{ env.SWIFT_AUTH_URL }}"
        user: "{{ env.SWIFT_USER }}"
        key: "{{ env.SWIFT_KEY }}"
        container: archive-eu
      spark:
        master: sc://spark:15002
    ```

    Attributes:
        topics: The topics, as the topics file's `topics:` list (names, patterns, every key).
        kafka: The Kafka cluster: `bootstrap_servers`, `security_protocol`, `sasl_mechanism`,
            `username`, `password`, `ca_file`, `client_id`, `timeout_s`.
        swift: The Swift container: `auth_url`, `container`, `prefix` and the credentials (v1:
            `user`, `key`; Keystone v3: `auth_version: "3"` with `user_id` and `project_id`, or user
            and project names with their domains, or an application credential), `region`, `ca_file`.
        spark: Where the archive's Spark tasks run: `master` (`sc://host:port`, `local[*]`,
            `spark://host:7077`) and `conf`.
        defaults: The topics file's `defaults:`, for every topic.
        name: The archive's name, from which every Dagster name is derived (`archive_definitions`);
            unset, the component's folder name. Two archives in one project need two names.
        group: The asset group of the archive assets.
        sensor_interval_s: Seconds between two ticks of the lag, monitor and days sensors; the
            lag sensor also asks Kafka at its first tick after a run of its ranges ended (it ticks
            every 10 s, or this if less).
        monitor_interval_s: The oldest a topic's monitor verdict may be, in seconds.
        retention_cron: When the `retention` job prunes old partition keys and runs.
        compact_cron: When the `compact` job merges small archived ranges into large ones.
        expire_cron: When the `expire` job removes records older than each topic's `archive_retention_days`.
    """

    topics: Annotated[list[Union[str, dict[str, Any]]], _about(
        "The topics file's `topics:` list: names and patterns, each with any key a topic takes. Schema files "
        "are relative to the component's folder.")]
    kafka: Annotated[KafkaResource, _resolve_connection(KafkaResource)]
    swift: Annotated[SwiftResource, _resolve_connection(SwiftResource)]
    spark: Annotated[SparkResource, _resolve_connection(SparkResource)]
    defaults: Annotated[dict[str, Any], _about("The topics file's `defaults:`, for every topic.")] = field(
        default_factory=dict)
    name: Annotated[Optional[str], _about(
        "The archive's name, from which every Dagster name is derived; unset, the component's folder name. "
        "Two archives in one project need two names.")] = None
    group: Annotated[str, _about("The asset group of the archive assets.")] = "archive"
    sensor_interval_s: Annotated[int, _about(
        "Seconds between two ticks of the lag, monitor and days sensors; the lag sensor also asks Kafka at its first "
        "tick after a run of its ranges ended (it ticks every 10 s, or this if less).")] = 30
    monitor_interval_s: Annotated[int, _about("The oldest a topic's monitor verdict may be, in seconds.")] = 300
    retention_cron: Annotated[str, _about("When the `retention` job prunes old partition keys and runs.")] = \
        "7 * * * *"
    compact_cron: Annotated[str, _about("When the `compact` job merges small archived ranges into large ones.")] = \
        "37 * * * *"
    expire_cron: Annotated[str, _about(
        "When the `expire` job removes records older than each topic's `archive_retention_days`.")] = "17 3 * * *"

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        # Schema files named in the topics are relative to the component's folder.
        topics = as_topic_set({"topics": self.topics, **({"defaults": self.defaults} if self.defaults else {})},
                              base=context.path)
        return archive_definitions(
            topics, self.kafka, self.swift, self.spark,
            name=_archive_name(context.path.name) if self.name is None else self.name, group=self.group,
            sensor_interval_s=self.sensor_interval_s, monitor_interval_s=self.monitor_interval_s,
            retention_cron=self.retention_cron, compact_cron=self.compact_cron, expire_cron=self.expire_cron,
            # The project's executor for its assets' runs; the archive's jobs run in process anyway.
            executor=None)
