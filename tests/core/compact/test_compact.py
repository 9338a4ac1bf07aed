"""Compaction's pure logic: the effective-entry rule, planning, what clean-up may delete.

No servers: entries and members are built by hand. The real-stack proofs are in
tests/core/compact/test_compact_stack.py.
"""

import itertools

import pyarrow as pa
import pytest

from matos_dagster.core.archive.slice_task import _size
from matos_dagster.core.compact.merge import row_sizes
from matos_dagster.core.compact.plan import Member, holders, plan
from matos_dagster.core.offsets.spans import overlaps
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.objects import decode, encode
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.swift.archived import LOSS, RANGE, Entry, effective

R = RANGE


def E(a, b, kind=R):
    return Entry(a, b, kind)


# -- archived.effective: the containing entry is effective, contained ones are superseded ------


def test_a_compacted_range_supersedes_the_ranges_it_contains():
    listed = [E(0, 10), E(0, 30), E(10, 20), E(20, 30), E(30, 40)]  # Swift's name order
    assert list(effective(listed)) == [E(0, 30), E(30, 40)]


def test_before_the_switch_the_small_ranges_are_effective():
    assert list(effective([E(0, 10), E(10, 20), E(20, 30)])) == [E(0, 10), E(10, 20), E(20, 30)]


def test_nested_compactions_leave_only_the_outermost():
    listed = sorted([E(0, 5), E(5, 10), E(0, 10), E(10, 20), E(0, 20), E(20, 25)])
    assert list(effective(listed)) == [E(0, 20), E(20, 25)]


def test_a_container_that_starts_later_supersedes_what_it_holds():
    listed = [E(0, 10), E(10, 15), E(10, 30), E(15, 30), E(30, 40)]
    assert list(effective(listed)) == [E(0, 10), E(10, 30), E(30, 40)]


def test_an_entry_already_yielded_supersedes_what_follows_inside_it():
    # entries_from(offset) yields the entry covering the offset first, then lists from the offset.
    assert list(effective([E(12, 15), E(15, 20), E(20, 30)], reach=20)) == [E(20, 30)]


def test_crossing_entries_are_both_yielded_so_the_overlap_is_reported():
    found = list(effective([E(0, 20), E(10, 30)]))
    assert found == [E(0, 20), E(10, 30)]
    assert overlaps(e.span for e in found) == [(10, 20)]


def test_a_folder_with_a_manifest_and_a_loss_record_is_one_entry():
    assert list(effective([E(0, 10, LOSS), E(0, 10, R)])) == [E(0, 10, R)]


def test_every_switch_order_of_a_group_gives_one_entry_per_offset():
    """Any subset of {small ranges, their compacted range} present: every offset exactly once."""
    small = [E(0, 10), E(10, 20), E(20, 30)]
    for n in range(len(small) + 1):
        for present in itertools.combinations(small, n):
            listed = sorted([*present, E(0, 30)])
            found = list(effective(listed))
            assert found == [E(0, 30)], (present, found)


# -- plan: deterministic greedy groups --------------------------------------------------------


def M(a, b, rb=10, kind=R, fmt="parquet", age=1e9):
    return Member(a, b, kind, rb, fmt, age)


def spans(p):
    return [(g.start, g.end) for g in p.groups]


def test_groups_close_when_their_record_bytes_reach_compact_bytes():
    ms = [M(i * 10, i * 10 + 10) for i in range(7)]  # 10 record bytes each
    p = plan(ms, upper=70, compact_bytes=30, min_age_s=0)
    assert spans(p) == [(0, 30), (30, 60)]
    assert p.resume == 60  # the trailing range waits for more


def test_only_ranges_below_the_committed_offset_are_planned():
    ms = [M(i * 10, i * 10 + 10) for i in range(7)]
    assert spans(plan(ms, upper=45, compact_bytes=20, min_age_s=0)) == [(0, 20), (20, 40)]


def test_a_loss_a_hole_a_format_change_or_a_large_range_ends_a_group():
    ms = [M(0, 10), M(10, 20), M(20, 30, kind=LOSS), M(30, 40), M(40, 50),
          M(60, 70), M(70, 80),  # hole at 50
          M(80, 90, fmt="jsonl"), M(90, 100, fmt="jsonl"),
          M(100, 110, rb=500), M(110, 120), M(120, 130, rb=500)]
    p = plan(ms, upper=200, compact_bytes=100, min_age_s=0)
    assert spans(p) == [(0, 20), (30, 50), (60, 80), (80, 100)]
    # (110, 120) alone between two large ranges: nothing to merge; nothing trails.
    assert p.resume is None


def test_a_compacted_range_is_never_merged_again():
    ms = [M(0, 30, rb=30), M(30, 40), M(40, 50), M(50, 60)]
    assert spans(plan(ms, upper=60, compact_bytes=30, min_age_s=0)) == [(30, 60)]


