"""The whole archive path against a model: what operators and Kafka do, in any order, never loses,
duplicates or mixes records.

A stateful property test (hypothesis): the lag sensor's tick (its decisions, core/runs/tick.py
`decide_all`, which sensors/lag.py calls, over the cursor and topic ids as estate.py keeps them,
a topic created again restarted by core/archive/commit.py `restart`), batch runs (core/archive/batch.py
`archive_batch`: the real plan, manifests and commit, core/archive/commit.py) that take their
turn per partition (core/runs/turns.py, each claim step a step of its own, so two runs' claims
interleave), and an operator who archives ranges of other cuts by hand, cancels queued runs and
kills runs between two manifests, while the topic is deleted and created again (a new topic id,
offsets from 0), gains partitions and loses records to retention. Kafka and Swift are in memory
(stand_ins.py); everything else is the project's code.

After every step:
- a committed offset never passes an offset that no entry of the partition's incarnation holds;
- no offset is in two entries of one incarnation;
- no object of one incarnation is overwritten or removed by a run of another;
- two runs are never in their turn in one partition at once;
and after each tick, every partition with records not archived has a range requested or in
flight, or a verdict that says why (data lost, a range that keeps failing, a run of an operator
going, below the batch policy), and no range refused because its offsets are archived (in
part) is requested again unchanged (no retry can cure that).

The number of steps: MATOS_MODEL_EXAMPLES sequences of up to MATOS_MODEL_STEPS steps each (50 of
50 by default; the `slow` test runs ten times as many sequences, twice as long). The fixed
sequences at the end are the ways the search found, kept as regression cases.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from stand_ins import FakeKafka, Killed, Log, World, install

from matos_dagster.core.archive.batch import archive_batch
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs import estate, policy, tick, turns
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store, SwiftParams
from matos_dagster.core.topics import TopicConfig

TOPIC = TopicConfig(name="orders", group="matos-archiver", batch_records=40, max_range_records=60, slice_records=25,
                    format="jsonl")
TICK_MS = 60_000  # a tick a minute: a record waiting since the tick before is past batch_age_s
MAX_KILLS = 2  # a partition whose runs keep dying ends, rightly, waiting for an operator
# Where a run's process may die (core/faults.py's points in batch.py): nowhere, after its n-th
# manifest, or after its commit.
KILL_POINTS = (None, "batch-after-manifest-1", "batch-after-manifest-2", "batch-after-manifest-3", "batch-after-commit")

# The sensor's warnings that say why a partition's records wait: records lost (to acknowledge), a
# range that keeps failing (its runs say why). Not "the committed offset moved": that says what,
# not why nothing is requested. A verdict worded anew by a fix is added here.
EXPLAINING = ("DATA LOSS", "failed")

QUEUED, CLAIMING, WAITING, DONE, FAILED, CANCELED = "queued", "claiming", "waiting", "done", "failed", "canceled"
ENDED = {DONE, FAILED, CANCELED}


@dataclass
class Run:
    id: str
    ranges: list[OffsetRange]
    by_sensor: bool
    topic_ids: dict[str, str] = field(default_factory=dict)  # the ids its ranges were requested for (the sensor's)
    earlier: set[str] = field(default_factory=set)  # topics the requester saw created again
    status: str = QUEUED
    step: int = 0  # claim steps taken (core/runs/turns.py: mark, number read, number written)
    number: int = 0
    entered: bool = False  # its turn came (it polls after every step); it keeps it until it ends
    materialised: set[str] = field(default_factory=set)
    over: dict[str, tuple[int, int]] = field(default_factory=dict)  # refused as archived in part: the entry it overlaps

    @property
    def wheres(self) -> set[tuple[str, int]]:
        return {(r.topic, r.partition) for r in self.ranges}


class ArchiveModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.world = World()
        self.mp = pytest.MonkeyPatch()
        self.kafka: FakeKafka = install(self.mp, self.world)
        self.store = Store(SwiftParams(auth_url="http://swift.invalid/auth/v1.0", container="archive"))
        self.world.create(TOPIC.name, 2)
        self.cursor: str | None = None
        self.now_ms = 1_800_000_000_000
        self.runs: list[Run] = []
        self.turns: dict[str, str] = {}  # run id -> its turn tag (turns.CHOOSING, then its number)
        self.floor: dict[tuple[str, int], int] = {}  # (topic id, partition) -> log start while nothing committed
        self.kills = 0
        self.problems: list[str] = []  # what a tick left unexplained
        # (topic id, range key) -> why a run refused it: its offsets are archived (in part)
        self.refused: dict[tuple[str | None, str], str] = {}

    def teardown(self):
        self.mp.undo()

    # -- Kafka, as producers and operators change it ------------------------------------------

    @precondition(lambda self: TOPIC.name in self.world.topics)
    @rule(partition=st.integers(0, 3), n=st.integers(1, 90))
    def produce(self, partition, n):
        t = self.world.topics.get(TOPIC.name)
        if t is not None:
            t.logs[partition % len(t.logs)].high += n

    @precondition(lambda self: TOPIC.name in self.world.topics)
    @rule(partition=st.integers(0, 3), n=st.integers(1, 80))
    def retention_deletes_records(self, partition, n):
        t = self.world.topics.get(TOPIC.name)
        if t is not None:
            log = t.logs[partition % len(t.logs)]
            log.low = min(log.high, log.low + n)

    @precondition(lambda self: TOPIC.name in self.world.topics)
    @rule()
    def delete_the_topic(self):
        self.world.delete(TOPIC.name)

    @precondition(lambda self: TOPIC.name not in self.world.topics)
    @rule(partitions=st.integers(1, 3))
    def create_the_topic(self, partitions):
        if TOPIC.name not in self.world.topics:
            self.world.create(TOPIC.name, partitions)

    @precondition(lambda self: TOPIC.name in self.world.topics)
    @rule(partitions=st.integers(1, 3))
    def delete_and_create_the_topic_between_two_ticks(self, partitions):
        self.world.delete(TOPIC.name)
        self.world.create(TOPIC.name, partitions)

    @precondition(lambda self: TOPIC.name in self.world.topics)
    @rule(more=st.integers(1, 2))
    def add_partitions(self, more):
        t = self.world.topics.get(TOPIC.name)
        if t is not None and len(t.logs) < 4:
            t.logs += [Log() for _ in range(more)]

    # -- the lag sensor -----------------------------------------------------------------------

    @rule()
    def sensor_tick(self):
        """lag.py's tick without Dagster: the same questions to Kafka (topics, their ids, offsets), the
        same handling of a topic created again (estate.py's cursor, commit.restart), and the same
        decisions: core/runs/tick.py's `decide_all` and `gave_up`, which lag.py calls. What stays
        here is what lag.py asks Dagster: the ranges' run states and refusals (`_range_states`), the
        runs of other origins (busy), and the run launched."""
        from matos_dagster.core.archive import commit
        from matos_dagster.core.kafka import many

        self.now_ms += TICK_MS
        states = estate.read_cursor(self.cursor)
        existing = many.topics(self.kafka)
        watched = [TOPIC.name] if TOPIC.name in existing else []
        ids = many.topic_ids(self.kafka, watched)
        known = estate.read_topics(self.cursor)
        waiting = estate.waiting(known, ids)
        watched = [t for t in watched if t not in waiting]
        tps = [(t, p) for t in watched for p in existing[t]]
        marks = many.watermarks(self.kafka, tps)
        again = estate.created_again(known, ids)
        states = estate.restart(states, again)
        committed = many.committed(self.kafka, TOPIC.group, tps)
        if TOPIC.name in again:
            committed.update(commit.restart(self.kafka, TOPIC.group, committed, {tp: marks[tp][0] for tp in tps}))
        known = estate.seen(known, ids, again)
        runs, over = self._range_states([s for s in states.values() if s.key and not s.done])
        busy = {w: f"run {r.id} of an operator is archiving here" for r in self.runs
                if not r.by_sensor and r.status not in ENDED for w in r.wheres}
        decided = tick.decide_all({TOPIC.name: TOPIC}, tps, states, marks, committed, runs, over, busy, self.now_ms)
        kept = decided.kept
        stopped = tick.gave_up(kept)  # recorded for the monitor, which reports each as a WARN
        tid = ids.get(TOPIC.name)
        for tp, d in decided.decisions.items():
            if d.request is not None and (tid, d.request.key) in self.refused:  # archived already: no retry cures it
                self.problems.append(f"{d.request} requested again unchanged after it was refused: "
                                     f"{self.refused[(tid, d.request.key)]}")
            self._explained(tp, marks[tp], committed[tp], d, tp in stopped)
        kept.update({tp: s for tp, s in states.items() if tp[0] in waiting})  # as they were, for the next tick
        if decided.due:
            ranges = [r for r, _ in decided.due]
            topics = {r.topic for r in ranges}  # jobs/archive_ranges.py's ranges_config
            run = self._launch(ranges, by_sensor=True, topic_ids={t: i for t, i in ids.items()
                                                                  if t in topics and i is not None},
                               earlier=known.earlier & topics)
            for r in ranges:
                kept[(r.topic, r.partition)] = policy.replace(kept[(r.topic, r.partition)], run=run.id)
        self.cursor = estate.write_cursor(kept, {tp: marks[tp][0] for tp in tps}, known)

    def _range_states(self, in_flight: list[policy.PartitionState]) -> tuple[dict, dict]:
        """lag.py's `_range_states`: each in-flight range's run state, and of those refused because offsets
        of them are archived already, the archived entry they overlap (the failure's `archived_over`)."""
        states, over = {}, {}
        for s in in_flight:
            states[(s.run, s.key)] = self._run_state(s)
            run = next((r for r in self.runs if r.id == s.run), None)
            if states[(s.run, s.key)] == policy.FAILED and run is not None and s.key in run.over:
                over[(s.run, s.key)] = run.over[s.key]
        return states, over

    def _run_state(self, s: policy.PartitionState) -> str:
        run = next((r for r in self.runs if r.id == s.run), None)
        if run is None:
            return policy.MISSING
        if run.status not in ENDED:
            return policy.IN_FLIGHT
        return policy.SUCCEEDED if s.key in run.materialised else policy.FAILED

    def _explained(self, tp, marks, committed, d: policy.Decision, stopped: bool) -> None:
        low, high = marks
        if high <= max(low, committed if committed is not None else low):
            return  # every record there is archived (or the group follows the log start)
        if d.request is not None or (d.state.key and not d.state.done and "in flight" in d.reason):
            return
        if stopped and d.warning and "no longer requested automatically" in d.warning:
            return  # given up on: the monitor reports it (sensors/stopped.py), with the command that goes on
        if "below the batch policy" in d.reason or (d.warning and any(why in d.warning for why in EXPLAINING)):
            return
        self.problems.append(f"{tp[0]}/{tp[1]} has records [{committed}, {high}) not archived, and the sensor "
                             f"says only: {d.reason!r} ({d.warning})")

    # -- runs -----------------------------------------------------------------------------------

    def _launch(self, ranges: list[OffsetRange], by_sensor: bool, topic_ids: dict[str, str] | None = None,
                earlier: set[str] = frozenset()) -> Run:
        run = Run(f"run-{len(self.runs):03d}", ranges, by_sensor, topic_ids or {}, set(earlier))
        self.runs.append(run)
        return run

    def _pick(self, i: int, *statuses: str) -> Run | None:
        runs = [r for r in self.runs if r.status in statuses]
        return runs[i % len(runs)] if runs else None

    @precondition(lambda self: TOPIC.name in self.world.topics)
    @rule(partition=st.integers(0, 3), a=st.integers(0, 200), b=st.integers(1, 80), c=st.integers(0, 200),
          d=st.integers(1, 80), two=st.booleans())
    def operator_archives_a_range_by_hand(self, partition, a, b, c, d, two):
        """Another cut than the sensor's (`add-ranges --start/--end`, then `archive`): one range, or two."""
        t = self.world.topics.get(TOPIC.name)
        if t is None:
            return
        p = partition % len(t.logs)
        log = t.logs[p]
        if log.high <= log.low:
            return
        ranges = []
        for start, size in [(a, b), (c, d)][:2 if two else 1]:
            s = log.low + start % (log.high - log.low)
            ranges.append(OffsetRange(TOPIC.name, p, s, min(log.high, s + size)))
        self._launch(list(dict.fromkeys(ranges)), by_sensor=False)

    @precondition(lambda self: any(r.status == QUEUED for r in self.runs))
    @rule(i=st.integers(0, 20))
    def operator_cancels_a_queued_run(self, i):
        run = self._pick(i, QUEUED)
        if run is not None:
            run.status = CANCELED

    @precondition(lambda self: any(r.status in (QUEUED, CLAIMING) for r in self.runs))
    @rule(i=st.integers(0, 20))
    def a_run_takes_a_claim_step(self, i):
        """One step of a run's claim (matos_dagster/turns.py `claim`), so two runs' steps interleave."""
        run = self._pick(i, QUEUED, CLAIMING)
        if run is not None:
            self.claim_step(run)

    @precondition(lambda self: any(r.status == QUEUED for r in self.runs))
    @rule(i=st.integers(0, 20))
    def a_run_claims_and_archives(self, i):
        """The common path: a queued run claims in full, and archives if its turn has come."""
        run = self._pick(i, QUEUED)
        while run.status in (QUEUED, CLAIMING):
            self.claim_step(run)
        if self._in_turn(run):
            self.archive(run)

    def claim_step(self, run: Run) -> None:
        run.status = CLAIMING
        if run.step == 0:
            self.turns[run.id] = turns.CHOOSING
        elif run.step == 1:
            run.number = turns.number_after(turns.seen(self.turns.get(o.id), o.id) for o in self._others(run))
        else:
            self.turns[run.id] = turns.Claim(run.number, run.id).tag
            run.status = WAITING
        run.step += 1

    def _others(self, run: Run) -> list[Run]:
        return [o for o in self.runs if o is not run and o.status in (CLAIMING, WAITING) and o.wheres & run.wheres]

    def _in_turn(self, run: Run) -> bool:
        """Whether the run is archiving: its turn came (core/runs/turns.py `ahead`) at a step since
        it wrote its number, and it has not ended."""
        if run.status != WAITING:
            return False
        if not run.entered:
            mine = turns.Claim(run.number, run.id)
            run.entered = not turns.ahead(mine, [turns.seen(self.turns.get(o.id), o.id) for o in self._others(run)])
        return run.entered

    @precondition(lambda self: any(self._in_turn(r) for r in self.runs))
    @rule(i=st.integers(0, 20), kill=st.integers(0, len(KILL_POINTS) - 1))
    def a_run_in_its_turn_archives(self, i, kill):
        """archive_batch for the run's ranges; its process dies at KILL_POINTS[kill] (None: it does not)."""
        runs = [r for r in self.runs if self._in_turn(r)]
        if runs:
            self.archive(runs[i % len(runs)], kill)

    def archive(self, run: Run, kill: int = 0) -> None:
        if KILL_POINTS[kill] and self.kills < MAX_KILLS:
            self.world.kill_at = KILL_POINTS[kill]
        try:
            batch = archive_batch([(r, TOPIC) for r in run.ranges], self.kafka, self.store, lambda: None,
                                  say=lambda line: None, typing_for=lambda t: None, topic_ids=run.topic_ids,
                                  earlier=run.earlier)
        except Killed:
            self.kills += 1
            run.status = FAILED  # the sensor fails a dead run; it reported nothing
        except Exception as e:  # the whole run refused (bad input): one line, and it changed nothing
            assert "\n" not in str(e).strip(), f"{run.id} failed with more than one line: {e}"
            run.status = FAILED
        else:
            run.materialised = {o.range.key for o in batch.outcomes if o.ok}
            run.over = {o.range.key: o.archived_over for o in batch.outcomes if o.archived_over is not None}
            t = self.world.topics.get(TOPIC.name)
            tid = t.topic_id if t is not None else None
            self.refused.update({(tid, o.range.key): o.error for o in batch.outcomes
                                 if o.refused and "overlaps" in o.error})
            run.status = DONE if all(o.ok for o in batch.outcomes) else FAILED
        finally:
            self.world.dead, self.world.kill_at = False, None
            self.turns.pop(run.id, None)

    # -- invariants -----------------------------------------------------------------------------

    def _entries(self) -> dict[tuple[str, int, str | None], list[tuple[int, int]]]:
        """Every manifest in Swift, wherever it is, by (topic, partition, incarnation of its records)."""
        out: dict = {}
        for name, data in self.world.objects.items():
            if not name.endswith("/" + layout.MANIFEST):
                continue
            doc = json.loads(data)
            key = (doc["topic"], doc["partition"], self.world.incarnation_in(data))
            out.setdefault(key, []).append((doc["start"], doc["end"]))
        return out

    @invariant()
    def a_committed_offset_never_passes_an_offset_no_entry_of_its_incarnation_holds(self):
        entries = self._entries()
        for name, t in self.world.topics.items():
            for p, log in enumerate(t.logs):
                c = self.world.committed.get((TOPIC.group, name, p))
                if c is None:
                    self.floor[(t.topic_id, p)] = log.low  # a first commit starts at the log start
                    continue
                pos = self.floor.get((t.topic_id, p), 0)
                for s, e in sorted(entries.get((name, p, t.topic_id), [])):
                    if s <= pos:
                        pos = max(pos, e)
                assert pos >= c, (f"{name}/{p} (topic id {t.topic_id}) is committed at {c}, but offsets from {pos} "
                                  f"are in no entry of its incarnation: {entries}")

    @invariant()
    def no_offset_is_in_two_entries_of_one_incarnation(self):
        for key, spans in self._entries().items():
            spans = sorted(spans)
            for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
                assert e1 <= s2, f"{key}: entries [{s1}, {e1}) and [{s2}, {e2}) both hold offsets [{s2}, {min(e1, e2)})"

    @invariant()
    def no_object_of_one_incarnation_is_overwritten_or_removed_by_another(self):
        assert not self.world.violations, self.world.violations

    @invariant()
    def two_runs_are_never_in_their_turn_in_one_partition(self):
        going = [r for r in self.runs if self._in_turn(r)]  # each waiting run polls here, after every step
        for a in going:
            for b in going:
                assert a is b or not (a.wheres & b.wheres), f"{a.id} and {b.id} are both in their turn"

    @invariant()
    def every_partition_with_records_not_archived_is_requested_or_explained(self):
        problems, self.problems = self.problems, []
        assert not problems, problems


STEPS = int(os.environ.get("MATOS_MODEL_STEPS", "50"))
EXAMPLES = int(os.environ.get("MATOS_MODEL_EXAMPLES", "50"))
# Shrinking a failing sequence can take minutes: off unless asked (MATOS_MODEL_SHRINK=1); a failure
# then prints its steps as found.
SHRINK = os.environ.get("MATOS_MODEL_SHRINK", "") == "1"


def _run(examples: int, steps: int, shrink: bool = SHRINK):
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if shrink else [])
    run_state_machine_as_test(ArchiveModel, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, phases=phases,
        suppress_health_check=list(HealthCheck)))


