"""The topics to archive: a YAML file, like the Kafka Observer's topic mapping (seed 002).

    defaults:            # optional, applies to every topic
      format: parquet
    topics:
      - name: orders
        group: orders-archiver
        batch: {records: 50000, age_s: 60}
        value_format: avro     # typed columns beside the raw bytes (core/schemas/typed.py)

Validated when the definitions load, so a mistake fails loudly before any run starts.
No Dagster imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from matos_dagster.core import settings
from matos_dagster.core.offsets.ranges import OffsetRange, check_topic
from matos_dagster.core.schemas.decode import FORMATS as VALUE_FORMATS
from matos_dagster.core.schemas.decode import TYPES
from matos_dagster.core.schemas.errors import SchemaError
from matos_dagster.core.schemas.sources import AVRO, JSON, PROTOBUF, FileSource
from matos_dagster.core.swift import layout
from matos_dagster.core.topic_help import HELP  # each key's meaning: reference() below

SWIFT_MAX_OBJECT = 5 * 1024**3  # Swift refuses single objects above 5 GiB
SWIFT_MAX_NAME = 1024  # Swift's default max_object_name_length, in bytes
FORMATS = ("parquet", "jsonl")


class TopicsFileError(ValueError):
    """The topics file is missing, not YAML, or says something we cannot do."""


@dataclass(frozen=True)
class TopicConfig:
    name: str
    group: str = "matos-archiver"
    format: str = "parquet"  # parquet (zstd) or jsonl (gzip)
    prefix: str = ""  # between the Swift prefix and `topic=<name>/`
    # Offsets per Spark task. A task's start (its consumer, Swift's auth, the worker's hand-off)
    # costs ~70 ms of CPU and ~0.1 s of an idle slot: 500,000 keeps that small for small
    # records (W2, 100 B: +40% records/s over 100,000) and still splits a full range
    # (max_range_records) in two. A task's memory is bounded by object_bytes, not by this.
    slice_records: int = 500_000
    object_bytes: int = 64 * 1024**2  # record bytes per object, before compression
    max_record_bytes: int = 16 * 1024**2  # a larger record fails the range, naming its offset
    # batch policy: a partition's pending records become a range when any of these is reached
    batch_records: int = 10_000
    batch_bytes: int = 64 * 1024**2
    # Below the sensor's 30 s interval, so at a steady rate every tick cuts a range: a record
    # then waits for one tick, not two (the age read at a tick is about one interval).
    batch_age_s: float = 20.0
    max_range_records: int = 1_000_000  # a backlog is cut into ranges no larger than this
    # monitor thresholds
    lag_warn_records: int = 100_000
    stall_s: float = 900.0  # ERROR when a lagging partition's committed offset does not move this long
    # compaction (core/compact/): adjacent ranges merge into ranges of this many record bytes
    compact_bytes: int = 64 * 1024**2
    compact_min_age_s: float = 3600.0  # ranges archived less than this ago stay as they are
    # ...or until its records span this much Kafka time: a quiet topic's day becomes one range.
    compact_span_s: float = 86400.0
    # Replaced ranges are deleted this long after the switch: longer than any read or restore.
    compact_grace_s: float = 86400.0
    # expiry (core/expire/): records stamped more than this many days ago leave the archive; None: never
    archive_retention_days: float | None = None
    # typed columns beside the raw bytes (core/schemas/typed.py): none, avro, protobuf, json_schema, json
    key_format: str = "none"
    value_format: str = "none"
    key_schema_file: str = ""  # a schema kept as a file (values not framed); empty: the schema registry
    value_schema_file: str = ""
    key_types: str = "one"  # one type for every record, or one member per record name (by_record_name)
    value_types: str = "one"
    decode_strict: bool = False  # a record that does not decode fails its range
    # event-time windows (core/days/): a partition per day (or hour) of the records' timestamps, UTC
    time_window: str = "day"  # day, hour, or none
    allowed_lateness_s: float = 600.0
    idle_s: float = 600.0
    future_margin_s: float = 3600.0
    windows_start: str = "2024-01-01"
    windows_summary: bool = False  # also deploy summary_<topic>, the example of an asset on a window

    @property
    def asset_name(self) -> str:
        """Dagster names allow only letters, digits and `_`; topics also allow `.` and `-`."""
        return "archive_" + re.sub(r"[^A-Za-z0-9_]", "_", self.name)

    @property
    def partitions_name(self) -> str:
        return self.asset_name + "_ranges"

    @property
    def windows_asset_name(self) -> str:
        """The asset of the topic's complete days (or hours): `days_<topic>`, `hours_<topic>`."""
        return f"{self.time_window}s_" + self.asset_name.removeprefix("archive_")


