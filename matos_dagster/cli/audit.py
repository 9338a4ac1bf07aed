"""`matos audit`: verify a topic's archive from outside Dagster, with the MATOS_* settings (or, with
`matos --archive NAME`, with the resources of that archive of the user's project).

The settings reach the resources as they reach Dagster's (EnvVar, resolved by the resource
itself), built here from settings.py and topics.py: the command line imports no
`definitions`, so nothing it imports can import it back. `matos audit` hands its arguments here.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from matos_dagster.cli.common import prog
from matos_dagster.core import settings, topics
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.incarnations import IncarnationError
from matos_dagster.core.swift.store import Store
from matos_dagster.core.verify.audit import EVERYTHING, FROM_MARK, verify_topic


def resource_from_env(cls: type, env_prefix: str) -> Any:
    """A resource with every field read from `<env_prefix><FIELD>` (the names settings.py lists)."""
    from dagster import EnvVar

    fields = {name: (EnvVar.int if f.annotation is int else EnvVar)(f"{env_prefix}{name.upper()}")
              for name, f in cls.model_fields.items()}
    return cls(**fields).process_config_and_initialize()


DESCRIPTION = ("Verify a topic's archive in Swift against its manifests and Kafka, from outside Dagster, with "
               "the MATOS_* settings. By default each partition is audited from its audit mark (how far earlier "
               "audits found it sound; kept in Swift under topic=<t>/_audit/) and the mark is moved. Exit status: "
               "0 all is well, 1 problems or unacknowledged data loss found (printed), 2 usage error.")


def main(argv: list[str] | None = None) -> int:
    """`matos audit` on its own (the same parser): for a caller that imports no `cli` parser."""
    parser = argparse.ArgumentParser(prog=f"{prog()} audit", description=DESCRIPTION)
    add_arguments(parser)
    return run(parser.parse_args(argv), parser.error)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", required=True, help="a topic of the topics file (MATOS_TOPICS_FILE)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--sample", type=int, default=0, metavar="N",
                     help="also compare N records a range with Kafka, while Kafka still has them")
    how.add_argument("--full", action="store_true", help="also compare every record with Kafka")
    where = parser.add_mutually_exclusive_group()
    # Spelled as `matos verify`'s options (its job's config): one spelling of each.
    where.add_argument("--audit-all", action="store_true", dest="all",
                       help="audit every entry from each partition's first (lists the whole history), and "
                       "move the audit marks")
    where.add_argument("--from-offset", type=int, dest="from_offset", metavar="OFFSET",
                       help="audit each partition from OFFSET on (the marks move only if OFFSET is at or below them)")
    parser.add_argument("--incarnation", default=None, metavar="N|TOPIC_ID",
                        help="which log of the topic's name, when it was deleted and created again: its number (1 "
                        "the first) or Kafka's topic id; default: the newest. Only the log Kafka still holds is "
                        "compared with Kafka")


def run(args: argparse.Namespace, error=None) -> int:
    """Audit as `args` say; `error(message)` refuses a bad argument (argparse's: exit status 2)."""
    if args.sample < 0:
        error(f"--sample must be >= 0, got {args.sample}")
    if args.from_offset is not None and args.from_offset < 0:
        error(f"--from-offset must be an offset >= 0, got {args.from_offset}")
    since = EVERYTHING if args.all else FROM_MARK if args.from_offset is None else args.from_offset
    from matos_dagster.cli import archive

    if archive.named():  # an archive of the user's project: its topics, its resources
        try:
            chosen = archive.current()
        except Exception as e:  # noqa: BLE001 - no such archive, a project that does not load
            print(f"verify: {e}", file=sys.stderr)
            return 2
        topic = chosen.topic_set.get(args.topic)
        if topic is None:
            print(f"verify: topic {args.topic!r} is not in {chosen.origin}; it has {chosen.topic_set.describe()}",
                  file=sys.stderr)
            return 2
        connect = (lambda: chosen.resource("kafka").process_config_and_initialize(),
                   lambda: chosen.resource("swift").process_config_and_initialize().params())
    else:
        try:
            settings.check()  # a bad setting: one line naming it, before Kafka or Swift is asked
            settings.apply_defaults()
            cfgs = topics.load(os.environ["MATOS_TOPICS_FILE"], default_group=os.environ["MATOS_KAFKA_GROUP"])
        except Exception as e:  # noqa: BLE001 - a broken topics file or setting is a usage error
            print(f"verify: cannot load the settings: {e}", file=sys.stderr)
            return 2
        by_name = {t.name: t for t in cfgs}
        if args.topic not in by_name:
            print(f"verify: topic {args.topic!r} is not in the topics file ({os.environ['MATOS_TOPICS_FILE']}); "
                  f"it has {sorted(by_name)}", file=sys.stderr)
            return 2
        topic = by_name[args.topic]
        from matos_dagster.resources import KafkaResource, SwiftResource

        connect = (lambda: resource_from_env(KafkaResource, "MATOS_KAFKA_"),
                   lambda: resource_from_env(SwiftResource, "MATOS_SWIFT_").params())
    try:
        kafka, params = connect[0](), connect[1]()
        # A plain Store, not swift.store(): verifying must not create a missing container.
        with Store(params) as store:
            report = verify_topic(kafka, store, layout.join(params.prefix, topic.prefix), topic,
                                  None if args.full else args.sample, since=since, move_mark=True,
                                  incarnation=args.incarnation)
    except IncarnationError as e:  # a number or id the archive does not have: a usage error
        print(f"verify: --incarnation: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - Kafka or Swift unreachable, a bad setting: not verified
        print(f"verify: could not verify {args.topic}: {e}", file=sys.stderr)
        return 1
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
