"""The lag sensor: wake only the partitions with new records, and request their next range.

Per tick and per configured topic: the log end and committed offsets of every partition
(new partitions included), the state of the range requested last, then `policy.decide`.
New keys are added as dynamic partitions and their runs requested in the same tick. The
cursor holds a few numbers per partition, so a tick never lists the keys created so far.
"""

import json
import time

from dagster import (
    AssetKey,
    AssetSelection,
    DagsterRunStatus,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from matos_dagster.core.runs import heartbeat, policy, turns
from matos_dagster.core.runs.policy import FAILED, IN_FLIGHT, MISSING, SUCCEEDED, Offsets, PartitionState
from matos_dagster.core.topics import TopicConfig
from matos_dagster.dagster_compat import RUN_KEY_TAG, SENSOR_NAME_TAG
from matos_dagster.dead_runs import fail_dead_runs
from matos_dagster.resources import KafkaResource

_FAILED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def lag_sensor(topic: TopicConfig, partitions: DynamicPartitionsDefinition, interval_s: int) -> SensorDefinition:
    asset_key = AssetKey(topic.asset_name)

    @sensor(
        name=f"lag_{topic.asset_name}",
        # The check runs after each archive run (assets/monitor.py), once the range is done,
        # rather than inside every run while other partitions are half-way.
        asset_selection=AssetSelection.assets(asset_key).without_checks(),
        minimum_interval_seconds=interval_s,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Requests the next offset range of each partition of `{topic.name}` with new records.",
    )
    def _lag(context: SensorEvaluationContext, kafka: KafkaResource):
        cursor = json.loads(context.cursor) if context.cursor else {}
        # First, fail the topic's runs whose heartbeat stopped (dead_runs.py): below, their ranges
        # are then FAILED and requested again in this tick, instead of in flight until max runtime.
        fail_dead_runs(context.instance, topic.name, heartbeat.Thresholds.from_settings(), context.log)
        with kafka.kept_clients():  # one admin and one consumer for the three questions
            parts = kafka.partitions(topic.name)
            marks = kafka.watermarks(topic.name, parts)
            committed = kafka.committed(topic.name, parts, topic.group)
        avg_bytes = _average_record_bytes(context, asset_key)
        now_ms = int(time.time() * 1000)

        states = {p: PartitionState.from_json(cursor.get(str(p), {})) for p in parts}
        runs = _run_states(context, [s for s in states.values() if s.key and not s.done])
        busy = _busy_partitions(context, topic)
        requests, new_keys, reasons = [], [], []
        for p in parts:
            state = states[p]
            if p in busy and (state.key is None or state.done):
                # A run this sensor did not request (CLI, UI) is archiving in this partition:
                # a range requested now would only wait for it, or repeat its work.
                reasons.append(f"p{p}: {busy[p]}")
                continue
            low, high = marks[p]
            offsets = Offsets(low, high, committed[p])
            run = runs.get(_run_key(state)) if state.key and not state.done else None
            oldest = None
            start = policy.start_of_next(state, offsets)
            # The age is read once per start: when no range is in flight, or when the one in
            # flight has just succeeded (its end is the next start). A failed one is retried.
            if run in (None, policy.SUCCEEDED) and start < high and state.oldest_start != start:
                oldest = kafka.timestamp_at(topic.name, p, start)
            d = policy.decide(topic, p, state, offsets, run, now_ms, oldest, avg_bytes)
            if d.warning:
                context.log.warning(d.warning)
            cursor[str(p)] = d.state.to_json()
            reasons.append(f"p{p}: {d.reason}")
            if d.request is not None:
                if d.run_key == d.request.key:  # a new range, not a retry
                    new_keys.append(d.request.key)
                requests.append(
                    RunRequest(run_key=d.run_key, partition_key=d.request.key, tags={"matos/reason": d.reason[:200]})
                )
                context.log.info(f"{d.request}: {d.reason}")

        # Every partition's reason in the tick's log too: the ticks table shows a skip reason
        # only for ticks that requested nothing.
        context.log.info("; ".join(reasons))
        if not requests:
            return SensorResult(skip_reason=SkipReason("; ".join(reasons)[:1000]), cursor=json.dumps(cursor))
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[partitions.build_add_request(new_keys)] if new_keys else [],
            cursor=json.dumps(cursor),
        )

    return _lag


_GOING = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
          DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]


def _busy_partitions(context: SensorEvaluationContext, topic: TopicConfig) -> dict[int, str]:
    """Partitions that a going run of another origin archives: one query of the going runs."""
    going = context.instance.get_runs(filters=RunsFilter(statuses=_GOING))
    return turns.busy_partitions(((r.run_id, r.tags) for r in going), topic.name, context.sensor_name)


def _run_key(state: PartitionState) -> str:
    return state.key if state.attempt <= 1 else f"{state.key}#{state.attempt}"


def _run_states(context: SensorEvaluationContext, in_flight: list[PartitionState]) -> dict[str, str]:
    """IN_FLIGHT, SUCCEEDED, FAILED or MISSING for the latest run of each state's key: one query a tick.

    MISSING: no run yet (the daemon creates it after the tick) or no run any more (run
    retention deleted it); `policy.decide` tells the two apart by when the key was requested.
    """
    keys = [_run_key(s) for s in in_flight]
    out = {k: MISSING for k in keys}
    if not keys:
        return out
    runs = context.instance.get_runs(
        filters=RunsFilter(tags={RUN_KEY_TAG: keys, SENSOR_NAME_TAG: context.sensor_name})
    )
    for run in reversed(runs):  # newest last, so it wins
        key = run.tags.get(RUN_KEY_TAG)
        if run.status == DagsterRunStatus.SUCCESS:
            out[key] = SUCCEEDED
        elif run.status in _FAILED:
            out[key] = FAILED
        else:
            out[key] = IN_FLIGHT
    return out


def _average_record_bytes(context: SensorEvaluationContext, asset_key: AssetKey) -> float | None:
    """Bytes per record in the topic's latest archived range: the bytes policy's estimate."""
    event = context.instance.get_latest_materialization_event(asset_key)
    if event is None or event.asset_materialization is None:
        return None
    meta = event.asset_materialization.metadata
    records, raw = meta.get("records"), meta.get("record_bytes")
    if records is None or raw is None or not records.value:
        return None
    return raw.value / records.value