_FIELDS = {f.name: f for f in fields(TopicConfig)}
_BATCH_KEYS = {"records": "batch_records", "bytes": "batch_bytes", "age_s": "batch_age_s",
               "max_range_records": "max_range_records"}


def load(path: str | Path, default_group: str | None = None, registry_url: str | None = None) -> "TopicSet":
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TopicsFileError(
            f"cannot read the topics file {path} (MATOS_TOPICS_FILE): {e.strerror}"
        ) from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TopicsFileError(f"{path} is not valid YAML: {e}") from None
    try:
        return parse(doc, default_group, registry_url, base=path.parent)
    except TopicsFileError as e:
        raise TopicsFileError(f"{path}: {e}") from None


def parse(doc: Any, default_group: str | None = None, registry_url: str | None = None,
          base: Path | None = None) -> "TopicSet":
    """The topics and patterns of a topics file's document. `registry_url`: MATOS_SCHEMA_REGISTRY_URL's
    value (None: read it); `base`: where relative schema files are (the topics file's folder; None: here)."""
    from matos_dagster.core.topic_set import TopicPattern, TopicSet

    if registry_url is None:
        registry_url = settings.get("MATOS_SCHEMA_REGISTRY_URL")
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), list) or not doc["topics"]:
        raise TopicsFileError("expected a mapping with a non-empty list `topics:` of {name: ...} or "
                              "{pattern: ...} entries")
    unknown = set(doc) - {"defaults", "topics"}
    if unknown:
        raise TopicsFileError(f"unknown top-level keys {sorted(unknown)}; allowed: defaults, topics")
    defaults = _flatten(doc.get("defaults") or {}, "defaults")
    if default_group:
        defaults.setdefault("group", default_group)
    defaults.pop("name", None)
    out: list[TopicConfig] = []
    patterns: list[TopicPattern] = []
    seen: dict[str, str] = {}
    for i, entry in enumerate(doc["topics"]):
        where = f"topics[{i}]"
        if isinstance(entry, str):
            entry = {"name": entry}
        if isinstance(entry, dict) and "pattern" in entry:
            patterns.append(_pattern(entry, defaults, where, registry_url, base))
            continue
        values = {**defaults, **_flatten(entry, where)}
        if "name" not in values:
            raise TopicsFileError(f"{where}: every entry needs a `name` (a topic) or a `pattern` (topics by regex)")
        topic = _build(values, f"{where} ({values['name']})", registry_url, base)
        if topic.asset_name in seen:
            raise TopicsFileError(
                f"{where}: topic {topic.name!r} gives the same asset name {topic.asset_name!r} as "
                f"topic {seen[topic.asset_name]!r}"
            )
        seen[topic.asset_name] = topic.name
        out.append(topic)
    return TopicSet(out, patterns)


# A name to check a pattern entry's settings with before any topic matches it.
_PROBE = "pattern-probe"


def _pattern(entry: dict, defaults: dict[str, Any], where: str, registry_url: str, base: Path | None):
    """A `pattern:` entry: its regex and excludes checked, its settings checked once with a probe name."""
    from matos_dagster.core.topic_set import TopicPattern

    entry = dict(entry)
    pattern, exclude = entry.pop("pattern"), entry.pop("exclude", [])
    if "name" in entry:
        raise TopicsFileError(f"{where}: an entry has a `name` or a `pattern`, not both")
    exclude = [exclude] if isinstance(exclude, str) else exclude
    if not isinstance(exclude, list):
        raise TopicsFileError(f"{where}: exclude must be a regex or a list of them, got {exclude!r}")
    for what, regex in [("pattern", pattern)] + [("exclude", x) for x in exclude]:
        if not isinstance(regex, str) or not regex:
            raise TopicsFileError(f"{where}: {what} must be a non-empty regex string, got {regex!r}")
        try:
            re.compile(regex)
        except re.error as e:
            raise TopicsFileError(f"{where}: {what} {regex!r} is not a valid regex: {e}") from None
    values = {**defaults, **_flatten(entry, where)}
    label = f"{where} (pattern {pattern!r})"
    probe = _build({**values, "name": _PROBE}, label, registry_url, base)
    made: dict[str, TopicConfig] = {}

    def make(name: str) -> TopicConfig:
        # Once per topic: the settings were checked above, schema files are read once a topic.
        if name not in made:
            made[name] = _build({**values, "name": name}, f"{label} for {name!r}", registry_url, base)
        return made[name]

    return TopicPattern(pattern, tuple(exclude), make, probe)


