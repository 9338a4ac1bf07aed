"""The days sensor: one for every topic with days (or hours); each window that completes (or gets
late records) reported as its partition's materialisation of the topic's `days_<topic>` asset,
without a run.

Per tick: the topics resolved from the topics file (names and patterns), their partitions' offsets
in a few batched requests (core/kafka/many.py), then, for each topic that is due, an evaluation
(core/days/evaluate.py: only the ranges archived since its last one are read). A topic is due when
its log end or committed offsets moved since its last evaluation and that is `moved_after_s` old
(MATOS_REEVALUATE_S: a busy topic's move at every tick); when the last evaluation saw them move and
is the topic's `idle_s` old (its partitions are idle from then on); or when that evaluation is
`rest_s` old: a quiet topic's days complete as its partitions go idle, which takes time, not records.
Until its first open window can complete (its end, less the future margin, plus the lateness:
completeness.next_completion_ms), a topic waits for `rest_s` whatever moved: in the middle of a day
an evaluation only adds to the open day, and several ticks' ranges cost one (late records of
complete days are reported that much later). Topics are evaluated stalest first within `budget_s`
of a tick (Dagster gives a tick 60 s); the rest come first at the next tick.

A completed window is reported with the metadata and data version the asset's own run gives it
(`assets/windows.py`'s `window_result`), so what depends on the day (automation) sees a new
materialisation either way. Each topic's cursor is the last window reported (its journal place): a
tick that did not end is reported again by the next.

A topic deleted and created again: the incarnation whose log Kafka holds (its topic id; the cursor
keeps it, so Swift is asked only when the id changes) is evaluated against Kafka's offsets; each
earlier one is closed first (core/days/read.py's `close`), so its last days complete.
"""

import hashlib
import json
import time
from dataclasses import dataclass

