"""One command per job that takes run config: its options are the job's config fields.

The options are made from the job's `Config` class (name, type, default, description), so
the command and the Launchpad can never disagree, and nobody writes run config by hand.
"""

from __future__ import annotations

import argparse
import typing
from dataclasses import dataclass
from typing import Any, Callable

from matos_dagster.cli.common import Refused, output_metadata, run_job, topic_of


@dataclass(frozen=True)
class JobCommand:
    name: str  # the subcommand
    job: str
    op: str
    config: Callable[[], type]  # the op's Config class (imported late: argparse needs no Dagster)
    help: str
    example: str
    topic_in_file: bool = True  # the topic must be in the topics file
    least: tuple[tuple[str, int], ...] = ()  # (field, its smallest value): refused before any run
    check: Callable[[dict], None] | None = None  # more refusals before any run: raises Refused


def _load_config():
    from matos_dagster.jobs.load import LoadConfig
    return LoadConfig


def _verify_config():
    from matos_dagster.jobs.verify import VerifyConfig
    return VerifyConfig


def _restore_config():
    from matos_dagster.jobs.restore import RestoreConfig
    return RestoreConfig


def _restore_check(config: dict) -> None:
    """A target schema registry URL that is not one is refused here, not by a failed run."""
    from matos_dagster.core.restore.plan import RestoreRefused
    from matos_dagster.core.restore.registry import target_registry
    try:
        target_registry(config.get("target_schema_registry_url", ""))
    except RestoreRefused as e:
        raise Refused(f"--target-schema-registry-url: {e}") from None


def _compact_config():
    from matos_dagster.jobs.compact import CompactConfig
    return CompactConfig


def _expire_config():
    from matos_dagster.jobs.expire import ExpireConfig
    return ExpireConfig


def _retention_config():
    from matos_dagster.jobs.retention import RetentionConfig
    return RetentionConfig


def _iceberg_config():
    from matos_dagster.jobs.iceberg import IcebergConfig
    return IcebergConfig


COMMANDS = (
    JobCommand("load", "load", "produce", _load_config,
               "produce test records into a topic: count, sizes, keys, headers, partitions, transactions, rate",
               "load demo --count 10000 --value-bytes 1024 --partitions 0 1", topic_in_file=False,
               least=(("count", 0), ("value_bytes", 0), ("create_partitions", 0), ("transaction_size", 1))),
    JobCommand("verify", "verify", "verify_archive", _verify_config,
               "check a topic's archive: gaps, overlaps, objects, checksums, records, loss (exit 1 on a problem)",
               "verify demo --sample 20", least=(("sample", -1), ("from_offset", 0))),
    JobCommand("restore", "restore", "restore_records", _restore_config,
               "restore archived records from Swift into a Kafka topic, exactly once",
               "restore demo --partition 0 --target-topic demo-restored", topic_in_file=False,
               least=(("partition", -1), ("start", -1), ("end", -1)), check=_restore_check),
    JobCommand("compact", "compact", "compact_archive", _compact_config,
               "merge a topic's small archived ranges into large ones, exactly once",
               "compact demo --partition 0", least=(("partition", -1), ("max_groups", 0))),
    JobCommand("expire", "expire", "expire_archive", _expire_config,
               "remove archived records older than each topic's archive_retention_days (the expire job)",
               "expire demo"),
    JobCommand("retention", "retention", "apply_retention", _retention_config,
               "remove old partition keys and runs from Dagster (never anything in Swift)",
               "retention --dry-run"),
    JobCommand("iceberg-table", "iceberg_table", "table_from_manifests", _iceberg_config,
               "rebuild a topic's Iceberg table from its manifests, or check it",
               "iceberg-table demo --rebuild"),
)


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """An option per config field (a required `topic` is the positional TOPIC)."""
    for name, field in config_cls.model_fields.items():
        doc = field.description or ""
        kind = field.annotation
        if typing.get_origin(kind) is typing.Union:  # Optional[X]
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if name == "topic":  # the topic is what every command is about: the positional TOPIC
            optional = {} if field.is_required() else {"nargs": "?", "default": field.default}
            shown = "" if field.is_required() or field.default in ("", None) else f" (default: {field.default})"
            parser.add_argument("topic", metavar="TOPIC", help=doc + shown, **optional)
            continue
        flag = "--" + name.replace("_", "-")
        default = field.get_default(call_default_factory=True)
        if kind is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=default, help=doc)
        elif typing.get_origin(kind) is list:
            (item,) = typing.get_args(kind)
            parser.add_argument(flag, dest=name, nargs="*", type=item, default=default, metavar=name.upper().rstrip("S"),
                                help=doc)
        elif typing.get_origin(kind) is dict:
            parser.add_argument(flag.rstrip("s"), dest=name, action="append", type=_pair, default=None,
                                metavar="KEY=VALUE", help=doc + " Repeat the option for each.")
        else:
            parser.add_argument(flag, dest=name, type=kind, default=default, required=field.is_required(),
                                metavar=name.upper(), help=doc + ("" if default in (None, "", []) else
                                                                  " (default: %(default)s)"))


