"""`matos` (or `python -m matos_dagster`): the operator's commands.

Every command checks its settings and arguments before anything reaches the network, and a
refusal is one line that says what to change (exit status 2). Commands that archive, verify,
restore, compact or load run the archive's Dagster jobs in this process, recorded in the
instance of $DAGSTER_HOME (in the repository's development setup, default
`<MATOS_DEVSTACK_DIR>/dagster`, the local stack's), so they show in the UI. The instance's storage
is created once, under a lock (instance.py), whatever runs beside. The archive is the repository's
own (definitions.py), or with `--archive NAME` one of the user's Dagster project (cli/archive.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from matos_dagster import instance
from matos_dagster.cli import jobs
from matos_dagster.cli.common import Refused, prog
from matos_dagster.core import settings

Formatter = argparse.RawDescriptionHelpFormatter

EPILOG = """first steps:
  matos check                     are the settings right? (Kafka, Swift, Spark, Dagster)
  matos add-ranges demo           what is pending in `demo`, as offset ranges
  matos archive KEY ...           archive those ranges
  matos backfill demo             everything pending, as one Dagster backfill
  matos monitor demo              lag, gaps and loss per partition
  matos metrics                   the same for Prometheus, on :9464/metrics

In your own Dagster project (the KafkaArchive component), from its folder:
  matos --archive eu check        the archive named `eu` of the project's definitions