from dagster import (
    AssetMaterialization,
    DefaultSensorStatus,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from matos_dagster.assets.windows import rules, window_result
from matos_dagster.core import settings
from matos_dagster.core.days import erased, evaluate
from matos_dagster.core.days.read import WindowNotComplete, close, window_record, window_records
from matos_dagster.core.kafka import many
from matos_dagster.core.swift import chosen_incarnation, incarnations, layout
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.dagster_compat import DATA_VERSION_IS_USER_PROVIDED_TAG, DATA_VERSION_TAG
from matos_dagster.names import DEFAULT, Names

NAME = "days"
BUDGET_S = 30.0
REST_S = 300.0  # a quiet topic is evaluated this often: its partitions go idle with time alone


def days_sensor(topics: TopicSet, tick_s: int, rest_s: float = REST_S, budget_s: float = BUDGET_S,
                clock=time.time, names: Names = DEFAULT, moved_after_s: float | None = None) -> SensorDefinition:
    """`clock`: now, in seconds since the epoch (a test's clock in the tests); `names`: of the archive;
    `moved_after_s`: a topic whose offsets moved is evaluated once its last evaluation is this old
    (default MATOS_REEVALUATE_S)."""
    moved_after_s = float(settings.get("MATOS_REEVALUATE_S")) if moved_after_s is None else moved_after_s

    @sensor(
        name=names.of(NAME),
        minimum_interval_seconds=tick_s,
        default_status=DefaultSensorStatus.RUNNING,
        description="Materialises each day (or hour) of every topic with event-time windows once it is completely "
                    "archived, and again when late records of it are archived, without a run.",
        required_resource_keys=names.keys("kafka", "swift"),
    )
    def _days(context: SensorEvaluationContext, **_resources):  # a direct call passes them too
        kafka, swift = names.resources(context, "kafka", "swift")
        deadline = time.monotonic() + budget_s
        cursor = json.loads(context.cursor) if context.cursor else {}
        now = clock()
        with kafka.kept_clients():
            listing = many.topics(kafka)
            timed = [t for t in topics.resolve(listing).topics if t.time_window != "none" and t.name in listing]
            tps = [(t.name, p) for t in timed for p in listing[t.name]]
            marks = many.watermarks(kafka, tps)
            committed = {}
            for group in sorted({t.group for t in timed}):
                committed.update(many.committed(kafka, group, [(t.name, p) for t in timed if t.group == group
                                                               for p in listing[t.name]]))
            seen = {t.name: _digest([(p, marks[(t.name, p)], committed[(t.name, p)]) for p in listing[t.name]])
                    for t in timed}
            due = [t for t in timed if _due(cursor.get(t.name), seen[t.name], now, moved_after_s, t.idle_s, rest_s)]
            due.sort(key=lambda t: cursor.get(t.name, {}).get("at", 0))  # stalest first
            events, done, left = [], [], []
            if due:
                ids = many.topic_ids(kafka, [t.name for t in due])  # which incarnation Kafka holds
                with swift.store() as store:
                    for t in due:
                        if time.monotonic() > deadline:
                            left.append(t.name)
                            continue
                        mine = cursor.get(t.name, {})
                        found, prefix = chosen_incarnation.kafkas(lambda: store, layout.join(store.params.prefix, t.prefix),
                                                                  t.name, ids.get(t.name), mine.get("incarnation"))
                        closed = _close(t, store, found.number, mine.get("closed", []), now, names)
                        reported, wake = _evaluate(t, store, prefix, kafka, marks, listing, mine.get("requested", ""),
                                                   now, names)
                        events += [e for e, _ in closed.events] + [e for e, _ in reported]
                        requested = evaluate.last_cursor([w for _, w in reported], mine.get("requested", ""))
                        kept = {"seen": seen[t.name], "at": now, "requested": requested}
                        if mine.get("seen") != seen[t.name]:
                            kept["settle"] = True  # a log end seen for the first time: idle only idle_s later
                        if wake is not None and wake > now:
                            kept["wake"] = wake  # no window completes before then
                        # Swift is asked for the incarnations again only when Kafka's topic id changes.
                        kept["incarnation"] = chosen_incarnation.handed_on(found, ids.get(t.name))
                        if closed.numbers:
                            kept["closed"] = closed.numbers
                        cursor[t.name] = kept
                        done.append(t.name)
        for name in [n for n in cursor if n not in {t.name for t in timed}]:
            del cursor[name]  # a topic no longer archived (deleted, out of the topics file)
        summary = (f"{len(timed)} topic(s) with windows, {len(done)} evaluated, {len(events)} window(s) "
                   "complete or late" + (f"; time up, first at the next tick: {', '.join(left[:5])}" if left else ""))
        context.log.info(summary)
        return SensorResult(asset_events=events, skip_reason=None if events else SkipReason(summary),
                            cursor=json.dumps(cursor, separators=(",", ":")))

    return _days


def _due(mine: dict | None, seen: str, now: float, moved_after_s: float, idle_s: float, rest_s: float) -> bool:
    """Whether a topic is evaluated at this tick: never evaluated; its offsets moved and its last
    evaluation is `moved_after_s` old; the last evaluation saw them move and is `idle_s` old (its
    partitions are idle only then, core/days/completeness.py: a day completes without a further move);
    or that evaluation is `rest_s` old."""
    if mine is None:
        return True
    age = now - mine.get("at", 0)
    if mine.get("wake", 0) > now:  # no window can complete before then: late records wait for rest_s
        return age >= rest_s
    if mine.get("seen") != seen:
        return age >= min(moved_after_s, rest_s)
    return age >= (min(idle_s, rest_s) if mine.get("settle") else rest_s)


@dataclass
class _Closed:
    numbers: list[int]  # the earlier incarnations closed (their days complete, core/days/read.py's `close`)
    events: list


def _close(topic, store, current: int, closed: list[int], now: float, names: Names) -> _Closed:
    """Each earlier incarnation's days evaluated once more as a closed log, until it writes nothing: its
    last days complete without waiting for records that can never come. A window written is reported
    once the whole topic has completed it (every incarnation, read.py's `window_records`); one the
    current incarnation completes later is reported by its own evaluation."""
    out = _Closed(sorted(n for n in closed if n < current), [])
    base = layout.join(store.params.prefix, topic.prefix)
    for n in range(1, current):
        where = incarnations.prefix_of(base, n)
        if n in out.numbers and not erased.pending(store, where, topic.name):
            continue  # closed, and no erasure's days to count again (core/days/erased.py)
        written = close(store, where, topic.name, rules(topic), int(now * 1000))
        if not written and n not in out.numbers:
            out.numbers.append(n)
        for w in written:
            try:
                found = window_records(store, base, topic.name, w.key)
            except WindowNotComplete:
                continue
            out.events.append((_materialisation(topic, w.key, found[-1][1], names), w))
    return out


def _materialisation(topic, key: str, doc: dict, names: Names) -> AssetMaterialization:
    result = window_result(doc)
    return AssetMaterialization(asset_key=names.windows_key(topic), partition=key, metadata=result.metadata,
                                tags={DATA_VERSION_TAG: result.data_version.value,
                                      DATA_VERSION_IS_USER_PROVIDED_TAG: "true"})


def _evaluate(topic, store, prefix: str, kafka, marks, listing, requested: str,
              now: float, names: Names) -> tuple[list[tuple[AssetMaterialization, evaluate.Window]], float | None]:
    """The topic's windows completed (or late) since its cursor, each as its materialisation, and the
    time (s) before which no window can complete (None: any). `prefix`: the incarnation whose log Kafka
    holds (its offsets are Kafka's)."""
    parts = listing[topic.name]
    done = evaluate.evaluated(store, prefix, topic.name, rules(topic), {p: marks[(topic.name, p)][1] for p in parts},
                              int(now * 1000), log_starts={p: marks[(topic.name, p)][0] for p in parts},
                              committed=lambda ps: kafka.committed(topic.name, ps, topic.group), requested=requested)
    out = []
    for w in done.windows:
        try:
            doc = window_record(store, prefix, topic.name, w.key)
        except WindowNotComplete:  # made anew since (a rebuilt state): the next evaluation says it again
            continue
        out.append((_materialisation(topic, w.key, doc, names), w))
    return out, None if done.next_completion_ms is None else done.next_completion_ms / 1000


def _digest(parts: list) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]
