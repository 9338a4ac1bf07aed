"""The monitor sensor: every topic's monitor verdict, reported without a run.

One sensor for all topics. Each tick lists the cluster's topics once, resolves the topics file
against them (named topics, and those a pattern matches: a deleted one is no longer evaluated, a
named one missing gets a verdict saying so), asks Kafka for every partition's offsets in a few
batched requests, and reads each topic's last verdict in one query. A topic is due when its verdict
would be older than `interval_s` by the next tick, or when a committed offset moved since (an
archive run committed) once its verdict is `moved_after_s` old (MATOS_REEVALUATE_S: a busy topic's
offsets move at every tick). The due topics are evaluated stalest first (assets/monitor.py's
`evaluate`, the check's own) and each verdict is reported as an asset check evaluation of the
tick: no run, no process, no queue. The cursor holds when the oldest verdict was made and a digest of
the committed offsets: a tick before any verdict is due, with none moved, reads no verdict at all.

Dagster gives a sensor tick 60 s: no topic is begun after `budget_s`; the rest come first at the
next tick.
"""

import hashlib
import json
import time

from dagster import (
    DefaultSensorStatus,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from matos_dagster.assets.monitor import check_key, evaluate
from matos_dagster.core import settings
from matos_dagster.core.kafka import many
from matos_dagster.core.monitor import verdict
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.dagster_compat import prune_check_history
from matos_dagster.names import DEFAULT, Names
from matos_dagster.sensors import stopped

NAME = "monitor"
BUDGET_S = 30.0  # half of Dagster's sensor timeout: the rest for Kafka, Dagster and the report
# Verdicts kept per topic, the newest: a day's at the default interval, a few hours' of a busy
# topic's (evaluated at each tick its committed offsets move). Only the latest is ever read.
KEEP_VERDICTS = 300
PRUNE_EVERY_S = 3600  # meanwhile a topic's history grows by a few more: a query per topic an hour


def monitor_sensor(topics: TopicSet, interval_s: int, tick_s: int, budget_s: float = BUDGET_S,
                   keep: int = KEEP_VERDICTS, names: Names = DEFAULT, moved_after_s: float | None = None) -> SensorDefinition:
    """`interval_s`: the oldest a verdict may be; `tick_s`: seconds between ticks; `keep`: verdicts
    kept per topic; `names`: of the archive; `moved_after_s`: a topic whose committed offsets moved is
    evaluated once its verdict is this old (default MATOS_REEVALUATE_S)."""
    moved_after_s = float(settings.get("MATOS_REEVALUATE_S")) if moved_after_s is None else moved_after_s
    # A tick early, so that the verdict is renewed before it is `interval_s` old, not after.
    max_age_s = max(0, interval_s - tick_s)

    @sensor(
        name=names.of(NAME),
        minimum_interval_seconds=tick_s,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Reports each topic's monitor check at least every {interval_s} s, and at the next tick "
        "after its committed offsets move, without a run.",
        required_resource_keys=names.keys("kafka", "swift"),
    )
    def _monitor(context: SensorEvaluationContext, **_resources):  # a direct call passes them too
        kafka, swift = names.resources(context, "kafka", "swift")
        deadline = time.monotonic() + budget_s
        cursor = json.loads(context.cursor) if context.cursor else {}
        with kafka.kept_clients():
            listing = many.topics(kafka)
            resolved = topics.resolve(listing)
            for line in resolved.clashes:
                context.log.warning(line)
            offsets = verdict.kafka_offsets(kafka, resolved.topics, listing)
            gave_up = stopped.read(context.instance, names.of(stopped.LAG))
            moved = _digest(offsets, resolved.missing, gave_up)
            if cursor.get("offsets") == moved and time.time() - cursor.get("oldest", 0) < max_age_s:
                # No committed offset moved since the last tick and no verdict is due yet: the
                # verdicts need not even be read.
                return SensorResult(skip_reason=SkipReason(f"{len(resolved.topics)} topics, none due"),
                                    cursor=context.cursor)
            done = evaluate(context.instance, kafka, swift, resolved.topics, listing, max_age_s, deadline, offsets,
                            names=names, gave_up=gave_up, moved_after_s=moved_after_s)
        pruned = cursor.get("pruned", 0)
        if time.time() - pruned >= PRUNE_EVERY_S:
            # Each verdict is a row of its check's history and an event, which Dagster keeps forever;
            # the daemon records this tick's verdicts after it returns.
            prune_check_history(context.instance, [check_key(t, names) for t in resolved.topics], keep - 1)
            pruned = time.time()
        why = {}
        for name, reason in done.due.items():
            why.setdefault(reason, []).append(name)
        summary = (f"{len(done.evaluations)} of {len(resolved.topics)} topics evaluated ("
                   + "; ".join(f"{reason}: {_names(names)}" for reason, names in sorted(why.items()))
                   + f"), {done.fresh} fresh")
        if done.left:
            summary += f"; time up, first at the next tick: {_names(done.left)}"
        context.log.info(summary)
        # A topic held back (moved, its verdict still young) is looked at again at the next ticks.
        cursor = {"offsets": cursor.get("offsets") if done.held else moved, "oldest": done.oldest, "pruned": pruned}
        return SensorResult(asset_events=done.evaluations, skip_reason=SkipReason(summary[:1000]),
                            cursor=json.dumps(cursor))

    return _monitor


def _digest(offsets: dict[str, dict[int, verdict.Offsets]], missing: list[str], gave_up: dict) -> str:
    """What the cursor remembers of Kafka: a digest of every partition's committed offset (and of
    which topics there are, and which partitions the lag sensor gave up on), a few bytes whatever
    the number of partitions."""
    doc = [[t, [[p, o.committed] for p, o in sorted(ps.items())]] for t, ps in sorted(offsets.items())]
    return hashlib.sha1(json.dumps([doc, sorted(missing), sorted(gave_up)]).encode()).hexdigest()[:16]


def _names(names: list[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
