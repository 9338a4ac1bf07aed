"""The lag sensor's decisions, as a table of situations."""

from dataclasses import replace

import pytest

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.policy import (
    FAILED,
    IN_FLIGHT,
    MAX_ATTEMPTS,
    MISSING,
    SUCCEEDED,
    VANISHED_AFTER_MS,
    Offsets,
    PartitionState,
    decide,
    stopped_reason,
)
from matos_dagster.core.topics import TopicConfig

T = TopicConfig("t", batch_records=100, batch_bytes=10_000, batch_age_s=60, max_range_records=1000)
NOW = 1_000_000_000


def test_nothing_new_requests_nothing():
    d = decide(T, 0, PartitionState(), Offsets(0, 0, None), None, NOW)
    assert d.request is None and d.reason == "no new records"


def test_a_partition_below_every_threshold_waits():
    d = decide(T, 0, PartitionState(), Offsets(0, 50, None), None, NOW, oldest_ts_ms=NOW - 10_000)
    assert d.request is None and "below the batch policy" in d.reason


@pytest.mark.parametrize(
    "offsets, oldest_age_s, avg_bytes, expected_range, why",
    [
        (Offsets(0, 100, None), 0, None, (0, 100), "100 records waiting"),
        (Offsets(0, 50, None), 61, None, (0, 50), "61s old"),
        (Offsets(0, 50, None), 0, 500.0, (0, 50), "bytes waiting"),
        (Offsets(0, 5000, 2000), 0, None, (2000, 3000), "3000 records waiting"),  # backlog cut to max
        (Offsets(10, 200, None), 0, None, (10, 200), "190 records"),  # never committed: from log start
    ],
)
def test_the_batch_policy_requests_a_range(offsets, oldest_age_s, avg_bytes, expected_range, why):
    d = decide(T, 3, PartitionState(), offsets, None, NOW, NOW - oldest_age_s * 1000, avg_bytes)
    assert d.request == OffsetRange("t", 3, *expected_range)
    assert d.run_key == d.request.key and why in d.reason
    assert d.state.key == d.request.key and not d.state.done and d.state.next == expected_range[1]


def requested(start=0, end=100, attempt=1):
    return PartitionState(next=end, key=OffsetRange("t", 0, start, end).key, attempt=attempt, done=False, committed=start)


def test_at_most_one_range_in_flight_per_partition():
    d = decide(T, 0, requested(), Offsets(0, 5000, 0), IN_FLIGHT, NOW)
    assert d.request is None and "in flight" in d.reason


def test_the_next_range_follows_a_succeeded_one():
    d = decide(T, 0, requested(), Offsets(0, 5000, 100), SUCCEEDED, NOW)
    assert d.request == OffsetRange("t", 0, 100, 1100) and d.warning is None


def test_the_age_of_the_records_after_a_succeeded_range_counts():
    # The range succeeded at this tick; the records after it are already older than the batch age.
    d = decide(T, 0, requested(), Offsets(0, 150, 100), SUCCEEDED, NOW, oldest_ts_ms=NOW - 61_000)
    assert d.request == OffsetRange("t", 0, 100, 150) and "61s old" in d.reason


def test_records_without_a_timestamp_age_from_when_they_were_first_seen():
    d = decide(T, 0, PartitionState(), Offsets(0, 50, None), None, NOW, oldest_ts_ms=None)
    assert d.request is None and d.state.oldest_ts_ms == NOW
    later = decide(T, 0, d.state, Offsets(0, 60, None), None, NOW + 61_000)
    assert later.request == OffsetRange("t", 0, 0, 60) and "61s old" in later.reason


def test_a_failed_range_is_requested_again_not_skipped_with_a_new_run_key():
    d = decide(T, 0, requested(), Offsets(0, 5000, 0), FAILED, NOW)
    assert d.request == OffsetRange("t", 0, 0, 100)
    assert d.run_key == d.request.key + "#2" and "attempt 2" in d.reason


def test_a_range_failing_again_and_again_stops_being_requested_and_says_so():
    d = decide(T, 0, requested(attempt=MAX_ATTEMPTS), Offsets(0, 5000, 0), FAILED, NOW)
    assert d.request is None and "failed 5 times" in d.warning


def test_an_offset_moved_by_someone_else_is_reported():
    state = PartitionState(next=100, committed=100)
    moved_back = decide(T, 0, state, Offsets(0, 5000, 40), None, NOW)
    assert "moved from 100 to 40 by someone else" in moved_back.warning
    assert moved_back.request.start == 100  # archived ranges past it are not archived twice
    moved_on = decide(T, 0, state, Offsets(0, 5000, 700), None, NOW)
    assert "moved from 100 to 700" in moved_on.warning and moved_on.request.start == 700


def test_records_deleted_before_archiving_are_reported_loudly_and_nothing_is_requested():
    d = decide(T, 0, PartitionState(committed=10), Offsets(50, 500, 10), None, NOW)
    assert d.request is None and "DATA LOSS" in d.warning and "[10, 50)" in d.warning


def test_state_survives_the_cursor_round_trip():
    s = requested(attempt=3)
    assert PartitionState.from_json(s.to_json()) == s


# A requested key whose run is not in run storage: not created yet, or deleted by run retention.
def test_a_run_not_created_yet_is_in_flight_for_a_while():
    d = decide(T, 0, requested_at(NOW - 60_000), Offsets(0, 5000, 0), MISSING, NOW)
    assert d.request is None and "in flight" in d.reason


