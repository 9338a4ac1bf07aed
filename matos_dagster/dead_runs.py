"""Dead archive runs: the heartbeat an archive run writes, and failing a run that stopped writing it.

The rule (when a run is dead) is heartbeat.py's; this is the Dagster side: the beat is a run tag,
and a dead run is failed through the instance, as Dagster's own code server fails a run whose
worker process it saw end. The lag sensor calls `fail_dead_runs` first in each tick, so the
range of a dead run is requested again in the same tick, and a run waiting for its turn in that
partition (assets/archive.py) stops waiting for it.
"""

from __future__ import annotations

import contextlib
import threading
import time

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from matos_dagster.core.runs import heartbeat
from matos_dagster.dagster_compat import PARTITION_NAME_TAG


# Held around each write of a run's tags from this process: Dagster's add_run_tags rewrites the run's
# whole tag set from what it read, so a heartbeat written by `beating`'s thread beside a turn's claim
# (turns.py) could undo it. Reentrant: a write's hook (a test's) may write tags itself.
TAGS = threading.RLock()


@contextlib.contextmanager
def beating(instance: DagsterInstance, run_id: str, thresholds: heartbeat.Thresholds, warn):
    """While inside, the run's heartbeat tag is refreshed every `thresholds.every_s` by its own thread.

    A tag the run writes while inside is written under TAGS, as the beat is: Dagster's add_run_tags
    rewrites the run's whole tag set from what it read, so a tag written beside a beat could be lost.
    """

    def beat(now: float) -> None:
        with TAGS:
            instance.add_run_tags(run_id, {heartbeat.TAG: f"{now:.3f}"})

    def failed(e: Exception) -> None:
        warn(f"could not write this run's heartbeat ({type(e).__name__}: {e}); trying again in "
             f"{thresholds.every_s:.0f} s. Runs without a heartbeat for {thresholds.dead_after_s:.0f} s are failed")

    with heartbeat.Heartbeat(beat, thresholds.every_s, failed) as hb:
        yield hb


def fail_dead_runs(instance: DagsterInstance, topic: str | None, thresholds: heartbeat.Thresholds, log) -> list[str]:
    """Fail every STARTED archive run of `topic` (None: of any topic, batch runs included) whose
    heartbeat is older than the threshold; their ids.

    One query of the started runs. Each run is read again just before it is failed, so a run that
    ended meanwhile is left alone.
    """
    now = time.time()
    dead = []
    for run in instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.STARTED])):
        if topic is not None and not run.tags.get(PARTITION_NAME_TAG, "").startswith(f"{topic}:p"):
            continue
        if not heartbeat.is_dead(run.tags, now, thresholds.dead_after_s):
            continue
        fresh = instance.get_run_by_id(run.run_id)
        if fresh is None or fresh.status != DagsterRunStatus.STARTED:
            continue
        now = time.time()
        if not heartbeat.is_dead(fresh.tags, now, thresholds.dead_after_s):
            continue
        why = heartbeat.why_dead(run.run_id, fresh.tags, now, thresholds.dead_after_s)
        instance.report_engine_event(why, fresh)
        instance.report_run_failed(fresh, why)
        log.warning(why)
        dead.append(run.run_id)
    return dead


def waits_for(run_tags: dict, thresholds: heartbeat.Thresholds, now: float | None = None) -> bool:
    """Whether a run waiting for its turn still waits for the run with these tags (it is not dead)."""
    return not heartbeat.is_dead(run_tags, time.time() if now is None else now, thresholds.dead_after_s)
