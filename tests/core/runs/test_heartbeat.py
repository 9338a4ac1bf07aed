"""The heartbeat rule (pure): when an archive run that stopped beating is dead, and the beat itself."""

from __future__ import annotations

import threading
import time

import pytest

from matos_dagster.core.runs import heartbeat
from matos_dagster.core.runs.heartbeat import TAG, Heartbeat, Thresholds, is_dead


def test_a_run_silent_longer_than_the_threshold_is_dead_a_recently_beating_one_is_not():
    now = 1_000_000.0
    assert is_dead({TAG: f"{now - 91:.3f}"}, now, 90)
    assert not is_dead({TAG: f"{now - 89:.3f}"}, now, 90)
    assert not is_dead({TAG: f"{now:.3f}"}, now, 90)


def test_a_run_that_never_beat_is_never_judged_dead_by_beats():
    # Not an archive run, or one that has not reached its first beat: run monitoring's bounds cover it.
    assert not is_dead({}, 1_000_000.0, 90)
    assert not is_dead({TAG: "not a time"}, 1_000_000.0, 90)


def test_thresholds_that_would_kill_a_run_missing_one_beat_are_refused_naming_the_settings():
    with pytest.raises(ValueError, match="MATOS_DEAD_RUN_AFTER_S .* at least 3 x MATOS_HEARTBEAT_S"):
        Thresholds(every_s=30, dead_after_s=60)
    with pytest.raises(ValueError, match="MATOS_HEARTBEAT_S must be a positive"):
        Thresholds(every_s=0, dead_after_s=60)


def test_thresholds_come_from_the_settings_and_a_bad_value_names_its_variable(monkeypatch):
    monkeypatch.setenv("MATOS_HEARTBEAT_S", "10")
    monkeypatch.setenv("MATOS_DEAD_RUN_AFTER_S", "45")
    assert Thresholds.from_settings() == Thresholds(10, 45)
    monkeypatch.setenv("MATOS_DEAD_RUN_AFTER_S", "two minutes")
    with pytest.raises(ValueError, match="MATOS_DEAD_RUN_AFTER_S must be a number of seconds"):
        Thresholds.from_settings()


def test_the_default_settings_judge_a_dead_run_within_two_minutes():
    from matos_dagster.core.settings import BY_NAME

    t = Thresholds(float(BY_NAME["MATOS_HEARTBEAT_S"].default), float(BY_NAME["MATOS_DEAD_RUN_AFTER_S"].default))
    # Dead after the threshold, failed at the lag sensor's next tick (30 s by default).
    assert t.dead_after_s + float(BY_NAME["MATOS_SENSOR_INTERVAL_S"].default) <= 120


def test_the_heartbeat_beats_from_its_own_thread_while_the_work_blocks_the_caller():
    beats: list[float] = []
    enough = threading.Event()

    def beat(now: float) -> None:
        beats.append(now)
        if len(beats) >= 3:
            enough.set()

    with Heartbeat(beat, 0.05, on_error=lambda e: None):
        # The "work": the caller's thread is blocked and never calls anything of the heartbeat.
        assert enough.wait(30), "the heartbeat did not beat three times while the caller was blocked"
    stopped_at = len(beats)
    time.sleep(0.2)  # long enough for four more beats, if it went on
    assert len(beats) == stopped_at, "the heartbeat went on beating after its block ended"


def test_a_failed_beat_is_reported_and_the_next_beat_tries_again():
    errors: list[Exception] = []
    ok = threading.Event()
    calls = []

    def beat(now: float) -> None:
        calls.append(now)
        if len(calls) == 1:
            raise OSError("database is locked")
        ok.set()

    with Heartbeat(beat, 0.05, on_error=errors.append) as hb:
        assert ok.wait(30), "no beat after the failed one"
    assert [str(e) for e in errors] == ["database is locked"]
    assert hb.beats >= 1


def test_why_dead_says_how_long_and_which_settings():
    text = heartbeat.why_dead("r1", {TAG: "100.0"}, 250.0, 90)
    assert "run r1" in text and "150 s" in text and "MATOS_DEAD_RUN_AFTER_S" in text and "MATOS_HEARTBEAT_S" in text