def test_nothing_is_lost_duplicated_or_mixed_whatever_operators_and_kafka_do():
    _run(EXAMPLES, STEPS)


@pytest.mark.slow
def test_nothing_is_lost_duplicated_or_mixed_over_many_more_steps():
    _run(EXAMPLES * 10, STEPS * 2)


# -- the ways found, as fixed sequences (each fails while its way is open) -------------------


def _machine() -> ArchiveModel:
    return ArchiveModel()


def _archive_all(m: ArchiveModel, *order: int) -> None:
    """The runs `order` names (all, in launch order, by default) claim and archive, one after the other."""
    for run in [m.runs[i] for i in order] or list(m.runs):
        while run.status in (QUEUED, CLAIMING):
            m.claim_step(run)
        if m._in_turn(run):
            m.archive(run)


def _steps(m: ArchiveModel, *steps) -> None:
    try:
        for step, *args in steps:
            if step == "archive_all":
                _archive_all(m, *args)
            elif step == "claim_step":
                m.claim_step(m.runs[args[0]])
            else:
                getattr(m, step)(*args)
            for inv in m.invariants:  # the machine's own, as hypothesis checks them after each step
                inv.function(m)
    finally:
        m.teardown()


def test_a_topic_created_again_is_archived_from_its_own_offset_0():
    m = _machine()
    _steps(m, ("produce", 0, 80), ("sensor_tick",), ("sensor_tick",), ("archive_all",), ("sensor_tick",),
           ("delete_the_topic",), ("create_the_topic", 2), ("produce", 0, 30), ("sensor_tick",), ("sensor_tick",),
           ("archive_all",), ("sensor_tick",))


