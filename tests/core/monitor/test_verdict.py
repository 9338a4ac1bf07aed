"""What a topic's verdict takes from the last one, and what it asks Swift for: a table of situations."""

from types import SimpleNamespace

import pytest

from matos_dagster.core.monitor import report, verdict
from matos_dagster.core.monitor.report import OK, WINDOW, Known, Sample
from matos_dagster.core.monitor.verdict import CARRIED, NEVER, Offsets, Previous
from matos_dagster.core.swift.archived import RANGE, Entry
from matos_dagster.core.topics import TopicConfig

T = TopicConfig("t", time_window="none")
WHERE = "container/kafka"
NOW = 10_000.0


def previous(offsets, settled=(0,), known=None, t=NOW - 60, where=WHERE, samples=None, oldest=None) -> Previous:
    return Previous(t=t, where=where, known=known if known is not None else {0: Known(0, 100, 10, 100)},
                    samples=samples or {}, offsets=offsets, oldest=oldest or {}, settled=frozenset(settled),
                    listed=False)


def no_swift():
    raise AssertionError("Swift was asked")


def test_a_topic_never_evaluated_is_due():
    assert verdict.is_due(NEVER, {0: Offsets(0, 100, 100)}, NOW, 270) == "no verdict yet"


@pytest.mark.parametrize("now_offsets,age,why", [
    ({0: Offsets(0, 100, 100)}, 60, None),  # nothing moved, fresh
    ({0: Offsets(0, 150, 100)}, 60, None),  # records arrived, not archived yet: the lag sensor's business
    ({0: Offsets(20, 100, 100)}, 60, None),  # retention moved the log start
    ({0: Offsets(0, 150, 150)}, 60, "committed offsets moved"),  # an archive run committed
    ({0: Offsets(0, 100, 100), 1: Offsets(0, 0, None)}, 60, "partitions changed"),
    ({0: Offsets(0, 100, 100)}, 270, "due by age"),
    (None, 60, "gone from Kafka"),
])
def test_a_topic_is_due_when_its_verdict_is_old_or_its_committed_offsets_moved(now_offsets, age, why):
    p = previous({0: Offsets(0, 100, 100)}, t=NOW - age)
    assert verdict.is_due(p, now_offsets, NOW, 270) == why


def test_committed_offsets_that_moved_make_a_topic_due_once_its_verdict_is_moved_after_s_old():
    p = previous({0: Offsets(0, 100, 100)}, t=NOW - 60)
    moved = {0: Offsets(0, 150, 150)}
    assert verdict.is_due(p, moved, NOW, 270, moved_after_s=120) is None and verdict.moved(p, moved)
    assert verdict.is_due(p, moved, NOW + 60, 270, moved_after_s=120) == "committed offsets moved"


def test_a_topic_gone_from_kafka_is_not_due_again_until_its_verdict_is_old():
    gone = previous({}, t=NOW - 60)
    gone.missing = True
    assert verdict.is_due(gone, None, NOW, 270) is None
    assert verdict.is_due(gone, None, NOW + 300, 270) == "due by age"
    assert verdict.is_due(gone, {0: Offsets(0, 0, None)}, NOW, 270) == "back in Kafka"


@pytest.mark.parametrize("now,settled,where,carried", [
    (Offsets(0, 100, 100), (0,), WHERE, True),
    (Offsets(10, 100, 100), (0,), WHERE, False),  # the log start moved: perhaps a loss
    (Offsets(0, 110, 100), (0,), WHERE, False),  # the log end moved
    (Offsets(0, 100, 90), (0,), WHERE, False),  # the committed offset moved (back)
    (Offsets(0, 100, 100), (), WHERE, False),  # the last verdict found something to look at again
    (Offsets(0, 100, 100), (0,), "other/kafka", False),  # another archive
])
def test_a_partition_is_judged_without_swift_only_when_settled_and_nothing_moved(now, settled, where, carried):
    p = previous({0: Offsets(0, 100, 100)}, settled=settled, where=where)
    assert verdict.carried(p, {0: now}, WHERE) == ({0} if carried else set())


def test_a_carried_partition_asks_swift_nothing_recomputes_its_lag_age_and_grows_its_window():
    window = [Sample(NOW - 60 * i, 100, 5) for i in (3, 2, 1)]
    p = previous({0: Offsets(0, 105, 100)}, samples={0: window}, oldest={0: int((NOW - 100) * 1000)})
    v = verdict.judge(T, {0: Offsets(0, 105, 100)}, {}, p, WHERE, "kafka", no_swift, NOW)
    (r,) = v.reports
    assert v.started == {0: CARRIED} and v.listings == 0 and r.status == OK
    assert (r.ahwm, r.archived_ranges, r.lag_records, r.lag_seconds) == (100, 10, 5, 100.0)
    assert v.samples["0"] == [[s.t, s.committed, s.lag] for s in window] + [[NOW, 100, 5]]
    assert len(v.samples["0"]) == WINDOW - 1 and v.state["settled"] == [0] and v.state["listed"] is False
    again = verdict.judge(T, {0: Offsets(0, 105, 100)}, {}, Previous.parse(NOW, {"samples": v.samples,
                          "archive_state": v.state}), WHERE, "kafka", no_swift, NOW + 60)
    assert len(again.samples["0"]) == WINDOW - 1 and again.samples["0"][-1] == [NOW + 60, 100, 5]


