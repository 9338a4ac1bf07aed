"""When a day (or hour) of a topic is complete, and what it holds: the rules, as situations.

Times are in hours from a Monday 00:00 UTC; every range is given with its hour buckets, as an
archive run's manifest will carry them.
"""

import copy
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from matos_dagster.core.days import buckets, windows
from matos_dagster.core.days.completeness import ArchivedRange, Rules, TopicTime, advance, next_completion_ms

H = windows.HOUR_MS
D = windows.DAY_MS
MONDAY = 1_795_392_000_000  # 2026-11-23 00:00 UTC
DAYS = Rules(length_ms=D, allowed_lateness_ms=H, idle_ms=10 * 60_000, future_margin_ms=H)


def at(hours: float) -> int:
    return MONDAY + int(hours * H)


def rng(start: int, end: int, *stamps: float, untimed: int = 0) -> ArchivedRange:
    """A range of one record per stamp (hours from Monday), offsets from `start`, 10 bytes each."""
    ts = [at(h) for h in stamps]
    b, _ = buckets.of_records(pa.array(ts, pa.int64()), pa.array(range(start, start + len(ts))),
                              np.full(len(ts), 10))
    return ArchivedRange(start, end, f"r{start}", b, untimed)


def keys(updates) -> list[str]:
    return [windows.key(u.start, D) + (" late" if u.late else "") for u in updates]


def test_a_day_is_complete_when_every_partitions_watermark_has_passed_its_end():
    state = TopicTime()
    # Partition 0 has reached Tuesday 02:00 (minus an hour of lateness: 01:00); partition 1 only Monday 20:00.
    state, done = advance(state, {0: [rng(0, 3, 1, 10, 26)], 1: [rng(0, 2, 5, 20)]}, {0: 10, 1: 10}, at(27), DAYS)
    assert done == []
    state, done = advance(state, {1: [rng(2, 3, 25.5)]}, {0: 10, 1: 10}, at(27), DAYS)
    assert keys(done) == ["2026-11-23"]
    monday = done[0].parts
    assert {p: (x.records, x.bytes, x.first_offset, x.last_offset, list(x.ranges)) for p, x in monday.items()} == {
        0: (2, 20, 0, 1, ["r0"]), 1: (2, 20, 0, 1, ["r0"])}


def test_a_producer_clock_in_the_future_is_counted_its_record_in_its_day_and_it_moves_nothing_past_the_margin():
    year_2200 = 24 * 365 * 174
    state, done = advance(TopicTime(), {0: [rng(0, 2, 1, year_2200)]}, {0: 10}, at(2), DAYS)
    assert done == [] and state.partitions[0].future == 1
    assert state.partitions[0].max_ts == at(2) + DAYS.future_margin_ms  # held to now + the margin
    assert state.pending[windows.start_of(at(year_2200), D)][0].records == 1  # 2200's day holds it


def test_a_producer_clock_two_hours_ahead_stalls_nothing_and_each_of_its_records_is_in_its_day():
    # Monday 20:00, partition 0's producer stamps +2 h: beyond the margin (1 h) when read.
    state, done = advance(TopicTime(), {0: [rng(0, 2, 22, 23.5)], 1: [rng(0, 1, 19.9)]}, {0: 10, 1: 10}, at(20),
                          DAYS)
    assert done == [] and state.partitions[0].future == 2
    # Tuesday 01:36: partition 1 is at 01:30, partition 0 again 2 h ahead, held to 02:36 (the margin).
    state, done = advance(state, {0: [rng(2, 3, 27.5)], 1: [rng(1, 2, 25.5)]}, {0: 10, 1: 10}, at(25.6), DAYS)
    assert keys(done) == ["2026-11-23"]
    assert {p: part.records for p, part in done[0].parts.items()} == {0: 2, 1: 1}


def test_a_partition_whose_archive_begins_past_offset_0_completes_its_days():
    # Partition 0's first 50 offsets were deleted before anything was archived: its archive begins at 50.
    state, done = advance(TopicTime(), {0: [rng(50, 52, 1, 26)], 1: [rng(0, 2, 5, 27)]}, {0: 52, 1: 2}, at(28),
                          DAYS)
    assert keys(done) == ["2026-11-23"] and state.partitions[0].next_offset == 52
    assert done[0].parts[0].first_offset == 50