def test_a_topic_created_again_and_past_the_old_end_is_not_committed_over_the_old_archive():
    m = _machine()
    _steps(m, ("produce", 0, 50), ("sensor_tick",), ("sensor_tick",), ("archive_all",), ("sensor_tick",),
           ("delete_the_topic",), ("create_the_topic", 1), ("produce", 0, 90), ("sensor_tick",),
           ("sensor_tick",), ("archive_all",), ("sensor_tick",))


def test_a_topic_created_again_after_a_tick_never_writes_over_the_earlier_incarnations_objects():
    m = _machine()
    _steps(m, ("produce", 0, 50), ("sensor_tick",), ("archive_all",), ("sensor_tick",),
           ("delete_the_topic",), ("sensor_tick",), ("create_the_topic", 1), ("produce", 0, 50), ("sensor_tick",),
           ("archive_all",), ("sensor_tick",))


def test_overlapping_ranges_of_one_run_are_not_both_archived():
    m = _machine()
    _steps(m, ("produce", 1, 90), ("operator_archives_a_range_by_hand", 1, 0, 60, 30, 60, True), ("archive_all",))


def test_a_range_refused_for_an_operators_archive_is_replanned_not_abandoned():
    m = _machine()
    steps = [("produce", 0, 60), ("sensor_tick",), ("sensor_tick",),  # the sensor's [0, 60) queued
             ("operator_archives_a_range_by_hand", 0, 0, 35, 0, 1, False), ("archive_all", 1, 0)]
    steps += [("sensor_tick",), ("archive_all",)] * (policy.MAX_ATTEMPTS + 1)
    _steps(m, *steps)


def test_two_runs_claims_interleaved_leave_one_run_in_its_turn():
    m = _machine()
    _steps(m, ("produce", 0, 60), ("operator_archives_a_range_by_hand", 0, 0, 20, 0, 1, False),
           ("operator_archives_a_range_by_hand", 0, 10, 20, 0, 1, False),
           ("claim_step", 0), ("claim_step", 1),  # both mark themselves choosing
           ("claim_step", 1), ("claim_step", 0),  # both read: nothing numbered
           ("claim_step", 1), ("claim_step", 0))  # both write 1: run ids decide

