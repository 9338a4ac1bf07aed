"""Turns on a real Dagster instance: two runs' claims interleaved as the race needs leave one run
in its turn (the rule, every interleaving of its steps, is in tests/core/runs/test_turns.py)."""

from __future__ import annotations

from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.test_utils import create_run_for_test

from matos_dagster.assets.archive import claim_turn
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs import turns as core_turns
from matos_dagster.core.runs.heartbeat import Thresholds
from matos_dagster.turns import TURN_TAG, ahead_of, where

T = Thresholds(every_s=15, dead_after_s=90)


def test_a_run_that_claims_while_another_is_between_its_claims_steps_leaves_one_run_in_its_turn(tmp_path):
    r = OffsetRange("orders", 3, 0, 100)
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        a, b = (create_run_for_test(instance, status=DagsterRunStatus.STARTED) for _ in range(2))
        real = instance.add_run_tags
        seen_by_b: dict[str, dict] = {}

        def a_held_up(run_id, tags):
            # Run a is held just before the write that orders it (its number: it read the others'
            # already; before, its time taken but not written): meanwhile run b claims in full and
            # looks whether its turn has come.
            if run_id == a.run_id and tags.get(TURN_TAG) != core_turns.CHOOSING and not seen_by_b:
                seen_by_b["claim"] = claim_turn(instance, b.run_id, r)
                seen_by_b["ahead"] = ahead_of(instance, seen_by_b["claim"], {where(r)}, T)
            return real(run_id, tags)

        instance.add_run_tags = a_held_up
        mine = claim_turn(instance, a.run_id, r)
        instance.add_run_tags = real

        assert seen_by_b, "run a's claim was never held up"
        ahead = {a.run_id: ahead_of(instance, mine, {where(r)}, T), b.run_id: seen_by_b["ahead"]}
        in_turn = [run for run, busy in ahead.items() if not busy]
        assert len(in_turn) <= 1, f"two runs in their turn in {where(r)}: {in_turn}"
        # Once both claims are written, exactly one run goes first (the other reads again and waits).
        again = [ahead_of(instance, c, {where(r)}, T) for c in (mine, seen_by_b["claim"])]
        assert sum(not busy for busy in again) == 1, again
