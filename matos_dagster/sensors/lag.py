"""The lag sensor: one for the whole estate; it wakes only the partitions with new records.

Per tick: the topics of the topics file, names and patterns, resolved against the cluster's
topics (a topic created since the last tick is in); for all their partitions at once, the log
start and end offsets and the committed offsets (core/kafka/many.py: a few requests, however many
partitions); the state of the ranges in flight (one query of their runs); then `policy.decide`
per partition. The ranges due become partition keys of their topics' assets and are requested as
ONE run of the `archive_ranges` job (or a few, of at most MATOS_RUN_MAX_RANGES each), in the same
tick. The cursor holds a number per partition at rest (core/runs/estate.py), and each topic's
Kafka topic id: a topic deleted and created again (another id, one DescribeTopics a tick for all)
is said once, its partitions start again from the new log's start, and its runs carry the id they
were requested for (a run finding another id refuses the range, core/archive/batch.py).

The project's sensor ticks every BUSY_INTERVAL_S and does all that every interval and at the first
tick after a run of its ranges ended; its other ticks skip (`_no_look`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from matos_dagster.core import settings
from matos_dagster.core.archive import commit
from matos_dagster.core.kafka import many
from matos_dagster.core.runs import estate, heartbeat, policy, tick, turns
from matos_dagster.core.runs.policy import FAILED, IN_FLIGHT, MISSING, SUCCEEDED, Offsets, PartitionState
from matos_dagster.dagster_compat import RUN_KEY_TAG, SENSOR_NAME_TAG
from matos_dagster.dead_runs import fail_dead_runs
from matos_dagster.jobs.archive_ranges import ARCHIVED_OVER, JOB, ranges_config
from matos_dagster.sensors import stopped
from matos_dagster.names import DEFAULT, Names
from matos_dagster.turns import BATCH_TAG, batch_ranges, going_elsewhere

NAME = stopped.LAG
# The lag sensor of the project's definitions ticks this often; it asks Kafka every interval, and
# also at the first tick after a run of its ranges ends: the next batch then follows a run's end
# within seconds, not up to a whole interval later (in a busy estate that wait is part of every
# record's latency). Its other ticks cost one query of the runs in flight, or nothing at rest.
BUSY_INTERVAL_S = 10
_FAILED = {DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
_SUCCEEDED = {DagsterRunStatus.SUCCESS}


def lag_sensor(topics, interval_s: int, name: str = NAME, names: Names = DEFAULT,
               busy_interval_s: int | None = None, clock=time.time) -> SensorDefinition:
    """`topics`: the TopicSet (named topics and patterns) to watch; `names`: of the archive;
    `busy_interval_s`: a tick this often, asking Kafka every `interval_s` and when a run of its
    ranges ended (BUSY_INTERVAL_S; None: a tick asking Kafka every `interval_s`)."""
    every = min(busy_interval_s or interval_s, interval_s)
    # Half a tick of slack: the daemon's tick about `interval_s` after a look asks, not the one after it.
    look_s = interval_s - every / 2 if every < interval_s else 0.0

    @sensor(
        name=names.of(name),
        job_name=names.of(JOB),
        minimum_interval_seconds=every,
        default_status=DefaultSensorStatus.RUNNING,
        description="Requests the next offset range of every partition with new records, of every topic of "
                    f"the topics file (names and patterns), as one run of {names.of(JOB)}.",
        required_resource_keys=names.keys("kafka"),
    )
    def _lag(context: SensorEvaluationContext, **_resources):  # a direct call passes them too
        states = estate.read_cursor(context.cursor)
        now = clock()
        why = _no_look(context, states, now - (estate.read_look(context.cursor) or 0.0), look_s)
        if why:
            return SkipReason(why)
        kafka = names.resource(context, "kafka")
        instance = context.instance
        # First, fail the runs whose heartbeat stopped (dead_runs.py): their ranges are then FAILED
        # below and requested again in this tick, instead of in flight until max runtime.
        fail_dead_runs(instance, None, heartbeat.Thresholds.from_settings(), context.log)
        with kafka.kept_clients():  # one admin and one consumer per group for the questions of the tick
            existing = many.topics(kafka)
            resolved = topics.resolve(existing)
            watched = [t for t in resolved.topics if t.name in existing]
            ids = many.topic_ids(kafka, [t.name for t in watched])
            known = estate.read_topics(context.cursor)
            # A topic whose id the cursor knows but Kafka does not give yet is being created (again):
            # left for the next tick, as `many.topics` leaves a topic being created.
            waiting = estate.waiting(known, ids)
            watched = [t for t in watched if t.name not in waiting]
            tps = [(t.name, p) for t in watched for p in existing[t.name]]
            marks = many.watermarks(kafka, tps)
            again = estate.created_again(known, ids)
            states = estate.restart(states, again)
            committed: dict[tuple[str, int], int | None] = {}
            for group in sorted({t.group for t in watched}):
                committed.update(many.committed(kafka, group, [(t.name, p) for t in watched if t.group == group
                                                                for p in existing[t.name]]))
            for t in watched:
                if t.name in again:
                    old, new = again[t.name]
                    context.log.warning(
                        f"topic {t.name!r} was deleted and created again (topic id {old} -> {new}): its new log is "
                        "archived from its own offset 0 as a new incarnation, apart from the earlier log's archive, "
                        "which stays as it is")
                    mine = [(t.name, p) for p in existing[t.name]]
                    committed.update(commit.restart(kafka, t.group, {tp: committed[tp] for tp in mine},
                                                    {tp: marks[tp][0] for tp in mine}))
            known = estate.seen(known, ids, again)
        now_ms = int(time.time() * 1000)
        runs, over = _range_states(context, [s for s in states.values() if s.key and not s.done])
        busy = _busy(context, names)
        by_name = {t.name: t for t in watched}

        # The age of the first record waiting, where the policy needs it: one fetch for all.
        starts = {}
        for tp in tps:
            s = states.get(tp, PartitionState())
            offsets = Offsets(*marks[tp], committed[tp])
            run = runs.get((s.run, s.key)) if s.key and not s.done else None
            start = policy.start_of_next(s, offsets)
            if tp not in busy and estate.needs_age(s, offsets, start, run):
                starts[tp] = start
        with kafka.kept_clients():
            oldest = many.first_timestamps(kafka, starts) if starts else {}
        avg_bytes = _average_record_bytes(context, {tp[0] for tp in tps if marks[tp][1] > (committed[tp] or 0)},
                                          by_name, names)

        decided = tick.decide_all(by_name, tps, states, marks, committed, runs, over, busy, now_ms, oldest, avg_bytes)
        for line in decided.warnings:
            context.log.warning(line)
        due, reasons, kept = decided.due, decided.reasons, decided.kept
        new_keys: dict[str, list[str]] = {}
        for r in decided.new:
            new_keys.setdefault(names.partitions(by_name[r.topic]), []).append(r.key)

        kept.update({tp: s for tp, s in states.items() if tp[0] in waiting})  # as they were, for the next tick
        most = int(settings.get("MATOS_RUN_MAX_RANGES"))
        requests = []
        for batch in estate.batches(due, most):
            key = estate.batch_key(batch, {t: ids[t] for t in known.earlier if ids.get(t)})
            for r, _ in batch:
                tp = (r.topic, r.partition)
                kept[tp] = replace(kept[tp], run=key)
            requests.append(RunRequest(
                run_key=key, run_config=ranges_config([r for r, _ in batch], names, ids, known.earlier),
                tags={BATCH_TAG: "true", **names.run_tags, "matos/ranges": str(len(batch)),
                      "matos/topics": str(len({r.topic for r, _ in batch}))}))
        for line in resolved.clashes:
            context.log.warning(line)
        summary = (f"{len(watched)} topic(s), {len(tps)} partition(s); {len(due)} range(s) requested in "
                   f"{len(requests)} run(s)" + (f"; missing from Kafka: {', '.join(resolved.missing)}"
                                                if resolved.missing else ""))
        context.log.info(summary + (": " + "; ".join(reasons[:200]) if reasons else ""))
        # A topic being created again is looked at in the next tick, whenever this one was.
        cursor = estate.write_cursor(kept, {tp: marks[tp][0] for tp in tps}, known,
                                     look=now if look_s and not waiting else None)
        gave_up = tick.gave_up(kept)
        if gave_up or any(s.stopped for s in states.values()):  # the monitor reports them (stopped.py)
            stopped.record(instance, names.of(name), gave_up)
        if not requests:
            return SensorResult(skip_reason=SkipReason((summary + "; " + "; ".join(reasons))[:1000]), cursor=cursor)
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[AddDynamicPartitionsRequest(name, keys) for name, keys in new_keys.items()],
            cursor=cursor,
        )

    return _lag


def _no_look(context: SensorEvaluationContext, states: dict, since_s: float, look_s: float) -> str | None:
    """Why the tick need not ask Kafka: the last look is less than `look_s` old (0: always ask) and no
    run of a range in flight has ended since (one query of their runs; none at rest)."""
    if since_s >= look_s:
        return None
    flying = estate.watched(states)
    if not flying:
        return f"at rest: nothing in flight; Kafka was asked {since_s:.0f} s ago, again at {look_s:.0f} s"
    runs, _ = _range_states(context, flying)
    if any(status != IN_FLIGHT for status in runs.values()):
        return None
    return (f"{len(flying)} range(s) in flight, no run of them ended; Kafka was asked {since_s:.0f} s ago, "
            f"again at {look_s:.0f} s")


def _range_states(context: SensorEvaluationContext,
                  in_flight: list[PartitionState]) -> tuple[dict[tuple, str], dict[tuple, tuple[int, int]]]:
    """IN_FLIGHT, SUCCEEDED, FAILED or MISSING for each in-flight state's (run key, range key): one query.
    And, of the FAILED ones refused because offsets of them are archived already, the archived
    entry each overlaps (the failure's `archived_over`).

    A run that failed or was canceled may have archived some of its ranges: those it reported
    as materialisations succeeded, the others failed. MISSING: no run yet (the daemon creates it
    after the tick) or none any more (run retention deleted it); `policy.decide` tells the two
    apart by when the range was requested.
    """
    out = {(s.run, s.key): MISSING for s in in_flight}
    over: dict[tuple, tuple[int, int]] = {}
    keys = sorted({s.run for s in in_flight if s.run})
    if not keys:
        return out, over
    runs = context.instance.get_runs(filters=RunsFilter(tags={RUN_KEY_TAG: keys, SENSOR_NAME_TAG: context.sensor_name}))
    status = {}
    for run in reversed(runs):  # newest last, so it wins
        status[run.tags.get(RUN_KEY_TAG)] = run
    ended: dict[str, tuple[set[str], dict]] = {}  # of each failed run, read once
    for s in in_flight:
        run = status.get(s.run)
        if run is None:
            continue
        if run.status in _SUCCEEDED:
            out[(s.run, s.key)] = SUCCEEDED
        elif run.status in _FAILED:
            if run.run_id not in ended:
                ended[run.run_id] = _failed_run(context, run.run_id)
            materialised, archived_over = ended[run.run_id]
            out[(s.run, s.key)] = SUCCEEDED if s.key in materialised else FAILED
            if s.key in archived_over:
                over[(s.run, s.key)] = archived_over[s.key]
        else:
            out[(s.run, s.key)] = IN_FLIGHT
    return out, over


def _failed_run(context: SensorEvaluationContext, run_id: str) -> tuple[set[str], dict[str, tuple[int, int]]]:
    """The partition keys a run reported as materialised, and its failure's `archived_over`: one query."""
    records = context.instance.get_records_for_run(
        run_id, of_type={DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE}).records
    keys, over = set(), {}
    for r in records:
        event = r.event_log_entry.dagster_event
        if event is None:
            continue
        if event.event_type == DagsterEventType.ASSET_MATERIALIZATION:
            keys.add(event.partition)
            continue
        failure = event.step_failure_data.user_failure_data if event.step_failure_data else None
        entry = failure.metadata.get(ARCHIVED_OVER) if failure is not None else None
        for key, (a, b) in (entry.value if entry is not None else {}).items():
            over[key] = (int(a), int(b))
    return keys, over


def _busy(context: SensorEvaluationContext, names: Names) -> dict[tuple[str, int], str]:
    """Partitions that a going run of the archive of another origin archives (the UI, the CLI, a
    backfill): one query."""
    def keys(run) -> list[str]:
        if run.tags.get(BATCH_TAG) == "true":
            return [r.key for r in batch_ranges(run)]
        return [run.tags.get("dagster/partition", "")]

    return turns.busy_partitions((run.run_id, keys(run)) for run in going_elsewhere(context.instance,
                                                                                     context.sensor_name, names))


def _average_record_bytes(context: SensorEvaluationContext, topics: set[str], by_name: dict,
                          names: Names) -> dict[str, float]:
    """Bytes per record in each topic's latest archived range (the bytes policy's estimate): one query."""
    if not topics:
        return {}
    keys = {names.asset_key(by_name[n]): n for n in topics}
    events = context.instance.get_latest_materialization_events(list(keys))
    out = {}
    for key, event in events.items():
        m = event.asset_materialization if event is not None else None
        if m is None:
            continue
        records, raw = m.metadata.get("records"), m.metadata.get("record_bytes")
        if records is not None and raw is not None and records.value:
            out[keys[key]] = raw.value / records.value
    return out
