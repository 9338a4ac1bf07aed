"""The monitor's judgement of a partition, as a table of situations."""

from matos_dagster.monitor import ERROR, OK, WARN, Sample, evaluate_partition, overall
from matos_dagster.topics import TopicConfig

T = TopicConfig("t", lag_warn_records=100, stall_s=600)
NOW = 10_000.0


def judge(low=0, high=0, committed=None, ranges=(), oldest_ms=None, history=()):
    return evaluate_partition(T, 0, low, high, committed, list(ranges), oldest_ms, list(history), NOW)


def test_an_archive_that_keeps_up_is_ok():
    r = judge(0, 300, 300, [(0, 100), (100, 300)])
    assert (r.status, r.ahwm, r.lag_records, r.gaps, r.lost) == (OK, 300, 0, [], [])


def test_lag_in_seconds_is_the_age_of_the_oldest_unarchived_record():
    r = judge(0, 350, 300, [(0, 300)], oldest_ms=(NOW - 42) * 1000)
    assert r.lag_records == 50 and r.lag_seconds == 42.0 and r.status == OK


def test_a_gap_between_manifests_is_an_error():
    r = judge(0, 300, 100, [(0, 100), (200, 300)])
    assert r.status == ERROR and r.gaps == [(100, 200)]


def test_an_overlap_is_an_error():
    r = judge(0, 300, 300, [(0, 200), (100, 300)])
    assert r.status == ERROR and r.overlaps == [(100, 200)]


def test_an_offset_committed_past_the_archive_is_a_gap():
    r = judge(0, 500, 400, [(0, 100)])
    assert r.status == ERROR and r.gaps == [(100, 400)]


def test_records_deleted_before_they_were_archived_are_lost():
    r = judge(low=150, high=500, committed=100, ranges=[(0, 100)])
    assert r.status == ERROR and r.lost == [(100, 150)]


def test_records_deleted_after_they_were_archived_are_not_lost():
    r = judge(low=150, high=500, committed=200, ranges=[(0, 200)])
    assert r.status == OK and r.lost == []


def test_a_topic_never_archived_has_lost_nothing_yet():
    assert judge(low=150, high=500).lost == []


def test_lag_high_and_not_shrinking_over_the_window_warns():
    history = [Sample(NOW - 40 + i * 10, 100 + i, 500 + i * 10) for i in range(4)]
    r = judge(0, 700, 104, [(0, 104)], history=history)
    assert r.status == WARN and "not shrinking" in r.reasons[0]


def test_lag_high_but_shrinking_is_ok():
    history = [Sample(NOW - 40 + i * 10, 100 + i * 50, 600 - i * 50) for i in range(4)]
    assert judge(0, 700, 300, [(0, 300)], history=history).status == OK


def test_a_committed_offset_that_does_not_move_while_records_wait_is_a_stall():
    history = [Sample(NOW - 900 + i * 100, 100, 50) for i in range(9)]
    r = judge(0, 150, 100, [(0, 100)], history=history)
    assert r.status == ERROR and "stalled" in r.reasons[0]


def test_the_topic_status_is_its_worst_partition():
    assert overall([judge(0, 10, 10, [(0, 10)]), judge(0, 300, 100, [(0, 100), (200, 300)])]) == ERROR
    assert overall([]) == OK
