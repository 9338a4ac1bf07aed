"""A run's heartbeat, and when a run that stopped beating is judged dead. No Dagster imports.

The default run launcher starts each run worker from the code server, which notices the
worker's process ending and fails the run. Nobody notices when the code server is gone too
(a lost machine, a restarted container, the out-of-memory killer taking both), nor for a run
started in the caller's process (`dagster asset materialize`, `dg launch`): such a run stays
STARTED until run monitoring's `max_runtime_seconds`. So each archive run beats: a thread of
its own writes the time into a run tag every `every_s` seconds, whatever the work is doing (a
long Spark job, a wait for a turn), and a run whose latest beat is older than `dead_after_s`
is judged dead: failed, so that its range is requested again and its turn passes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from matos_dagster.core import settings

TAG = "matos/heartbeat"  # seconds since the epoch of the run's latest beat


@dataclass(frozen=True)
class Thresholds:
    every_s: float  # seconds between two beats
    dead_after_s: float  # a run with no beat for this long is dead

    def __post_init__(self):
        if not self.every_s > 0:
            raise ValueError(f"MATOS_HEARTBEAT_S must be a positive number of seconds, not {self.every_s}")
        # Three missed beats at least: one slow write (a busy database) must never kill a live run.
        if self.dead_after_s < 3 * self.every_s:
            raise ValueError(
                f"MATOS_DEAD_RUN_AFTER_S ({self.dead_after_s}) must be at least 3 x MATOS_HEARTBEAT_S "
                f"({self.every_s}), so that a live run missing a beat or two is never judged dead; "
                "raise MATOS_DEAD_RUN_AFTER_S or lower MATOS_HEARTBEAT_S"
            )

    @classmethod
    def from_settings(cls) -> "Thresholds":
        values = {}
        for name in ("MATOS_HEARTBEAT_S", "MATOS_DEAD_RUN_AFTER_S"):
            raw = settings.get(name)
            try:
                values[name] = float(raw)
            except ValueError:
                raise ValueError(f"{name} must be a number of seconds, not {raw!r}") from None
        return cls(values["MATOS_HEARTBEAT_S"], values["MATOS_DEAD_RUN_AFTER_S"])


def last_beat(tags: dict) -> float | None:
    """The run's latest beat (seconds since the epoch), None if it never beat (or the tag is not ours)."""
    try:
        return float(tags[TAG])
    except (KeyError, ValueError):
        return None


def silent_for(tags: dict, now: float) -> float | None:
    """Seconds since the run's latest beat; None for a run that never beat (never judged by beats)."""
    beat = last_beat(tags)
    return None if beat is None else now - beat


def is_dead(tags: dict, now: float, dead_after_s: float) -> bool:
    """A run is dead when it beat once and has not beaten for `dead_after_s` seconds.

    A run that never beat is not judged here: it is either not an archive run, or one that has not
    reached its first beat yet (run monitoring's start timeout and max runtime cover those).
    """
    silent = silent_for(tags, now)
    return silent is not None and silent > dead_after_s


def why_dead(run_id: str, tags: dict, now: float, dead_after_s: float) -> str:
    silent = silent_for(tags, now) or 0.0
    return (
        f"run {run_id} has not written its heartbeat for {silent:.0f} s (a live archive run writes it every few "
        f"seconds, MATOS_HEARTBEAT_S; dead after MATOS_DEAD_RUN_AFTER_S = {dead_after_s:.0f} s): its process is "
        "gone (killed, out of memory, a lost machine or code server). Marked failed, so that the lag sensor "
        "requests its range again"
    )


class Heartbeat:
    """Calls `beat(now)` at once and then every `every_s` seconds from a daemon thread, until stopped.

    The thread only sleeps and writes, so the work (Spark, Swift uploads, a wait for a turn) never
    delays it. A failed write is told to `on_error` and tried again at the next beat.
    """

    def __init__(self, beat: Callable[[float], None], every_s: float, on_error: Callable[[Exception], None]):
        self._beat, self._every_s, self._on_error = beat, every_s, on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="matos-heartbeat", daemon=True)
        self.beats = 0

    def _loop(self) -> None:
        while True:
            try:
                self._beat(time.time())
                self.beats += 1
            except Exception as e:  # noqa: BLE001 - the next beat tries again; the run goes on
                self._on_error(e)
            if self._stop.wait(self._every_s):
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self._every_s + 30)
