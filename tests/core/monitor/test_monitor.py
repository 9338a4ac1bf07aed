"""The monitor's judgement of a partition, as a table of situations."""

import pytest

from matos_dagster.core.monitor.report import (
    ERROR,
    FROM_INSTANCE,
    FROM_MARK,
    OK,
    WARN,
    WHOLE,
    WHOLE_MARK_STALE,
    WINDOW,
    Known,
    Sample,
    evaluate_partition,
    overall,
    start_from,
)
from matos_dagster.core.swift.archived import LOSS, RANGE, Entry
from matos_dagster.core.topics import TopicConfig

T = TopicConfig("t", lag_warn_records=100, stall_s=600)
NOW = 10_000.0


def judge(low=0, high=0, committed=None, ranges=(), oldest_ms=None, history=(), losses=(), known=None):
    entries = [Entry(a, b, RANGE) for a, b in ranges] + [Entry(a, b, LOSS) for a, b in losses]
    return evaluate_partition(T, 0, low, high, committed, entries, oldest_ms, list(history), NOW, known)


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


def test_one_earlier_sample_of_high_lag_does_not_warn_the_window_is_every_evaluation():
    # Issue 20.6: it warned after one earlier sample; the window is WINDOW evaluations.
    for earlier in range(1, WINDOW - 1):
        history = [Sample(NOW - 10 * (earlier - i), 100, 500 + i) for i in range(earlier)]
        assert judge(0, 700, 100, [(0, 100)], history=history).status == OK, earlier


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


# -- acknowledged loss and coverage judged once (issue 12.5) ------------------------------


def test_after_an_acknowledged_loss_and_commit_past_it_the_partition_is_ok():
    r = judge(low=250, high=1000, committed=1000, ranges=[(250, 1000)], losses=[(100, 250)])
    assert (r.status, r.gaps, r.lost, r.acknowledged, r.ahwm) == (OK, [], [], [(100, 250)], 1000), r.reasons
    assert not any("committed but in no manifest" in why for why in r.reasons)


def test_a_loss_before_archived_ranges_is_acknowledged_not_an_error():
    r = judge(low=250, high=1000, committed=1000, ranges=[(0, 100), (250, 1000)], losses=[(100, 250)])
    assert (r.status, r.gaps, r.lost, r.acknowledged, r.ahwm) == (OK, [], [], [(100, 250)], 1000)


def test_an_unacknowledged_loss_under_a_moved_offset_is_listed_once_as_lost_not_as_committed_and_missing():
    r = judge(low=250, high=1000, committed=1000, ranges=[(0, 100), (250, 1000)])
    assert r.status == ERROR and r.lost == [(100, 250)] and r.gaps == []
    assert not any("committed but in no manifest" in why for why in r.reasons), r.reasons
    assert sum("[100, 250)" in why for why in r.reasons) == 1, r.reasons


def test_a_hole_half_deleted_is_lost_below_the_log_start_and_a_gap_above_it():
    r = judge(low=150, high=1000, committed=1000, ranges=[(0, 100), (200, 1000)])
    assert r.status == ERROR and r.lost == [(100, 150)] and r.gaps == [(150, 200)]


def test_a_committed_offset_past_the_archive_and_the_log_start_is_lost_then_committed_but_missing():
    r = judge(low=150, high=500, committed=400, ranges=[(0, 100)])
    assert r.lost == [(100, 150)] and r.gaps == [(150, 400)]
    assert "offsets [150, 400) are committed but in no manifest" in r.reasons


def test_a_range_overlapping_an_acknowledged_loss_is_an_overlap():
    r = judge(low=250, high=1000, committed=1000, ranges=[(200, 1000)], losses=[(100, 250)])
    assert r.status == ERROR and r.overlaps == [(200, 250)]


def test_an_offset_moved_back_below_the_archive_is_waiting_not_lost_or_a_gap():
    r = judge(low=0, high=300, committed=50, ranges=[(100, 300)])
    assert (r.gaps, r.lost) == ([], [])


# -- incremental: what an earlier evaluation knew stands for the history below it (13.2) -----


