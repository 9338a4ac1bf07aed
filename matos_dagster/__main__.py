"""`python -m matos_dagster`: the operator's commands, each refusal one line that says what to change.

    backfill TOPIC [--partition P] [--wait]                  everything pending, as one Dagster backfill
    add-ranges TOPIC [--partition P] [--start S] [--end E]   add offset ranges as partition keys
    archive KEY [KEY ...]                                    archive ranges (added keys), in order
    acknowledge-loss TOPIC --partition P --reason TEXT       go on after records were deleted unarchived
    remove-key KEY [KEY ...]                                 remove keys (e.g. a malformed one added in the UI)

They run Dagster jobs and materialisations in this process, recorded in the instance of
$DAGSTER_HOME (default `<MATOS_DEVSTACK_DIR>/dagster`, the local stack's), so they show in the
UI. Dagster's own CLI (`dg launch`) runs the same things, but answers a bad key or offset
with a traceback of Dagster's; here the project's message comes first and alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from matos_dagster import loss, settings

PROG = "python -m matos_dagster"


def command(*args: str) -> str:
    """A command line that runs as printed, from any folder: this Python, by its full path."""
    return " ".join([sys.executable, "-m", "matos_dagster", *args])


class Refused(Exception):
    """A request the project refuses before anything changed: the message says what to change."""


def dagster_home() -> Path:
    """$DAGSTER_HOME, or the local stack's instance (created with the project's dagster.yaml)."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    home = Path(settings.get("MATOS_DEVSTACK_DIR")) / "dagster"
    ensure_instance(home)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def ensure_instance(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copyfile(settings.PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml")


def _quiet() -> dict:
    # The run's events are in the instance (and the UI); the console gets the outcome only.
    return {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _failure(result) -> str:
    """The user's exception of a failed in-process run: its message, without Dagster's wrapping."""
    for event in result.all_events:
        if event.is_step_failure:
            user = event.step_failure_data.user_failure_data  # a dagster Failure raised by the op
            if user is not None and user.description:
                return user.description.strip()
            error = event.step_failure_data.error
            while error.cause is not None and error.cls_name.startswith("Dagster"):
                error = error.cause
            return error.message.strip().removeprefix(f"{error.cls_name}: ")
        if event.is_run_failure and event.event_specific_data and event.event_specific_data.error:
            return event.event_specific_data.error.message.strip()
    return "the run failed; see it in the UI"


def run_job(job: str, op: str, config: dict):
    """Run one of the project's jobs in this process; Refused with its error if it fails."""
    from dagster import DagsterInstance

    from matos_dagster import definitions

    with DagsterInstance.get() as instance:
        result = definitions.defs.resolve_job_def(job).execute_in_process(
            run_config={"ops": {op: {"config": config}}, **_quiet()}, instance=instance, raise_on_error=False
        )
    if not result.success:
        raise Refused(_failure(result))
    return result.output_for_node(op)


def add_ranges(args: argparse.Namespace) -> int:
    keys = run_job("add_ranges", "add_range_keys",
                   {"topic": args.topic, "partition": args.partition, "start": args.start, "end": args.end})
    if not keys:
        print(f"nothing pending in {args.topic}: no range added")
    for key in keys:
        print(f"added {key}")
    if keys:
        print(f"archive {'it' if len(keys) == 1 else 'them'} with:\n  {command('archive', *keys)}")
    return 0


def backfill(args: argparse.Namespace) -> int:
    """add-ranges, then ONE backfill of the keys it added, run by the daemon (jobs/backfill.py)."""
    from dagster import DagsterInstance

    from matos_dagster import definitions
    from matos_dagster.jobs import backfill as bf

    topic = {t.name: t for t in definitions.TOPICS}.get(args.topic)
    if topic is None:  # before any run is recorded: a refusal changes nothing
        raise Refused(f"topic {args.topic!r} is not in the topics file ({settings.get('MATOS_TOPICS_FILE')}); "
                      f"it has {sorted(t.name for t in definitions.TOPICS)}")
    with DagsterInstance.get() as instance:
        daemon = bf.daemon_running(instance)
        if args.wait and not daemon:
            raise Refused(f"no Dagster daemon runs for the instance in {dagster_home()}, so the backfill would "
                          "never start; start one (make run, or dg dev) and run this again")
        result = definitions.defs.resolve_job_def(bf.JOB).execute_in_process(
            run_config={"ops": {"add_range_keys": {"config": {"topic": topic.name, "partition": args.partition}}},
                        **_quiet()}, instance=instance, raise_on_error=False)
        if not result.success:
            raise Refused(_failure(result))
        keys = result.output_for_node("add_range_keys")
        backfill_id = result.output_for_node(bf.OP)
        if not keys:
            print(f"nothing pending in {topic.name}: no backfill")
            return 0
        print(f"backfill {backfill_id}: {len(keys)} range(s) of {topic.name}, {keys[0]} .. {keys[-1]}")
        print(f"  progress in the UI: Runs -> Backfills -> {backfill_id}")
        if not daemon:
            print(f"  no Dagster daemon runs for {dagster_home()} now: the backfill starts when one does "
                  "(make run, or dg dev)")
        if not args.wait:
            return 0
        status = bf.wait(instance, backfill_id)
        done = bf.outcomes(instance, backfill_id, topic, keys)
        for o in done:
            if o.records is not None:
                print(f"archived {o.key}: {o.records} records (run {o.run_id})")
            else:
                print(f"{o.key}: not archived ({o.status}{f', run {o.run_id}' if o.run_id else ''})", file=sys.stderr)
        print(f"backfill {backfill_id}: {status}")
        return 0 if all(o.records is not None for o in done) else 1


def acknowledge_loss(args: argparse.Namespace) -> int:
    config = {"topic": args.topic, "partition": args.partition, "reason": args.reason}
    if args.start != -1 or args.end != -1:
        config |= {"start": args.start, "end": args.end}
    done = run_job(loss.JOB, loss.OP, config)
    print(f"{args.topic}/{args.partition}: {done} lost offsets acknowledged and recorded in the archive")
    return 0


def archive(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance, materialize

    from matos_dagster import definitions
    from matos_dagster.assets.archive import archive_asset
    from matos_dagster.assets.monitor import CHECK_NAME, monitor_check
    from matos_dagster.ranges import parse_key

    by_name = {t.name: t for t in definitions.TOPICS}
    ranges = []
    for key in args.keys:  # every key is checked before any is archived
        r = parse_key(key)
        topic = by_name.get(r.topic)
        if topic is None:
            raise Refused(f"topic {r.topic!r} of key {key!r} is not in the topics file ({settings.get('MATOS_TOPICS_FILE')}); "
                          f"it has {sorted(by_name)}")
        ranges.append((r, topic))
    failed = 0
    with DagsterInstance.get() as instance:
        for r, topic in ranges:
            if not instance.has_dynamic_partition(topic.partitions_name, r.key):
                raise Refused(f"{r.key} is not a range of {topic.asset_name} yet; add it first with:\n  "
                              + command("add-ranges", r.topic, "--partition", str(r.partition),
                                        "--start", str(r.start), "--end", str(r.end)))
        for r, topic in sorted(ranges, key=lambda rt: rt[0]):
            result = materialize([archive_asset(topic), monitor_check(topic)], partition_key=r.key, instance=instance,
                                 resources=definitions.RESOURCES, run_config=_quiet(), raise_on_error=False)
            if not result.success:
                print(f"{r.key}: not archived (run {result.run_id}): {_failure(result)}", file=sys.stderr)
                failed += 1
                continue
            (mat,) = result.asset_materializations_for_node(topic.asset_name)
            meta = mat.metadata
            how = "verified, already archived" if meta["verified_existing_archive"].value else "archived"
            print(f"{how} {r.key}: {meta['records'].value} records, {meta['objects'].value} object(s) "
                  f"-> {meta['swift_location'].value} (run {result.run_id})")
            if "archived_first" in meta and meta["archived_first"].value:  # offset order: lower ranges first
                print(f"  first archived the pending range(s) below it: {', '.join(meta['archived_first'].value)}")
            if "not_archived_first" in meta:
                print(f"  not archived first: {meta['not_archived_first'].value}")
            for evaluation in result.get_asset_check_evaluations():
                if evaluation.check_name == CHECK_NAME:
                    print(f"  monitor: {evaluation.metadata['status'].value}")
    return 1 if failed else 0


def remove_key(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from matos_dagster import definitions

    with DagsterInstance.get() as instance:
        for key in args.keys:
            owners = [t for t in definitions.TOPICS if instance.has_dynamic_partition(t.partitions_name, key)]
            if not owners:
                raise Refused(f"no archive asset has the partition key {key!r}; nothing removed")
            for t in owners:
                instance.delete_dynamic_partition(t.partitions_name, key)
                print(f"removed {key!r} from {t.asset_name} (what is archived in Swift stays as it is)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description="The archive's operator commands (see the README).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("backfill", help="add every pending range of a topic and archive them as one Dagster backfill")
    p.add_argument("topic")
    p.add_argument("--partition", type=int, default=-1, help="partition; -1 (default): every partition")
    p.add_argument("--wait", action="store_true", help="wait until the backfill has ended and print each range's outcome")
    p.set_defaults(run=backfill)
    p = sub.add_parser("add-ranges", help="add [start, end) of a topic as archive partition keys (Matos' batch)")
    p.add_argument("topic")
    p.add_argument("--partition", type=int, default=-1, help="partition; -1 (default): every partition")
    p.add_argument("--start", type=int, default=-1, help="first offset; -1 (default): where archiving goes on")
    p.add_argument("--end", type=int, default=-1, help="end offset, exclusive; -1 (default): the log end offset")
    p.set_defaults(run=add_ranges)
    p = sub.add_parser("archive", help="archive the ranges of these keys, in offset order, each in its own run")
    p.add_argument("keys", nargs="+", metavar="KEY")
    p.set_defaults(run=archive)
    p = sub.add_parser("acknowledge-loss", help="record offsets deleted before they were archived, and go on past them")
    p.add_argument("topic")
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--reason", required=True, help="why the records are gone; recorded in the archive")
    p.add_argument("--start", type=int, default=-1, help="first lost offset; -1: the committed offset")
    p.add_argument("--end", type=int, default=-1, help="end of the loss, exclusive; -1: the log start offset")
    p.set_defaults(run=acknowledge_loss)
    p = sub.add_parser("remove-key", help="remove partition keys from the archive assets (Swift is not touched)")
    p.add_argument("keys", nargs="+", metavar="KEY")
    p.set_defaults(run=remove_key)
    args = parser.parse_args(argv)
    dagster_home()
    try:
        return args.run(args)
    except (Refused, ValueError) as e:  # MalformedKey, bad settings or topics file: the message says what to change
        print(f"{PROG} {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