@pytest.mark.parametrize("entries,low,committed,settled", [
    ([(0, 100)], 0, 100, True),
    ([(0, 100)], 0, None, True),  # archived, never committed: nothing more to find
    ([], 0, None, True),  # never archived
    ([], 0, 50, False),  # committed, nothing archived (another container, a moved offset): look again
    ([(0, 100)], 0, 120, False),  # committed past what is listed (a listing that lags a PUT): look again
    ([(0, 100), (150, 200)], 0, 100, False),  # archived past a hole: a gap, looked at again every time
    ([(0, 100), (50, 150)], 0, 150, False),  # an overlap
    ([(0, 100)], 150, 100, False),  # records deleted before they were archived
])
def test_a_partition_is_settled_when_sound_up_to_its_committed_offset_with_nothing_past(entries, low, committed,
                                                                                        settled):
    listed = [Entry(a, b, RANGE) for a, b in entries]
    r = report.evaluate_partition(T, 0, low, 200, committed, listed, None, [], NOW)
    assert verdict._settled(r) is settled


def test_a_verdict_of_an_earlier_version_hands_on_its_known_and_samples_and_each_partition_is_listed_once():
    meta = {"samples": {"0": [NOW - 300, 100, 0]},
            "archive_state": {"where": WHERE, "partitions": {"0": [0, 100, 10, 100, []]}}}
    p = Previous.parse(NOW - 300, meta)
    assert p.known == {0: Known(0, 100, 10, 100)} and p.samples == {0: [Sample(NOW - 300, 100, 0)]}
    assert verdict.is_due(p, {0: Offsets(0, 100, 100)}, NOW - 200, 270) == "partitions changed"
    assert verdict.carried(p, {0: Offsets(0, 100, 100)}, WHERE) == set()


def test_a_named_topic_gone_from_kafka_hands_on_what_its_last_verdict_knew():
    meta = {"samples": {"0": [[NOW - 300, 100, 0]]},
            "archive_state": {"where": WHERE, "partitions": {"0": [0, 100, 10, 100, []]},
                              "offsets": {"0": [0, 100, 100]}, "settled": [0], "listed": False}}
    gone = verdict.missing(T, Previous.parse(NOW - 300, meta))
    assert gone.status == "WARN" and gone.missing and gone.samples == meta["samples"]
    back = Previous.parse(NOW, {"samples": gone.samples, "archive_state": gone.state})
    assert back.missing and back.known == {0: Known(0, 100, 10, 100)} and back.settled == {0}


class TenOffsetRanges:
    """A partition's archive as PartitionArchive answers it: ranges of 10 offsets up to `end`."""
    end = 100

    def __init__(self, *_):
        pass

    def entries_from(self, offset):
        return [Entry(o, o + 10, RANGE) for o in range(offset, TenOffsetRanges.end, 10)]

    def all(self):
        return self.entries_from(0)


def test_a_busy_partitions_mark_is_written_every_mark_every_s_and_at_once_when_it_comes_to_rest(monkeypatch):
    """The mark spares a fresh instance part of a listing: a partition archived at every verdict has it
    rewritten every MARK_EVERY_S, not at each verdict; one come to rest has it brought up to date."""
    written = []
    monkeypatch.setattr(verdict, "PartitionArchive", TenOffsetRanges)
    monkeypatch.setattr(verdict.marks, "write_mark", lambda store, prefix, topic, p, known: written.append(
        known.sound_to))
    store = SimpleNamespace(listings=0)
    p = previous({0: Offsets(0, 100, 100)})

    def verdict_at(t: float, end: int) -> list[int]:
        nonlocal p
        TenOffsetRanges.end, before = end, len(written)
        v = verdict.judge(T, {0: Offsets(0, end, end)}, {}, p, WHERE, "kafka", lambda: store, t)
        p = Previous.parse(t, {"samples": v.samples, "archive_state": v.state})
        return written[before:]

    assert verdict_at(NOW, 110) == [110]  # no mark written by this instance yet
    assert verdict_at(NOW + 120, 120) == [] and verdict_at(NOW + 240, 130) == []  # busy: the mark 4 min old
    assert verdict_at(NOW + 360, 130) == [130]  # at rest: up to date at once
    assert verdict_at(NOW + 480, 140) == [] and verdict_at(NOW + 360 + verdict.MARK_EVERY_S, 150) == [150]
    assert verdict_at(NOW + 1200, 150) == []  # at rest, and the mark up to date
