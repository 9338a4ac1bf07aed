"""The lag sensor's run: the ranges due in one tick, of many topics and partitions, archived together.

    dg launch --job archive_ranges --config-json \\
      '{"ops": {"archive_batch": {"config": {"ranges": ["demo:p00000:...-...", "orders:p00003:...-..."]}}}}'

One run and one Spark job for them all (core/archive/batch.py), each range still checked,
written, manifested and committed on its own. Each archived range is reported as the
materialisation of its partition key of its topic's asset, with the metadata a run of the asset
itself gives, so each topic's Partitions page shows its ranges whichever run archived them. A
range that could not be archived is said in the log and the run fails once the others are done:
the lag sensor requests it again (it asks which keys the run materialised), or, for a range refused
because offsets of it are archived already, plans the partition anew from the archived entry the
failure names (`archived_over`). Keys that are not partition keys of their topic's asset, and ranges
of a partition that overlap each other, refuse the whole run before it claims anything.

The run takes its turn on every partition it archives (turns.py): it waits for a run of one
range (UI, CLI, backfill) that claimed a partition first, archiving the other partitions
meanwhile, and such a run waits for it.
"""


import sys
import time
from collections import Counter

from dagster import (
    AssetMaterialization,
    Config,
    Failure,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    in_process_executor,
    job,
    op,
)
from pydantic import Field

from matos_dagster.assets.archive import metadata
from matos_dagster.core.archive.batch import Outcome, archive_batch
from matos_dagster.core.offsets.ranges import MalformedKey, OffsetRange, overlaps, parse_key
from matos_dagster.core.runs import heartbeat
from matos_dagster.core.topic_set import not_found
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dead_runs import beating
from matos_dagster.materialisations import log_materialisations
from matos_dagster.names import DEFAULT, Names
from matos_dagster.turns import BATCH_OP, BATCH_TAG, claim, wait_for_turns, where

JOB = "archive_ranges"
# The failure's metadata: per range refused because offsets of it are archived already, the first
# archived entry it overlaps, [start, end).
ARCHIVED_OVER = "archived_over"


class RangesConfig(Config):
    ranges: list[str] = Field(description="Partition keys of offset ranges (`topic:pNNNNN:start-end`), of any "
                              "topics of the topics file; each must be added to its topic's asset already.")
    topic_ids: dict[str, str] = Field(
        default={}, description="Per topic, the Kafka topic id its ranges were requested for (the lag sensor "
        "gives it): a topic deleted and created again since has another id, and its ranges are refused.")
    earlier: list[str] = Field(
        default=[], description="Topics whose archive holds an earlier log of the name (the lag sensor saw another "
        "topic id, or the topic missing): a log not recorded yet is then a new incarnation, never the first.")


