"""Turns, the Dagster side: the run tags by which one run at a time archives in a topic partition.

The rule is core/runs/turns.py's (the bakery algorithm): a run marks its turn CHOOSING, takes a
number above every number the going runs of its partitions hold, then waits for every going run of
a partition it archives that is choosing or holds a smaller (number, run id). A run of one range (the
asset: UI, CLI, backfill) names its partition in a tag; a batch run (jobs/archive_ranges.py, the
lag sensor's) archives many partitions, listed in its run config, and carries BATCH_TAG so that
the few going batch runs are found by one query. Either kind waits for the other.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from matos_dagster.core.offsets.ranges import MalformedKey, OffsetRange, parse_key
from matos_dagster.core.runs import heartbeat, turns
from matos_dagster.dead_runs import TAGS, waits_for
from matos_dagster.names import ARCHIVE_TAG, DEFAULT, Names

# Run tags: a range readable at a glance in the Runs list, and the turn-taking of core/runs/turns.py.
TOPIC_PARTITION_TAG = "matos/topic_partition"
RANGE_TAG = "matos/range"
CLAIM_TAG = "matos/archiving_since"  # when the run claimed: said in the log, orders nothing
TURN_TAG = "matos/turn"  # core/runs/turns.py's CHOOSING, then the run's number
BATCH_TAG = "matos/batch"  # "true" on a batch run; its ranges are in its run config
BATCH_OP = "archive_batch"
GOING = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
DOING = {"compaction": "compacting", "erasure": "erasing"}  # by the job's `kind` tag; else archiving
# A run still going after this long is not waited for any more (run monitoring fails runs at
# dagster.yaml's max_runtime_seconds, one hour, which is this bound too).
MAX_WAIT_S = 3600


def where(r: OffsetRange) -> str:
    return f"{r.topic}/{r.partition}"


def batch_ranges(run: DagsterRun) -> list[OffsetRange]:
    """The ranges a batch run archives, from its run config (its op is named for its archive)."""
    op = Names(run.tags.get(ARCHIVE_TAG, "")).of(BATCH_OP)
    keys = (run.run_config or {}).get("ops", {}).get(op, {}).get("config", {}).get("ranges", [])
    out = []
    for key in keys:
        try:
            out.append(parse_key(key))
        except MalformedKey:
            continue
    return out


def claim(instance: DagsterInstance, run_id: str, wheres: set[str], tags: dict[str, str] | None = None) -> turns.Claim:
    """Take this run's turn on the partitions `wheres` (core/runs/turns.py, steps 1 to 3): other
    runs order themselves by it. `tags` (a run of one range: its partition) are written with the
    CHOOSING mark, so that a run reading the partition's turns finds this one from then on."""
    since = time.time()
    with TAGS:  # not beside a heartbeat's write of this run's tags (dead_runs.beating says why)
        instance.add_run_tags(run_id, {**(tags or {}), CLAIM_TAG: f"{since:.6f}", TURN_TAG: turns.CHOOSING})
    number = turns.number_after(_turn(run) for run in _going(instance, wheres) if run.run_id != run_id)
    with TAGS:
        instance.add_run_tags(run_id, {TURN_TAG: str(number)})
    return turns.Claim(number, run_id, since)


def partition_by_partition(instance: DagsterInstance, run_id: str, thresholds: heartbeat.Thresholds,
                           say: Callable[[str], None], names: Names = DEFAULT):
    """`in_turn(topic, partitions, work)`: `work(p)` for each partition, each in its own turn, the list of
    what it gave. For runs that rewrite a partition's folders one partition after another (an erasure,
    a compaction): each partition is claimed (in the tag its archive runs look for), waited for, worked
    and released before the next, so a run over hundreds of partitions holds one turn at a time, for as
    long as that partition takes."""

    def in_turn(topic: str, partitions: list[int], work: Callable[[int], object]) -> list:
        out = []
        for p in partitions:
            w = f"{topic}/{p}"
            mine = claim(instance, run_id, {w}, {TOPIC_PARTITION_TAG: w, **names.run_tags})
            wait_for_turns(instance, mine, {w}, say, thresholds, names=names)
            try:
                out.append(work(p))
            finally:
                with TAGS:  # released: the partition's runs stop finding this one (_going)
                    instance.add_run_tags(run_id, {TOPIC_PARTITION_TAG: ""})
        return out

    return in_turn