def test_a_vanished_run_whose_range_is_committed_counts_as_finished():
    d = decide(T, 0, requested_at(NOW - VANISHED_AFTER_MS), Offsets(0, 5000, 100), MISSING, NOW)
    assert d.request == OffsetRange("t", 0, 100, 1100) and d.state.requested_ms == NOW


def test_a_vanished_run_whose_range_is_not_committed_is_requested_again_not_skipped():
    d = decide(T, 0, requested_at(NOW - VANISHED_AFTER_MS), Offsets(0, 5000, 0), MISSING, NOW)
    assert d.request == OffsetRange("t", 0, 0, 100) and d.run_key == d.request.key + "#2"
    assert "no run in run storage" in d.reason


def test_a_cursor_from_before_the_request_time_starts_the_clock_instead_of_waiting_forever():
    d = decide(T, 0, requested(), Offsets(0, 5000, 100), MISSING, NOW)
    assert d.request is None and d.state.requested_ms == NOW
    later = decide(T, 0, d.state, Offsets(0, 5000, 100), MISSING, NOW + VANISHED_AFTER_MS)
    assert later.request == OffsetRange("t", 0, 100, 1100)


def requested_at(ms: int) -> PartitionState:
    return PartitionState(next=100, key=OffsetRange("t", 0, 0, 100).key, attempt=1, done=False, committed=0,
                          requested_ms=ms)


# A range refused because offsets of it are archived already (an operator's range of another cut):
# no run of it can succeed, so the partition is planned anew from what the archive holds.
@pytest.mark.parametrize(
    "key, committed, archived_over, expected_request, expected_next",
    [
        # archived by hand from the same start, committed to its end: go on after it, under the batch policy
        ((0, 100), 70, (0, 70), (70, 1070), 1070),
        # archived above the range's start, nothing committed: the offsets below it first, requested now
        ((0, 100), None, (50, 120), (0, 50), 50),
        ((0, 100), 0, (50, 120), (0, 50), 50),
        # the committed offset moved into the range meanwhile: from there, up to the archived entry
        ((0, 100), 20, (50, 120), (20, 50), 50),
        # an acknowledged loss (or a range) holding the range's start, not yet committed past: after it
        ((0, 100), 0, (0, 30), (30, 1030), 1030),
        # the entry ends past the log end's backlog cut: the next range starts at its end
        ((100, 200), 100, (90, 400), (400, 1400), 1400),
    ],
)
def test_a_range_refused_as_archived_in_part_is_planned_again_from_the_archive_not_repeated(
        key, committed, archived_over, expected_request, expected_next):
    state = requested(*key, attempt=MAX_ATTEMPTS)  # even at the last attempt: no give-up
    d = decide(T, 0, state, Offsets(0, 5000, committed), FAILED, NOW, NOW - 61_000, archived_over=archived_over)
    assert d.request == OffsetRange("t", 0, *expected_request)
    assert d.run_key == d.request.key, "a new range (a new key, registered), not a retry"
    assert d.state.key == d.request.key and d.state.attempt == 1 and d.state.next == expected_next
    assert not d.state.stopped
    assert f"offsets [{archived_over[0]}, {archived_over[1]}) of it are archived already" in d.warning


def test_a_range_refused_as_archived_whose_rest_is_not_due_waits_under_the_batch_policy():
    d = decide(T, 0, requested(0, 100), Offsets(0, 90, 0), FAILED, NOW, NOW, archived_over=(0, 60))
    assert d.request is None and d.state.done and d.state.next == 60
    assert "30 records waiting" in d.reason and "goes on from offset 60" in d.warning


def test_a_failed_range_committed_past_its_end_since_is_done_not_requested_again():
    """Another run archived it: an operator's, or the command the give-up names."""
    for attempt in (1, MAX_ATTEMPTS):
        d = decide(T, 0, requested(0, 100, attempt), Offsets(0, 5000, 100), FAILED, NOW, NOW)
        assert d.request == OffsetRange("t", 0, 100, 1100) and not d.state.stopped


@pytest.mark.parametrize(
    "situation, state, offsets, run, stopped",
    [
        ("given up", requested(attempt=MAX_ATTEMPTS), Offsets(0, 5000, 0), FAILED, True),
        ("still retried", requested(attempt=MAX_ATTEMPTS - 1), Offsets(0, 5000, 0), FAILED, None),
        ("given up, then archived by hand", replace(requested(attempt=MAX_ATTEMPTS), stopped=True),
         Offsets(0, 5000, 100), FAILED, None),
        ("given up, still failed", replace(requested(attempt=MAX_ATTEMPTS), stopped=True), Offsets(0, 5000, 0),
         FAILED, True),
        ("in flight", requested(), Offsets(0, 5000, 0), IN_FLIGHT, None),
    ],
)
def test_a_partition_given_up_on_is_marked_stopped_with_the_one_command_that_goes_on(
        situation, state, offsets, run, stopped):
    d = decide(T, 7, state, offsets, run, NOW, NOW)
    assert d.state.stopped == stopped, situation
    assert PartitionState.from_json(d.state.to_json()) == d.state
    if stopped:
        key = OffsetRange("t", 0, 0, 100).key
        assert d.warning == stopped_reason("t", 7, d.state)
        assert d.warning.startswith(f"t/7: range {key} failed {MAX_ATTEMPTS} times")
        assert d.warning.endswith(f"-m matos_dagster archive {key}")