Settings are MATOS_* environment variables; `python -m matos_dagster.core.settings` lists them."""


def _version() -> str:
    try:
        return version("matos-dagster")
    except PackageNotFoundError:
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog(), formatter_class=Formatter, epilog=EPILOG,
                                description="Archive Kafka topics into OpenStack Swift, exactly once: the "
                                "operator's commands.")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show the log of the libraries (librdkafka, once per kind of line)")
    p.add_argument("--archive", metavar="NAME",
                   help="the archive of this name in your Dagster project (the `name` of its KafkaArchive "
                   "component), found from the project's folder; its connections are its resources'. "
                   "Default: the archive of the MATOS_ settings and topics file")
    p.add_argument("--module", metavar="MODULE",
                   help="with --archive: the Python module of the definitions that hold it; default: the dg "
                   "project's (its [tool.dg.project] root module's `definitions`)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, description: str, example: str, run) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=description, epilog=f"example:\n  matos {example}",
                           formatter_class=Formatter)
        c.set_defaults(run=run)
        return c

    from matos_dagster.cli import check, ranges

    command("check", "check the settings: Kafka, Swift, Spark and the Dagster instance, one line each",
            "Connect to Kafka with the configured security and read every topic of the topics file and its "
            "group; authenticate to Swift and prove the container writable (a probe object, removed); reach "
            "the Spark master; open the Dagster instance. One line per part, OK or what to change. Exit "
            "status 0 when all is well, 1 otherwise.", "check", lambda args: check.run())
    c = command("add-ranges", "add [start, end) of a topic as archive partition keys",
                "Add the offset range [start, end) of a topic as partition keys of its archive asset, cut "
                "into ranges no larger than the topic's max_range_records. Without offsets: everything "
                "pending, from where archiving goes on to the log end.",
                "add-ranges demo --partition 0 --start 0 --end 5000", ranges.add_ranges)
    c.add_argument("topic", metavar="TOPIC", help="a topic of the topics file")
    _partition(c)
    c.add_argument("--start", type=int, default=-1, help="first offset; -1 (default): where archiving goes on")
    c.add_argument("--end", type=int, default=-1, help="end offset, exclusive; -1 (default): the log end offset")
    c = command("archive", "archive the ranges of these keys, in offset order, each in its own run",
                "Archive the offset ranges of these partition keys (added first with add-ranges, or by the "
                "sensor), in offset order, each in a run of its own; print records, objects and where.",
                "archive demo:p00000:00000000000000000000-00000000000000005000", ranges.archive)
    c.add_argument("keys", nargs="+", metavar="KEY", help="partition keys, `<topic>:p<partition>:<start>-<end>`")
    c.add_argument("--one-run", action="store_true",
                   help="all the keys in one run of the archive_ranges job (as the lag sensor's runs), of any topics")
    c = command("backfill", "add every pending range of a topic and archive them as one Dagster backfill",
                "Add everything pending of a topic as ranges and archive them as ONE Dagster backfill, run "
                "by the daemon (make run, or dg dev); --wait prints each range's outcome.",
                "backfill demo --wait", ranges.backfill)
    c.add_argument("topic", metavar="TOPIC", help="a topic of the topics file")
    _partition(c)
    c.add_argument("--wait", action="store_true", help="wait until the backfill has ended and print each range's outcome")
    c = command("acknowledge-loss", "record offsets deleted before they were archived, and go on past them",
                "Records were deleted from Kafka before they were archived: record the loss in the archive "
                "(partition, offsets, when, the reason) and move the committed offset past it. Nothing else "
                "ever moves it past unarchived offsets.",
                "acknowledge-loss demo --partition 0 --reason 'retention ran out during the outage'",
                ranges.acknowledge_loss)
    c.add_argument("topic", metavar="TOPIC", help="a topic of the topics file")
    c.add_argument("--partition", type=int, required=True, help="the partition that lost records")
    c.add_argument("--reason", required=True, help="why the records are gone; recorded in the archive")
    c.add_argument("--start", type=int, default=-1, help="first lost offset; -1: the committed offset")
    c.add_argument("--end", type=int, default=-1, help="end of the loss, exclusive; -1: the log start offset")
    c = command("remove-key", "remove partition keys from the archive assets (Swift is not touched)",
                "Remove partition keys from the archive assets, e.g. a malformed one added in the UI. What "
                "is archived in Swift stays as it is.",
                "remove-key demo:p00000:00000000000000000000-00000000000000000001", ranges.remove_key)
    c.add_argument("keys", nargs="+", metavar="KEY", help="partition keys to remove")
    jobs.add_subcommands(sub, Formatter)
    from matos_dagster.cli import forget

    c = command("forget", "erase the records of Kafka keys from a topic's whole archive, and record it",
                forget.DESCRIPTION, "forget --topic orders --key customer-42 --reason 'ticket 4711'", forget.run)
    forget.add_arguments(c)
    from matos_dagster.cli import audit

    c = command("audit", "verify a topic's archive from outside Dagster: entries, objects, optionally records "
                "against Kafka", audit.DESCRIPTION, "audit --topic demo --sample 20",
                lambda args: audit.run(args, audit_error))
    audit_error = c.error
    audit.add_arguments(c)
    from matos_dagster.cli import metrics

    c = command("metrics", "serve the archive's metrics for Prometheus on /metrics (port 9464)",
                metrics.DESCRIPTION, "metrics --port 9464", metrics.run)
    metrics.add_arguments(c)
    c = command("instance", "create the Dagster instance's storage, or repair one broken by two commands at once",
                "Create the storage of the Dagster instance in $DAGSTER_HOME once, under a lock (every command "
                "does this first). --repair mends an instance whose sqlite storage two processes created at "
                "once (every Dagster command then fails with 'more than one head').", "instance --repair", _instance)
    c.add_argument("--repair", action="store_true", help="mend storage stamped twice")
    return p


def _partition(c: argparse.ArgumentParser) -> None:
    c.add_argument("--partition", type=int, default=-1, help="partition; -1 (default): every partition")


def _instance(args: argparse.Namespace) -> int:
    if args.repair:
        mended = instance.repair()
        print(f"repaired {', '.join(mended)}" if mended else "nothing to repair")
    print(f"Dagster instance ready: {instance.prepare()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from matos_dagster.cli import archive

    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.CRITICAL,
                        format="%(levelname)s %(name)s: %(message)s")
    archive.choose(args.archive, args.module)
    if args.command == "audit":  # outside Dagster: no instance; it says what is wrong itself
        return args.run(args)
    try:
        if args.command != "check":  # check reports bad settings itself, with the rest
            # The connections are checked where the archive is loaded: a project's has its own.
            settings.check(connections=False)
        if args.command == "instance" and args.repair:
            os.environ["DAGSTER_HOME"] = str(instance.default_home())
        else:
            os.environ["DAGSTER_HOME"] = str(instance.prepare())
        return args.run(args)
    except (Refused, settings.SettingError, instance.InstanceError, ValueError) as e:
        # MalformedKey, a bad setting or topics file, Kafka or Swift refusing: the message says what to change.
        lines = str(e).splitlines()
        for i, line in enumerate(lines):  # a setting per line; other messages go on with a command to run
            lead = f"{prog()} {args.command}: " if i == 0 or isinstance(e, settings.SettingError) else ""
            print(lead + line, file=sys.stderr)
        return 2
