"""Retention's rules, without Dagster: which keys and which runs may go."""

import pytest

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.retention import DAY_S, Policy, RunInfo, deletable_runs, prunable_keys


def keys(partition: int, *bounds: int) -> list[str]:
    return [OffsetRange("t", partition, a, b).key for a, b in zip(bounds, bounds[1:])]


def test_the_newest_keys_of_each_partition_stay_and_older_committed_ones_go_oldest_first():
    ks = keys(0, 0, 10, 20, 30, 40) + keys(1, 0, 5, 10, 15)
    got = prunable_keys(reversed(ks), keep=2, committed={0: 40, 1: 15}, in_flight=set())
    assert [(r.partition, r.start) for r in got] == [(0, 0), (0, 10), (1, 0)]


def test_a_range_not_committed_keeps_its_key():
    got = prunable_keys(keys(0, 0, 10, 20, 30, 40), keep=1, committed={0: 15}, in_flight=set())
    assert [r.start for r in got] == [0]
    assert prunable_keys(keys(0, 0, 10, 20), keep=1, committed={0: None}, in_flight=set()) == []


def test_a_range_with_a_run_in_flight_keeps_its_key():
    ks = keys(0, 0, 10, 20, 30)
    got = prunable_keys(ks, keep=1, committed={0: 30}, in_flight={ks[0]})
    assert [r.start for r in got] == [10]


def test_keys_that_are_not_ranges_are_left_alone():
    got = prunable_keys(["made-by-hand", *keys(0, 0, 10, 20)], keep=1, committed={0: 20}, in_flight=set())
    assert [r.start for r in got] == [0]


def run(i: int, job: str = "archive", failed: bool = False, finished: bool = True, age_days: float = 0,
        partition: str | None = None) -> RunInfo:
    return RunInfo(f"r{i}", job, finished, failed, 1_000_000_000 - age_days * DAY_S, partition)


def test_each_job_keeps_its_newest_finished_runs():
    runs = [run(i, "archive") for i in range(15)] + [run(100 + i, "monitor") for i in range(12)]
    got = list(deletable_runs(runs, Policy(keep_runs=10), now_s=1_000_000_000))
    assert got == [f"r{i}" for i in range(10, 15)] + ["r110", "r111"]


def test_runs_not_finished_are_never_deleted_nor_counted():
    runs = [run(i, finished=False) for i in range(5)] + [run(10 + i) for i in range(11)]
    assert list(deletable_runs(runs, Policy(keep_runs=10), now_s=1_000_000_000)) == ["r20"]


def test_a_failed_run_stays_for_its_days_then_goes():
    runs = [run(i) for i in range(10)] + [run(50, failed=True, age_days=3), run(51, failed=True, age_days=20)]
    assert list(deletable_runs(runs, Policy(keep_runs=10, keep_failed_days=14), now_s=1_000_000_000)) == ["r51"]


def test_the_newest_successful_run_of_each_day_stays_as_it_holds_the_days_materialisation():
    # Newest first: day 2026-11-25 twice (late records came), then 11 older days; then 11 ranges' runs.
    days = [run(0, "days_clicks_job", partition="2026-11-25"), run(1, "days_clicks_job", partition="2026-11-25")]
    days += [run(10 + i, "days_clicks_job", partition=f"2026-10-{i + 1:02d}") for i in range(11)]
    ranges = [run(50 + i, partition=k) for i, k in enumerate(keys(0, *range(0, 120, 10)))]
    got = list(deletable_runs(days + ranges, Policy(keep_runs=10), now_s=1_000_000_000))
    assert got == ["r60"]  # 13 runs of the days' job, none deleted; the 11th range's run goes
    older = [run(2 + i, "days_clicks_job", partition="2026-11-25") for i in range(10)]
    assert list(deletable_runs(days[:2] + older, Policy(keep_runs=10), now_s=1_000_000_000)) == ["r11"]


@pytest.mark.parametrize("kw, setting", [({"keep_keys": 0}, "MATOS_KEEP_KEYS"), ({"keep_runs": 3}, "MATOS_KEEP_RUNS"),
                                         ({"keep_failed_days": -1}, "MATOS_KEEP_FAILED_RUNS_DAYS")])
def test_a_policy_that_would_forget_what_is_needed_is_refused_naming_its_setting(kw, setting):
    with pytest.raises(ValueError, match=setting):
        Policy(**kw)
