"""The monitor sensor: every topic's monitor verdict, reported without a run.

One sensor for all topics. Each tick lists the cluster's topics once, resolves the topics file
against them (named topics, and those a pattern matches: a deleted one is no longer evaluated, a
named one missing gets a verdict saying so), asks Kafka for every partition's offsets in a few
batched requests, and reads each topic's last verdict in one query. A topic is due when its verdict
would be older than `interval_s` by the next tick, or at once when a committed offset moved since
(an archive run committed). The due topics are evaluated stalest first (assets/monitor.py's
`evaluate`, the check's own) and each verdict is reported as an asset check evaluation of the
tick: no run, no process, no queue.

Dagster gives a sensor tick 60 s: no topic is begun after `budget_s`; the rest come first at the
next tick.
"""

from __future__ import annotations

import time

from dagster import DefaultSensorStatus, SensorDefinition, SensorEvaluationContext, SensorResult, SkipReason, sensor

from matos_dagster.assets.monitor import evaluate
from matos_dagster.core.kafka import many
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.resources import KafkaResource, SwiftResource

NAME = "monitor"
BUDGET_S = 30.0  # half of Dagster's sensor timeout: the rest for Kafka, Dagster and the report


def monitor_sensor(topics: TopicSet, interval_s: int, tick_s: int, budget_s: float = BUDGET_S) -> SensorDefinition:
    """`interval_s`: the oldest a verdict may be; `tick_s`: seconds between ticks."""
    # A tick early, so that the verdict is renewed before it is `interval_s` old, not after.
    max_age_s = max(0, interval_s - tick_s)

    @sensor(
        name=NAME,
        minimum_interval_seconds=tick_s,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Reports each topic's monitor check at least every {interval_s} s, and at the next tick "
        "after its committed offsets move, without a run.",
    )
    def _monitor(context: SensorEvaluationContext, kafka: KafkaResource, swift: SwiftResource):
        deadline = time.monotonic() + budget_s
        with kafka.kept_clients():
            listing = many.topics(kafka)
            resolved = topics.resolve(listing)
            for line in resolved.clashes:
                context.log.warning(line)
            done = evaluate(context.instance, kafka, swift, resolved.topics, listing, max_age_s, deadline)
        why = {}
        for name, reason in done.due.items():
            why.setdefault(reason, []).append(name)
        summary = (f"{len(done.evaluations)} of {len(resolved.topics)} topics evaluated ("
                   + "; ".join(f"{reason}: {_names(names)}" for reason, names in sorted(why.items()))
                   + f"), {done.fresh} fresh")
        if done.left:
            summary += f"; time up, first at the next tick: {_names(done.left)}"
        context.log.info(summary)
        return SensorResult(asset_events=done.evaluations, skip_reason=SkipReason(summary[:1000]))

    return _monitor


def _names(names: list[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