@pytest.mark.parametrize("ranges, losses, low, committed", [
    ([(0, 100), (100, 200), (200, 300)], [], 0, 300),
    ([(0, 100), (250, 300)], [(100, 250)], 250, 300),
    ([(0, 100), (100, 200), (250, 300)], [], 0, 200),        # a gap past the known part
    ([(0, 100), (100, 200), (150, 300)], [], 0, 300),        # an overlap
    ([(0, 100)], [], 150, 100),                               # an unacknowledged loss
])
def test_an_evaluation_from_the_known_part_judges_as_one_that_read_everything(ranges, losses, low, committed):
    full = judge(low, 400, committed, ranges, losses=losses)
    assert full.known is not None
    k = full.known
    newer = [s for s in ranges if s[1] > k.sound_to], [s for s in losses if s[1] > k.sound_to]  # entries_from
    again = judge(low, 400, committed, newer[0], losses=newer[1], known=k)
    assert (again.status, again.gaps, again.overlaps, again.lost, again.acknowledged, again.ahwm,
            again.archived_ranges, again.archived_offsets) == (
        full.status, full.gaps, full.overlaps, full.lost, full.acknowledged, full.ahwm,
        full.archived_ranges, full.archived_offsets)
    assert again.known == k


def test_what_is_known_stops_at_the_first_hole_or_overlap():
    assert judge(0, 400, 300, [(0, 100), (100, 200), (250, 300)]).known.sound_to == 200
    assert judge(0, 400, 300, [(0, 100), (100, 200), (150, 300)]).known.sound_to == 100
    k = judge(250, 400, 300, [(0, 100), (250, 300)], losses=[(100, 250)]).known
    assert k == Known(first=0, sound_to=300, ranges=2, offsets=150, acknowledged=((100, 250),))
    assert Known.from_json(k.to_json()) == k and Known.from_json("junk") is None


def test_a_topic_made_anew_below_what_was_known_is_read_whole_again():
    r = judge(0, 50, 50, [(0, 50)], known=Known(0, 300, 3, 300))
    assert r.ahwm == 50 and r.archived_ranges == 1


def test_a_range_containing_the_end_of_the_known_part_stands_for_it_and_is_no_overlap():
    # Compaction replaced [200, 300) and [300, 400) by [200, 400) after the known part ended at 300.
    r = judge(0, 500, 400, [(200, 400)], known=Known(0, 300, 3, 300))
    assert (r.status, r.overlaps, r.gaps, r.ahwm) == (OK, [], [], 400)


# -- where an evaluation starts: the instance's Known, the archive's mark, or the whole (13) ----


class FakeArchive:
    """`last_before` over a list of entries, as archived.py answers it; counts the lookups."""

    def __init__(self, *spans):
        self.entries = sorted(Entry(a, b, RANGE) for a, b in spans)
        self.lookups = 0

    def last_before(self, offset):
        self.lookups += 1
        below = [e for e in self.entries if e.start < offset]
        return max(below, key=lambda e: (e.start, e.end), default=None)


MARK = Known(0, 300, 3, 300)


def test_a_fresh_instance_starts_from_the_archives_mark_when_it_still_holds():
    archive = FakeArchive((0, 100), (100, 200), (200, 300), (300, 400))
    assert start_from(archive, None, MARK, 400) == (MARK, FROM_MARK)
    assert archive.lookups == 1  # the mark starts at 0: nothing can be below it


def test_without_a_known_anywhere_the_partition_is_read_whole():
    assert start_from(FakeArchive((0, 100)), None, None, 400) == (None, WHOLE)


def test_the_further_of_the_instances_known_and_the_mark_is_taken():
    archive = FakeArchive((0, 100), (100, 200), (200, 300))
    behind = Known(0, 200, 2, 200)
    assert start_from(archive, behind, MARK, 400) == (MARK, FROM_MARK)
    assert start_from(archive, MARK, behind, 400) == (MARK, FROM_INSTANCE)
    assert start_from(archive, MARK, MARK, 400) == (MARK, FROM_INSTANCE)
    assert archive.lookups == 1  # the instance's own Known is not looked up again


@pytest.mark.parametrize("spans, high, why", [
    ([(0, 100), (100, 200)], 400, "the folder ending at the mark was deleted"),
    ([(0, 100), (100, 200), (200, 250)], 400, "the entry below the mark no longer reaches it"),
    ([(0, 100), (100, 200), (200, 300)], 250, "the topic was made anew: the mark is past its log end"),
])
def test_a_mark_that_no_longer_holds_is_not_used_the_partition_is_read_whole(spans, high, why):
    assert start_from(FakeArchive(*spans), None, MARK, high) == (None, WHOLE_MARK_STALE), why


