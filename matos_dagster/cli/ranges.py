"""The commands about offset ranges: add them, archive them, backfill, go on after a loss, remove keys."""

from __future__ import annotations

import argparse
import sys

from matos_dagster.cli.archive import arguments as archive_arguments
from matos_dagster.cli.common import Refused, command, failure, quiet, run_job, topic_of
from matos_dagster.core.archive import loss


def _offsets(args: argparse.Namespace) -> None:
    """Refuse impossible partitions and offsets before anything reaches Kafka (-1 means 'not given')."""
    for name in ("partition", "start", "end"):
        value = getattr(args, name, -1)
        if value < -1:
            raise Refused(f"--{name} must be -1 (not given) or >= 0, got {value}")
    if getattr(args, "start", -1) != -1 and getattr(args, "end", -1) != -1 and args.end <= args.start:
        raise Refused(f"--end ({args.end}) must be greater than --start ({args.start}): a range is [start, end)")


def add_ranges(args: argparse.Namespace) -> int:
    topic_of(args.topic)
    _offsets(args)
    keys, _ = run_job("add_ranges", "add_range_keys",
                      {"topic": args.topic, "partition": args.partition, "start": args.start, "end": args.end})
    if not keys:
        print(f"nothing pending in {args.topic}: no range added")
    for key in keys:
        print(f"added {key}")
    if keys:
        print(f"archive {'it' if len(keys) == 1 else 'them'} with:\n  {command(*archive_arguments(), 'archive', *keys)}")
    return 0


def backfill(args: argparse.Namespace) -> int:
    """add-ranges, then ONE backfill of the keys it added, run by the daemon (jobs/backfill.py)."""
    from dagster import DagsterInstance

    from matos_dagster.cli import archive as chosen_archive
    from matos_dagster.jobs import backfill as bf

    topic = topic_of(args.topic)  # before any run is recorded: a refusal changes nothing
    chosen = chosen_archive.current()
    _offsets(args)
    with DagsterInstance.get() as instance:
        daemon = bf.daemon_running(instance)
        if args.wait and not daemon:
            raise Refused(f"no Dagster daemon runs for the instance in {instance.root_directory}, so the backfill "
                          "would never start; start one (make run, or dg dev) and run this again")
        result = chosen.job(bf.JOB).execute_in_process(
            run_config={"ops": {chosen.op("add_range_keys"): {"config": {"topic": topic.name,
                                                                         "partition": args.partition}}},
                        **quiet()}, instance=instance, raise_on_error=False)
        if not result.success:
            raise Refused(failure(result))
        keys = result.output_for_node(chosen.op("add_range_keys"))
        backfill_id = result.output_for_node(chosen.op(bf.OP))
        if not keys:
            print(f"nothing pending in {topic.name}: no backfill")
            return 0
        print(f"backfill {backfill_id}: {len(keys)} range(s) of {topic.name}, {keys[0]} .. {keys[-1]}")
        print(f"  progress in the UI: Runs -> Backfills -> {backfill_id}")
        if not daemon:
            print(f"  no Dagster daemon runs for {instance.root_directory} now: the backfill starts when one does "
                  "(make run, or dg dev)")
        if not args.wait:
            return 0
        status = bf.wait(instance, backfill_id)
        done = bf.outcomes(instance, backfill_id, topic, keys, chosen.names)
        for o in done:
            if o.records is not None:
                print(f"archived {o.key}: {o.records} records (run {o.run_id})")
            else:
                print(f"{o.key}: not archived ({o.status}{f', run {o.run_id}' if o.run_id else ''})", file=sys.stderr)
        print(f"backfill {backfill_id}: {status}")
        return 0 if all(o.records is not None for o in done) else 1


def acknowledge_loss(args: argparse.Namespace) -> int:
    topic_of(args.topic)
    _offsets(args)
    config = {"topic": args.topic, "partition": args.partition, "reason": args.reason}
    if args.start != -1 or args.end != -1:
        config |= {"start": args.start, "end": args.end}
    done, _ = run_job(loss.JOB, loss.OP, config)
    print(f"{args.topic}/{args.partition}: {done} lost offsets acknowledged and recorded in the archive")
    return 0


def archive(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance, materialize

    from matos_dagster.assets.archive import archive_asset
    from matos_dagster.assets.monitor import CHECK_NAME, monitor_check
    from matos_dagster.cli import archive as chosen_archive
    from matos_dagster.core.offsets.ranges import parse_key

    chosen = chosen_archive.current()
    names = chosen.names

    ranges = []
    for key in args.keys:  # every key is checked before any is archived
        r = parse_key(key)
        try:
            ranges.append((r, topic_of(r.topic)))
        except Refused as e:
            raise Refused(f"key {key!r}: {e}") from None
    failed = 0
    with DagsterInstance.get() as instance:
        for r, topic in ranges:
            if not instance.has_dynamic_partition(names.partitions(topic), r.key):
                raise Refused(f"{r.key} is not a range of {topic.asset_name} yet; add it first with:\n  "
                              + command(*archive_arguments(), "add-ranges", r.topic, "--partition", str(r.partition),
                                        "--start", str(r.start), "--end", str(r.end)))
        if args.one_run:
            return _one_run(instance, [r for r, _ in ranges])
        for r, topic in sorted(ranges, key=lambda rt: rt[0]):
            result = materialize([archive_asset(topic, names, chosen.group), monitor_check(topic, names)],
                                 partition_key=r.key, instance=instance, resources=chosen.resources, run_config=quiet(),
                                 raise_on_error=False)
            if not result.success:
                print(f"{r.key}: not archived (run {result.run_id}): {failure(result)}", file=sys.stderr)
                failed += 1
                continue
            (mat,) = result.asset_materializations_for_node(names.asset_key(topic).to_python_identifier())
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


def _one_run(instance, ranges) -> int:
    """`archive --one-run`: the keys in one run of archive_ranges; each archived key printed, 1 if one was not."""
    from matos_dagster.cli import archive
    from matos_dagster.jobs.archive_ranges import BATCH_OP, JOB, ranges_config

    chosen = archive.current()
    result = chosen.job(JOB).execute_in_process(
        run_config={**ranges_config(ranges, chosen.names), **quiet()}, instance=instance, raise_on_error=False)
    for m in result.asset_materializations_for_node(chosen.op(BATCH_OP)):
        meta = m.metadata
        how = "verified, already archived" if meta["verified_existing_archive"].value else "archived"
        print(f"{how} {m.partition}: {meta['records'].value} records, {meta['objects'].value} object(s) "
              f"-> {meta['swift_location'].value} (run {result.run_id})")
    if not result.success:
        print(f"not all archived (run {result.run_id}): {failure(result)}", file=sys.stderr)
        return 1
    return 0


def remove_key(args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from matos_dagster.cli import archive
    from matos_dagster.core.offsets.ranges import MalformedKey, parse_key

    chosen = archive.current()
    with DagsterInstance.get() as instance:
        for key in args.keys:
            try:
                named = chosen.topic_set.get(parse_key(key).topic)
            except MalformedKey:
                named = None
            candidates = [named] if named is not None else chosen.topics
            owners = [t for t in candidates if instance.has_dynamic_partition(chosen.names.partitions(t), key)]
            if not owners:
                raise Refused(f"no archive asset has the partition key {key!r}; nothing removed")
            for t in owners:
                instance.delete_dynamic_partition(chosen.names.partitions(t), key)
                print(f"removed {key!r} from {t.asset_name} (what is archived in Swift stays as it is)")
    return 0