def test_records_stamped_before_windows_start_are_counted_in_no_day_and_no_day_before_it_is_complete():
    rules = replace(DAYS, first_ms=MONDAY)
    state, done = advance(TopicTime(), {0: [rng(0, 4, -MONDAY / H, -30, 1, 30)]}, {0: 10}, at(31), rules)  # 1970
    assert keys(done) == ["2026-11-23"] and state.partitions[0].outside == 2


def test_an_evaluation_completes_at_most_the_windows_it_is_given_and_the_next_goes_on():
    ranges = {0: [rng(0, 5, 1, 25, 49, 73, 97)]}  # Monday to Friday
    state, done = advance(TopicTime(), ranges, {0: 10}, at(98), DAYS, most=2)
    assert keys(done) == ["2026-11-23", "2026-11-24"] and state.complete_to == at(48)
    state, done = advance(state, {}, {0: 10}, at(98), DAYS, most=2)
    assert keys(done) == ["2026-11-25", "2026-11-26"]


def test_an_idle_partition_holds_back_no_day():
    state, _ = advance(TopicTime(), {0: [rng(0, 1, 1)], 1: [rng(0, 1, 30)]}, {0: 1, 1: 1}, at(30.5), DAYS)
    # Partition 0 archived to its log end, which has not moved for the idle time: Monday is complete.
    state, done = advance(state, {}, {0: 1, 1: 1}, at(30.5) + DAYS.idle_ms, DAYS)
    assert keys(done) == ["2026-11-23"]
    # A partition whose prefix does not reach its log end is not idle, however long it waits.
    s2, _ = advance(TopicTime(), {0: [rng(0, 1, 1)], 1: [rng(0, 1, 30)]}, {0: 5, 1: 1}, at(30.5), DAYS)
    s2, done = advance(s2, {}, {0: 5, 1: 1}, at(30.5) + 10 * DAYS.idle_ms, DAYS)
    assert done == []


def test_a_record_of_a_complete_day_archived_later_is_late_and_the_day_comes_again():
    state, done = advance(TopicTime(), {0: [rng(0, 2, 1, 30)]}, {0: 10}, at(31), DAYS)
    assert keys(done) == ["2026-11-23"]
    state, done = advance(state, {0: [rng(2, 4, 2, 31)]}, {0: 10}, at(32), DAYS)
    assert keys(done) == ["2026-11-23 late"] and done[0].parts[0].late == 1 and list(done[0].parts[0].ranges) == ["r2"]


def test_days_without_a_record_between_complete_days_are_complete_too_but_not_before_the_first():
    state, done = advance(TopicTime(), {0: [rng(0, 1, 1)]}, {0: 10}, at(1), DAYS)
    state, done = advance(state, {0: [rng(1, 2, 24 * 4)]}, {0: 10}, at(24 * 4), DAYS)
    assert keys(done) == ["2026-11-23", "2026-11-24", "2026-11-25"]
    assert [sum(p.records for p in u.parts.values()) for u in done] == [1, 0, 0]
    # At the first evaluation too: from the first day with a record (not from 1970).
    state, done = advance(TopicTime(), {0: [rng(0, 2, 1, 24 * 3 + 1)]}, {0: 10}, at(24 * 3 + 1), DAYS)
    assert keys(done) == ["2026-11-23", "2026-11-24", "2026-11-25"]


def test_ranges_after_a_gap_wait_for_it():
    state, done = advance(TopicTime(), {0: [rng(0, 1, 1), rng(5, 6, 40)]}, {0: 10}, at(41), DAYS)
    assert done == [] and state.partitions[0].next_offset == 1


def test_records_without_a_timestamp_belong_to_no_day_and_are_counted():
    state, _ = advance(TopicTime(), {0: [rng(0, 3, 1, untimed=2)]}, {0: 10}, at(2), DAYS)
    assert state.partitions[0].untimed == 2


def lost(start: int, end: int) -> ArchivedRange:
    """An acknowledged loss [start, end), as the archive lists it: offsets of no record."""
    return ArchivedRange(start, end, "", {}, 0, lost=end - start)


def test_an_acknowledged_loss_is_reported_on_every_day_from_the_last_record_before_it_to_the_first_after():
    # Monday 22:00, then offsets 1-3 lost, then Wednesday 01:00: Monday, Tuesday and Wednesday may miss records.
    state, done = advance(TopicTime(), {0: [rng(0, 1, 22), lost(1, 4), rng(4, 5, 49)]}, {0: 10}, at(51), DAYS)
    assert keys(done) == ["2026-11-23", "2026-11-24"]
    assert [u.parts[0].losses for u in done] == [[(1, 4)]] * 2 and state.pending[at(48)][0].losses == [(1, 4)]
    assert [(u.parts[0].records, u.parts[0].first_offset, u.parts[0].last_offset) for u in done] == [
        (1, 0, 0), (0, None, None)]  # a loss holds no record and no offset of the day's
    assert state.partitions[0].lost == 3 and state.partitions[0].losses == []