def _flatten(entry: Any, where: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise TopicsFileError(f"{where}: expected a mapping, got {type(entry).__name__}")
    values = dict(entry)
    batch = values.pop("batch", None)
    if batch is not None:
        if not isinstance(batch, dict):
            raise TopicsFileError(f"{where}.batch: expected a mapping like {{records: 10000, age_s: 60}}")
        for k, v in batch.items():
            if k not in _BATCH_KEYS:
                raise TopicsFileError(f"{where}.batch: unknown key {k!r}; allowed: {sorted(_BATCH_KEYS)}")
            values[_BATCH_KEYS[k]] = v
    for k in values:
        if k not in _FIELDS:
            allowed = sorted((set(_FIELDS) - set(_BATCH_KEYS.values())) | {"batch"})
            raise TopicsFileError(f"{where}: unknown key {k!r}; allowed: {allowed}")
    return values


def _build(values: dict[str, Any], where: str, registry_url: str = "", base: Path | None = None) -> TopicConfig:
    typed: dict[str, Any] = {}
    for k, v in values.items():
        want = _FIELDS[k].type
        if want == "bool":
            if not isinstance(v, bool):
                raise TopicsFileError(f"{where}: {k} must be true or false, got {v!r}")
        elif want == "str":
            if not isinstance(v, str):
                raise TopicsFileError(f"{where}: {k} must be a string, got {v!r}")
        elif want == "int":
            if isinstance(v, bool) or not isinstance(v, int):
                raise TopicsFileError(f"{where}: {k} must be a whole number, got {v!r}")
        elif want == "float | None" and v is None:
            pass
        elif want in ("float", "float | None"):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TopicsFileError(f"{where}: {k} must be a number, got {v!r}")
            v = float(v)
        typed[k] = v
    try:
        check_topic(typed["name"])
    except ValueError as e:
        raise TopicsFileError(f"{where}: {e}") from None
    topic = TopicConfig(**typed)
    if topic.format not in FORMATS:
        raise TopicsFileError(f"{where}: format must be one of {FORMATS}, got {topic.format!r}")
    if topic.prefix.startswith("/") or "//" in topic.prefix or ".." in topic.prefix.split("/"):
        raise TopicsFileError(f"{where}: prefix {topic.prefix!r} must be a relative path without '..' or '//'")
    # The widest name the topic can get: the largest partition id, 20-digit offsets.
    widest = OffsetRange(topic.name, 2**31 - 1, 0, 1)
    longest = len(layout.object_name(layout.range_dir(topic.prefix, widest), 0, topic.format).encode())
    if longest > SWIFT_MAX_NAME:
        raise TopicsFileError(
            f"{where}: object names under prefix {topic.prefix[:40]!r}... would be up to {longest} bytes long, "
            f"above Swift's limit of {SWIFT_MAX_NAME} (before MATOS_SWIFT_PREFIX): shorten the prefix"
        )
    for k in ("slice_records", "object_bytes", "max_record_bytes", "batch_records", "batch_bytes",
              "max_range_records", "lag_warn_records", "compact_bytes"):
        if getattr(topic, k) <= 0:
            raise TopicsFileError(f"{where}: {k} must be > 0, got {getattr(topic, k)}")
    if topic.archive_retention_days is not None and not topic.archive_retention_days > 0:
        raise TopicsFileError(f"{where}: archive_retention_days must be > 0 (days of records to keep), got "
                              f"{topic.archive_retention_days}; leave it out to keep every record")
    if topic.time_window not in ("day", "hour", "none"):
        raise TopicsFileError(f"{where}: time_window must be day, hour or none, got {topic.time_window!r}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", topic.windows_start) or not _date_from_1970(topic.windows_start):
        raise TopicsFileError(f"{where}: windows_start must be a date from 1970-01-01 on, like 2024-01-01, "
                              f"got {topic.windows_start!r}")
    for k in ("batch_age_s", "stall_s", "compact_min_age_s", "compact_grace_s", "compact_span_s",
              "allowed_lateness_s", "idle_s", "future_margin_s"):
        if getattr(topic, k) < 0:
            raise TopicsFileError(f"{where}: {k} must be >= 0, got {getattr(topic, k)}")
    if topic.object_bytes > SWIFT_MAX_OBJECT // 2:
        raise TopicsFileError(
            f"{where}: object_bytes {topic.object_bytes} is too close to Swift's 5 GiB object limit; "
            f"use at most {SWIFT_MAX_OBJECT // 2}"
        )
    if topic.max_record_bytes > topic.object_bytes:
        raise TopicsFileError(
            f"{where}: max_record_bytes ({topic.max_record_bytes}) must not exceed object_bytes ({topic.object_bytes})"
        )
    return _check_typing(topic, where, registry_url, base)


def _date_from_1970(text: str) -> bool:
    """A real date, not before Kafka's first timestamp (the epoch)."""
    try:
        return datetime.strptime(text, "%Y-%m-%d") >= datetime(1970, 1, 1)
    except ValueError:
        return False


# The schema files each format reads (sources.FileSource), by the schema type they hold.
_FILE_TYPES = {"avro": AVRO, "protobuf": PROTOBUF, "json_schema": JSON}


def _check_typing(topic: TopicConfig, where: str, registry_url: str, base: Path | None) -> TopicConfig:
    """The typed columns' keys, each refusal one line naming the key and what to change; schema
    files resolved against `base` and read (a schema that cannot be used is refused here)."""
    files = {}
    for side in ("key", "value"):
        fmt, path = getattr(topic, f"{side}_format"), getattr(topic, f"{side}_schema_file")
        if fmt not in VALUE_FORMATS:
            raise TopicsFileError(f"{where}: {side}_format must be one of {', '.join(VALUE_FORMATS)}, got {fmt!r}")
        if fmt != "none" and topic.format != "parquet":
            raise TopicsFileError(f"{where}: {side}_format {fmt} needs `format: parquet` (typed columns are written "
                                  f"to Parquet only), got format {topic.format}")
        if path and fmt not in _FILE_TYPES:
            raise TopicsFileError(f"{where}: {side}_schema_file is set but {side}_format is {fmt}: set {side}_format "
                                  f"to avro, protobuf or json_schema, or remove {side}_schema_file")
        if path:
            file = Path(path).expanduser()
            file = file if file.is_absolute() or base is None else base / file
            if not file.is_file():
                raise TopicsFileError(f"{where}: {side}_schema_file {file} does not exist: give the path of the "
                                      f"schema file (relative to the topics file)")
            try:
                schema = FileSource(file).schema
            except (SchemaError, OSError) as e:
                raise TopicsFileError(f"{where}: {side}_schema_file: {' '.join(str(e).split())}") from None
            if schema.schema_type != _FILE_TYPES[fmt]:
                raise TopicsFileError(f"{where}: {side}_schema_file {file.name} holds a schema of type "
                                      f"{schema.schema_type}, not one for {side}_format {fmt}: change one of them")
            files[f"{side}_schema_file"] = str(file)
        types = getattr(topic, f"{side}_types")
        if types not in TYPES:
            raise TopicsFileError(f"{where}: {side}_types must be one of {', '.join(TYPES)}, got {types!r}")
        if types != "one" and fmt not in ("avro", "protobuf"):
            raise TopicsFileError(f"{where}: {side}_types {types} needs {side}_format avro or protobuf (records with "
                                  f"names), got {fmt}")
        if not path and fmt in _FILE_TYPES and not registry_url.strip():
            raise TopicsFileError(f"{where}: {side}_format {fmt} takes its schemas from a schema registry and "
                                  f"MATOS_SCHEMA_REGISTRY_URL is empty: set it, or give {side}_schema_file")
    return replace(topic, **files) if files else topic


def reference() -> str:
    """The topics file's keys as a Markdown table (the documentation's, exactly: a test compares)."""
    written = {field: f"batch.{key}" for key, field in _BATCH_KEYS.items()}
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for f in fields(TopicConfig):
        shown = str(f.default).lower() if isinstance(f.default, bool) else f.default
        default = "(required)" if f.name == "name" else f"`{shown}`" if f.default != "" else "(empty)"
        if f.name == "group":
            default = "MATOS_KAFKA_GROUP"
        if f.default is None:
            default = "(unset)"
        kind = f.type.replace(" | None", " (or unset)")
        rows.append(f"| `{written.get(f.name, f.name)}` | {kind} | {default} | {HELP[f.name]} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(reference(), end="")