def test_a_group_with_a_young_range_waits_and_so_does_everything_after_it():
    ms = [M(0, 10), M(10, 20), M(20, 30), M(30, 40, age=5), M(40, 50), M(50, 60)]
    p = plan(ms, upper=60, compact_bytes=20, min_age_s=60)
    assert spans(p) == [(0, 20)]
    assert p.resume == 20


def test_two_runs_that_see_more_or_fewer_ranges_plan_the_same_groups():
    """Determinism is what keeps concurrent runs from ever writing crossing ranges."""
    ms = [M(i * 10, i * 10 + 10, rb=7 + (i * 5) % 11) for i in range(40)]
    full = spans(plan(ms, upper=400, compact_bytes=40, min_age_s=0))
    for upper in range(0, 400, 10):
        part = spans(plan(ms, upper=upper, compact_bytes=40, min_age_s=0))
        assert part == full[: len(part)], upper
    # ...and a run that starts at a group boundary plans the rest of the same groups.
    for a, _ in full:
        rest = spans(plan([m for m in ms if m.start >= a], upper=400, compact_bytes=40, min_age_s=0))
        assert rest == [g for g in full if g[0] >= a]


def test_max_groups_leaves_the_rest_for_the_next_run():
    ms = [M(i * 10, i * 10 + 10) for i in range(6)]
    p = plan(ms, upper=60, compact_bytes=20, min_age_s=0, max_groups=1)
    assert spans(p) == [(0, 20)]
    assert p.resume == 20


# -- clean-up: only what a longer range contains ----------------------------------------------


def test_only_folders_inside_a_longer_archived_range_have_holders():
    raw = [E(0, 10), E(0, 30), E(10, 20), E(20, 30), E(30, 40), E(40, 50, LOSS)]
    assert holders((10, 20), raw) == [E(0, 30)]
    assert holders((0, 30), raw) == []
    assert holders((30, 40), raw) == []
    assert holders((12, 18), raw) == [E(0, 30), E(10, 20)]  # a half-deleted folder inside both
    assert holders((41, 42), raw) == []  # a loss record holds nothing


# -- record sizes: the merge cuts objects by the slice task's measure -------------------------


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_record_sizes_are_the_slice_tasks_measure(fmt):
    rows = [(b"k", b"value", [("h", b"1"), ("hh", None)]), (None, None, []), (b"", b"x" * 300, [("a", b"bc")])]
    batch = Batch("t", 0)
    for i, (k, v, h) in enumerate(rows):
        batch.add(i, 1, 1000 + i, k, v, h, _size(k, v, h))
    table = decode(encode(batch.table(), fmt), fmt)
    assert row_sizes(table).tolist() == [_size(k, v, h) for k, v, h in rows]
    assert int(row_sizes(table).sum()) == batch.nbytes
    assert row_sizes(pa.Table.from_batches([], SCHEMA)).tolist() == []


def test_a_quiet_topics_ranges_merge_by_the_time_they_span():
    # 10 record bytes each, one range a minute: compact_bytes is never reached.
    ms = [Member(i * 10, i * 10 + 10, R, 10, "parquet", 1e9, i * 60_000, i * 60_000 + 59_000) for i in range(10)]
    p = plan(ms, upper=100, compact_bytes=10**9, min_age_s=0, span_s=180)
    assert spans(p) == [(0, 30), (30, 60), (60, 90)]
    assert p.resume == 90  # the last minutes wait for a range past the span
    # Re-planning from a merged range gives it alone: a merged range is never merged again.
    merged = [Member(0, 30, R, 30, "parquet", 1e9, 0, 179_000)] + ms[3:]
    assert spans(plan(merged, upper=100, compact_bytes=10**9, min_age_s=0, span_s=180)) == [(30, 60), (60, 90)]
    assert spans(plan(ms, upper=100, compact_bytes=10**9, min_age_s=0, span_s=0)) == []


def test_clean_up_finds_the_effective_range_holding_a_folder():
    from matos_dagster.core.compact.plan import holder

    raw = [E(0, 10), E(0, 30), E(10, 20), E(12, 18), E(20, 30), E(30, 40), E(40, 50, LOSS), E(41, 42)]
    outer = list(effective(raw))
    starts = [e.start for e in outer]
    for f in raw:
        h = holder(f.span, outer, starts)
        assert (h is not None) == bool(holders(f.span, raw)) or f.span == (41, 42), f
        if h is not None:
            assert h in holders(f.span, raw)
    assert holder((41, 42), outer, starts) is None  # inside a loss record: never deleted
    assert holder((31, 35), outer, starts) == E(30, 40)  # an old failed attempt inside an archived range