def test_an_entry_below_where_the_mark_starts_makes_it_stale():
    # A loss acknowledged below the archive's first range (loss.py only records offsets no entry holds).
    mark = Known(100, 300, 2, 200)
    archive = FakeArchive((100, 200), (200, 300))
    assert start_from(archive, None, mark, 400) == (mark, FROM_MARK)
    archive.entries.insert(0, Entry(0, 100, LOSS))
    assert start_from(archive, None, mark, 400) == (None, WHOLE_MARK_STALE)


def test_a_stale_mark_falls_back_to_the_instances_known():
    behind = Known(0, 200, 2, 200)
    assert start_from(FakeArchive((0, 100), (100, 200)), behind, MARK, 400) == (behind, FROM_INSTANCE)


@pytest.mark.parametrize("spans", [
    [(0, 100), (100, 200), (200, 300), (200, 400), (300, 400)],  # compacted [200, 400), not cleaned up yet
    [(0, 100), (100, 200), (200, 400)],                           # and cleaned up
    [(0, 400)],                                                   # everything compacted and cleaned up
])
def test_compaction_below_and_across_the_mark_keeps_it_valid_and_the_judgement_that_of_a_full_read(spans):
    archive = FakeArchive(*spans)
    given, source = start_from(archive, None, MARK, 500)
    assert (given, source) == (MARK, FROM_MARK)
    effective = [(0, 100), (100, 200), (200, 400)] if len(spans) > 1 else [(0, 400)]
    full = judge(0, 500, 400, effective)
    newer = [s for s in effective if s[1] > MARK.sound_to]  # what entries_from(300) yields
    again = judge(0, 500, 400, newer, known=given)
    assert (again.status, again.ahwm, again.gaps, again.overlaps, again.lost) == (
        full.status, full.ahwm, full.gaps, full.overlaps, full.lost) == (OK, 400, [], [], [])


def test_a_typed_topics_records_that_did_not_decode_are_counted_once_each_and_carried_in_what_is_known():
    """The counts come from the manifests of the ranges an evaluation lists; those below what is
    known are carried in `Known` (and in the archive's mark), so the next evaluation, which lists
    from there on, still shows them without reading those manifests again."""
    entries = [Entry(0, 100, RANGE), Entry(100, 200, RANGE), Entry(250, 300, RANGE)]
    counts = {(0, 100): {"value": (90, 10)}, (100, 200): {"value": (99, 1)}, (250, 300): {"value": (45, 5)}}
    first = evaluate_partition(T, 0, 0, 300, 300, entries, None, [], NOW, None, counts)
    assert (first.decoded, first.not_decoded) == ({"value": 234}, {"value": 16})
    assert first.known.decode == (("value", 189, 11),)  # below the gap at 200 only
    assert Known.from_json(first.known.to_json()) == first.known

    # The gap filled: the next evaluation lists [200, 300) only, and counts all of it.
    later = [Entry(200, 250, RANGE), Entry(250, 300, RANGE)]
    more = {(200, 250): {"value": (50, 0)}, (250, 300): {"value": (45, 5)}}
    second = evaluate_partition(T, 0, 0, 300, 300, later, None, [], NOW, first.known, more)
    assert (second.decoded, second.not_decoded) == ({"value": 284}, {"value": 16})
    assert second.known.decode == (("value", 284, 16),)
    # An untyped topic's evaluation has no counts, and its Known is written as before.
    plain = judge(0, 100, 100, [(0, 100)])
    assert plain.not_decoded == {} and len(plain.known.to_json()) == 5
    assert Known.from_json([0, 100, 1, 100, []]).decode == ()


def test_a_partition_the_lag_sensor_gave_up_on_is_at_least_a_warning_naming_the_command_that_goes_on():
    why = "t/0: range t:p00000:...-... failed 5 times and is no longer requested automatically: ... archive KEY"
    entries = [Entry(0, 100, RANGE)]
    quiet = evaluate_partition(T, 0, 0, 150, 100, entries, None, [], NOW, None, stopped=why)
    assert quiet.status == WARN and quiet.reasons == [f"the lag sensor stopped: {why}"]
    # With an error of its own, it stays an error, and the give-up is still said.
    broken = evaluate_partition(T, 0, 0, 150, 100, entries + [Entry(50, 120, RANGE)], None, [], NOW, None,
                                stopped=why)
    assert broken.status == ERROR and broken.reasons[-1] == f"the lag sensor stopped: {why}"
    assert evaluate_partition(T, 0, 0, 150, 100, entries, None, [], NOW, None).status == OK