def test_a_loss_after_a_complete_day_gives_that_day_a_new_version_at_once():
    state, _ = advance(TopicTime(), {0: [rng(0, 1, 1)]}, {0: 1}, at(30), DAYS)
    state, done = advance(state, {}, {0: 1}, at(30) + DAYS.idle_ms, DAYS)  # idle: Monday is complete
    assert keys(done) == ["2026-11-23"]
    # Offsets 1-3 deleted before they were archived, acknowledged: the last record before them is Monday's.
    state, done = advance(state, {0: [lost(1, 4)]}, {0: 4}, at(31), DAYS)
    assert keys(done) == ["2026-11-23 late"] and done[0].parts[0].losses == [(1, 4)]
    assert done[0].parts[0].records == 0  # the change is the loss alone: Monday's records stay as they were
    # The first record after them is Wednesday's: Tuesday may have lost records too.
    state, done = advance(state, {0: [rng(4, 5, 50)]}, {0: 10}, at(51), DAYS)
    assert keys(done) == ["2026-11-23 late", "2026-11-24"] and done[1].parts[0].losses == [(1, 4)]


def test_a_loss_before_the_first_record_is_reported_on_the_first_records_day():
    state, done = advance(TopicTime(), {0: [lost(0, 5), rng(5, 7, 30, 50)]}, {0: 10}, at(51), DAYS)
    assert keys(done) == ["2026-11-24"] and done[0].parts[0].losses == [(0, 5)]


def test_hour_buckets_of_records_are_exact_before_1970_and_without_timestamps():
    ts = pa.array([-1, 0, None, H + 5, H + 7], pa.int64())
    b, untimed = buckets.of_records(ts, pa.array([10, 11, 12, 13, 14]), np.array([1, 2, 3, 4, 5]))
    assert untimed == 1
    assert b == {-H: [1, 1, 10, 10, -1], 0: [1, 2, 11, 11, 0], H: [2, 9, 13, 14, H + 7]}
    assert buckets.merge(b, {H: [1, 1, 20, 20, H + 9]})[H] == [3, 10, 13, 20, H + 9]
    assert buckets.from_json(buckets.to_json(b)) == b


@pytest.mark.parametrize("grain, key", [("day", "2026-11-23"), ("hour", "2026-11-23-05:00")])
def test_window_keys_are_dagsters_partition_keys_and_parse_back(grain, key):
    length = windows.window_ms(grain)
    start = windows.start_of(at(5.5), length)
    assert windows.key(start, length) == key and windows.parse(key, length) == (start, start + length)
    with pytest.raises(ValueError, match="is not a window of this topic"):
        windows.parse("Tuesday", length)


@pytest.mark.parametrize("rules", [DAYS, replace(DAYS, allowed_lateness_ms=0, future_margin_ms=2 * H),
                                   replace(DAYS, future_margin_ms=0)])
def test_no_window_completes_before_next_completion_ms_whatever_is_archived_then(rules):
    """The days sensor leaves a busy topic alone until then (but for late records, every rest_s): a record
    stamped far ahead counts as now plus the margin at most, an idle partition as now, less the lateness."""
    state, _ = advance(TopicTime(), {0: [rng(0, 1, 1)]}, {0: 1}, at(2), rules)
    first = next_completion_ms(state, rules)
    assert first == at(24) + rules.allowed_lateness_ms - rules.future_margin_ms  # Monday's end, lateness, margin
    year_2200 = 24 * 365 * 174
    for now, complete in ((first - 1, []), (first, ["2026-11-23"])):
        _, done = advance(copy.deepcopy(state), {0: [rng(1, 2, year_2200)]}, {0: 2}, now, rules)
        assert keys(done) == complete
        _, idle = advance(copy.deepcopy(state), {}, {0: 1}, now - 1, rules)  # idle since Monday 02:00
        assert keys(idle) == []
    done_state, _ = advance(copy.deepcopy(state), {0: [rng(1, 2, year_2200)]}, {0: 2}, first, rules)
    assert next_completion_ms(done_state, rules) == first + D  # Tuesday's turn
    assert next_completion_ms(TopicTime(), rules) is None  # nothing read: any evaluation may begin a window