def archive_ranges_job(topics, names: Names = DEFAULT) -> JobDefinition:
    """`topics`: the TopicSet (named topics and patterns) whose ranges the job archives."""

    @op(name=names.of(BATCH_OP), description="Archive offset ranges of many topics in one Spark job, each exactly once.",
        required_resource_keys=names.keys("kafka", "swift", "spark"))
    def _archive(context: OpExecutionContext, config: RangesConfig) -> int:
        kafka, swift, spark = names.resources(context, "kafka", "swift", "spark")
        items, refused = [], []
        for key in dict.fromkeys(config.ranges):  # a key given twice is one range
            try:
                r = parse_key(key)
            except MalformedKey as e:
                refused.append(f"{key}: {e}")
                continue
            topic = topics.get(r.topic)
            if topic is None:
                refused.append(f"{key}: {not_found(topics, r.topic)}")
                continue
            items.append((r, topic))
        refused += _not_archivable(context.instance, items, names)
        if refused:  # before anything is claimed or written: the run changes nothing
            raise Failure(f"{len(refused)} of {len(config.ranges)} range(s) refused, nothing archived: {refused[0]}",
                          metadata={"refused": MetadataValue.json(refused)})
        instance, run_id = context.instance, context.run.run_id
        thresholds = heartbeat.Thresholds.from_settings()
        mine = claim(instance, run_id, {where(r) for r, _ in items}, {BATCH_TAG: "true", **names.run_tags})
        outcomes: list[Outcome] = []
        tasks = 0
        with beating(instance, run_id, thresholds, context.log.warning), kafka.kept_clients(), \
                swift.store() as store:

            def archive(ready: set[str]) -> None:
                nonlocal tasks
                waited_s = max(0.0, time.time() - mine.since)  # these partitions' turn came this long after the claim
                batch = archive_batch([i for i in items if where(i[0]) in ready], kafka, store,
                                      lambda: spark.spark_session, say=context.log.info,
                                      topic_ids=config.topic_ids, earlier=set(config.earlier))
                tasks += batch.tasks
                for note in batch.notes:
                    context.log.warning(note)
                log_materialisations(context, [m for o in batch.outcomes if (m := _report(context, o, waited_s, names))])
                outcomes.extend(batch.outcomes)

            waited = wait_for_turns(instance, mine, {where(r) for r, _ in items}, context.log.info, thresholds,
                                    free=archive, names=names)
        failed = [o for o in outcomes if not o.ok]
        done = [o for o in outcomes if o.ok]
        context.add_output_metadata({
            "ranges": MetadataValue.int(len(outcomes)),
            "archived": MetadataValue.int(len(done)),
            "not_archived": MetadataValue.int(len(failed)),
            "records_written": MetadataValue.int(sum(o.archived.records_written for o in done)),
            "topics": MetadataValue.int(len({o.range.topic for o in outcomes})),
            "spark_tasks": MetadataValue.int(tasks),
            "waited_for_other_runs_s": MetadataValue.float(round(waited, 3)),
        })
        if failed:
            kinds = Counter("refused" if o.refused else "failed" for o in failed)
            raise Failure(
                f"{len(failed)} of {len(outcomes)} range(s) not archived ({', '.join(f'{n} {k}' for k, n in kinds.items())}); "
                f"the others are archived and committed. First: {failed[0].range.key}: {failed[0].error}",
                metadata={"not_archived": MetadataValue.json({o.range.key: o.error for o in failed}),
                          # What the lag sensor plans a refused range's partition from (sensors/lag.py).
                          ARCHIVED_OVER: MetadataValue.json({o.range.key: list(o.archived_over) for o in failed
                                                             if o.archived_over is not None})},
            )
        return len(done)

    @job(name=names.of(JOB), tags={BATCH_TAG: "true", **names.run_tags}, executor_def=in_process_executor,
         description="Archive offset ranges of many topics in one run: what the lag sensor requests each tick.")
    def _job():
        _archive()

    return _job


def _not_archivable(instance, items: list[tuple[OffsetRange, TopicConfig]], names: Names) -> list[str]:
    """Why ranges of `items` cannot be archived in one run, before it claims anything: a key that is
    not a partition key of its topic's asset (one query per topic, of the run's keys only: a topic
    has a key per range archived), and ranges of a partition that overlap each other (their offsets
    would be in two manifests: the archive refuses a range that overlaps one archived, not the
    run's other ranges)."""
    out = []
    asked: dict[str, list[str]] = {}
    for r, topic in items:
        asked.setdefault(names.partitions(topic), []).append(r.key)
    known = {kind: instance.get_existing_dynamic_partitions(kind, keys) for kind, keys in asked.items()}
    for r, topic in items:
        if r.key not in known[names.partitions(topic)]:
            out.append(f"{r.key} is not a range of {names.asset_key(topic).to_user_string()} yet; add it first with: "
                       f"{sys.executable} -m matos_dagster add-ranges {r.topic} --partition {r.partition} "
                       f"--start {r.start} --end {r.end}")
    for a, b in overlaps(r for r, _ in items):
        out.append(f"{a.key} and {b.key} overlap (offsets [{b.start}, {min(a.end, b.end)}) of {a.topic}/{a.partition} "
                   "would be archived twice): give each offset to one range of the run")
    return out


def _report(context: OpExecutionContext, o: Outcome, waited_s: float, names: Names) -> AssetMaterialization | None:
    """An archived range as its key's materialisation of its topic's asset; else the reason, said."""
    if not o.ok:
        context.log.error(f"{o.range.key}: {o.error}")
        return None
    meta = metadata(o.archived, o.location)
    meta["waited_for_other_runs_s"] = MetadataValue.float(round(waited_s, 3))
    return AssetMaterialization(asset_key=names.asset_key(o.topic), partition=o.range.key, metadata=meta)


def ranges_config(ranges: list[OffsetRange], names: Names = DEFAULT, topic_ids: dict[str, str | None] | None = None,
                  earlier: set[str] = frozenset()) -> dict:
    """The run config of a batch run archiving `ranges`; `topic_ids`, `earlier`: RangesConfig's, of
    the ranges' topics (a topic of no id, None, is left out)."""
    topics = {r.topic for r in ranges}
    config: dict = {"ranges": [r.key for r in ranges]}
    ids = {t: i for t, i in (topic_ids or {}).items() if t in topics and i is not None}
    if ids:
        config["topic_ids"] = ids
    if topics & set(earlier):
        config["earlier"] = sorted(topics & set(earlier))
    return {"ops": {names.of(BATCH_OP): {"config": config}}}