def _pair(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def config_from(args: argparse.Namespace, config_cls: type) -> dict[str, Any]:
    config = {}
    for name, field in config_cls.model_fields.items():
        value = getattr(args, name)
        if typing.get_origin(field.annotation) is dict:
            value = dict(value or [])
        if field.is_required() or value != field.get_default(call_default_factory=True):
            config[name] = value
    return config


def run(spec: JobCommand, args: argparse.Namespace) -> int:
    cls = spec.config()
    config = config_from(args, cls)
    try:
        cls(**config)  # the Config's own validation, before any run is recorded
    except Exception as e:  # noqa: BLE001 - pydantic's message names the field
        raise Refused(str(e).splitlines()[0]) from None
    for name, least in spec.least:
        if config.get(name) is not None and config[name] < least:
            raise Refused(f"--{name.replace('_', '-')} must be {least} or more, got {config[name]}")
    if spec.check is not None:
        spec.check(config)
    if spec.topic_in_file and config.get("topic"):  # compact's empty topic: every topic
        topic_of(config["topic"])
    try:
        output, result = run_job(spec.job, spec.op, config)
    except Refused as e:
        if spec.name == "verify":  # the report itself: what is wrong, where
            print(str(e))
            return 1
        raise
    print(f"{spec.name}: done (run {result.run_id}): {output}")
    for name, value in output_metadata(result, spec.op).items():
        print(f"  {name}: {value}")
    return 0


def monitor(args: argparse.Namespace) -> int:
    """The monitor check of a topic, now: its status and a line per partition."""
    from dagster import DagsterInstance

    from matos_dagster.assets.monitor import MONITOR_JOB, check_key
    from matos_dagster.cli import archive
    from matos_dagster.cli.common import failure, quiet

    topic = topic_of(args.topic)
    chosen = archive.current()
    job = chosen.job(MONITOR_JOB).get_subset(asset_check_selection={check_key(topic, chosen.names)})
    with DagsterInstance.get() as instance:
        result = job.execute_in_process(run_config=quiet(), instance=instance, raise_on_error=False)
    evaluations = result.get_asset_check_evaluations()
    if not evaluations:
        raise Refused(failure(result))
    (evaluation,) = evaluations
    print(f"{topic.name}: {evaluation.description} (run {result.run_id})")
    table = evaluation.metadata["partitions"].value
    for record in table.records:
        row = record.data
        print("  " + "  ".join(f"{k}={v}" for k, v in row.items() if v not in (None, "")))
    return 0 if evaluation.passed else 1


def add_subcommands(sub, formatter) -> None:
    for spec in COMMANDS:
        p = sub.add_parser(spec.name, help=spec.help, description=spec.help[0].upper() + spec.help[1:] + ".",
                           epilog=f"example:\n  matos {spec.example}", formatter_class=formatter)
        add_config_arguments(p, spec.config())
        p.set_defaults(run=lambda args, spec=spec: run(spec, args))
    p = sub.add_parser("monitor", help="evaluate a topic's monitor check now: lag, gaps, loss per partition",
                       description="Evaluate the monitor check of a topic now (as the monitor sensor does) and print "
                       "its status, OK, WARN or ERROR, and a line per partition. Exit status 1 unless OK.",
                       epilog="example:\n  matos monitor demo", formatter_class=formatter)
    p.add_argument("topic", metavar="TOPIC", help="a topic of the topics file")
    p.set_defaults(run=monitor)