def _turn(run: DagsterRun) -> turns.Seen | None:
    return turns.seen(run.tags.get(TURN_TAG), run.run_id)


def _going(instance: DagsterInstance, wheres: set[str]) -> list[DagsterRun]:
    """The going runs that may archive in `wheres`: the runs of one range tagged with one of them,
    and every batch run (its partitions are in its run config)."""
    runs = list(instance.get_runs(filters=RunsFilter(tags={TOPIC_PARTITION_TAG: sorted(wheres)}, statuses=GOING)))
    return runs + list(instance.get_runs(filters=RunsFilter(tags={BATCH_TAG: "true"}, statuses=GOING)))


def _partitions(run: DagsterRun) -> set[str]:
    return {where(r) for r in batch_ranges(run)} if run.tags.get(BATCH_TAG) == "true" \
        else {run.tags.get(TOPIC_PARTITION_TAG, "")}


def ahead_of(instance: DagsterInstance, mine: turns.Claim, wheres: set[str],
             thresholds: heartbeat.Thresholds, names: Names = DEFAULT) -> dict[str, DagsterRun]:
    """The partitions of `wheres` whose turn has not come for `mine`, and a going run of the
    archive `names` in the way there (core/runs/turns.py, step 4): choosing, or before it."""
    out: dict[str, tuple[turns.Seen, DagsterRun]] = {}
    for run in _going(instance, wheres):
        # A dead run (no heartbeat for MATOS_DEAD_RUN_AFTER_S) is not waited for: the lag sensor fails it.
        if run.run_id == mine.run_id or not waits_for(run.tags, thresholds) or not names.owns(run):
            continue
        other = _turn(run)
        if not turns.in_the_way(mine, other):
            continue
        for w in _partitions(run) & wheres:
            if w not in out or turns.ahead(mine, [other, out[w][0]])[0] == other:  # say the first in the way
                out[w] = (other, run)
    return {w: run for w, (_, run) in out.items()}


def wait_for_turns(instance: DagsterInstance, mine: turns.Claim, wheres: set[str], say: Callable[[str], None],
                   thresholds: heartbeat.Thresholds, poll_s: float = 1.0,
                   free: Callable[[set[str]], None] | None = None, names: Names = DEFAULT) -> float:
    """Wait until no run with an earlier claim archives in any of `wheres`; the seconds waited.

    `free`: called with the partitions whose turn has come, as soon as some have (a batch run
    archives those while it waits for the others); without it, the wait is for all of them.
    `names`: the archive of this run; another archive's runs (its own Kafka) are not waited for.
    """
    began, told = time.monotonic(), set()
    waiting = set(wheres)
    while True:
        busy = ahead_of(instance, mine, waiting, thresholds, names)
        ready = waiting - set(busy)
        if ready and free is not None:
            free(ready)
            waiting -= ready
        if not busy:
            return max(0.0, time.time() - mine.since)
        for w, other in sorted(busy.items()):
            if (other.run_id, w) not in told:
                told.add((other.run_id, w))
                what = other.tags.get(RANGE_TAG) or f"in {w}"  # a batch run names no single range
                doing = DOING.get(other.tags.get("kind", ""), "archiving")
                say(f"run {other.run_id} ({started_by(other.tags)}) is {doing} {what}; this run waits for it "
                    f"to end, so that one run at a time writes in {w}")
        if time.monotonic() - began > MAX_WAIT_S:
            other = next(iter(busy.values()))
            raise RuntimeError(
                f"run {other.run_id} has been archiving in {', '.join(sorted(busy))} for more than {MAX_WAIT_S} s; "
                "if its process is gone, terminate that run in the UI (Runs, then Terminate), then launch this "
                "range again"
            )
        time.sleep(poll_s)


def started_by(tags: dict) -> str:
    if "dagster/sensor_name" in tags:
        return f"launched by sensor {tags['dagster/sensor_name']}"
    if "dagster/backfill" in tags:
        return f"part of backfill {tags['dagster/backfill']}"
    return "launched from the UI, the CLI or Python"


def going_elsewhere(instance: DagsterInstance, sensor: str, names: Names = DEFAULT) -> Iterable[DagsterRun]:
    """The going runs (queued ones too) of the archive `names` that `sensor` did not request."""
    statuses = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, *GOING]
    for run in instance.get_runs(filters=RunsFilter(statuses=statuses)):
        if run.tags.get("dagster/sensor_name") != sensor and names.owns(run):
            yield run
