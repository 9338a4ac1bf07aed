"""Span arithmetic, as tables: the one judgement of coverage that archive, monitor, verifier,
reader and restore share."""

import pytest

from matos_dagster.core.offsets import spans


@pytest.mark.parametrize("given, union", [
    ([], []),
    ([(0, 10)], [(0, 10)]),
    ([(10, 20), (0, 10)], [(0, 20)]),            # adjacent spans join
    ([(0, 10), (5, 8)], [(0, 10)]),              # a span inside another
    ([(0, 5), (7, 9), (8, 12)], [(0, 5), (7, 12)]),
    ([(3, 3)], []),                              # empty spans vanish
])
def test_merge_is_the_sorted_union(given, union):
    assert spans.merge(given) == union


@pytest.mark.parametrize("given, lo, hi, holes", [
    ([], 0, 10, [(0, 10)]),
    ([(0, 10)], 0, 10, []),
    ([(0, 4), (6, 10)], 0, 10, [(4, 6)]),
    ([(2, 4)], 0, 10, [(0, 2), (4, 10)]),
    ([(0, 100)], 20, 30, []),
    ([(0, 5), (3, 8)], 0, 10, [(8, 10)]),        # overlapping spans still cover
    ([(50, 60)], 0, 10, [(0, 10)]),              # spans beyond the window do not count
    ([], 5, 5, []),
])
def test_uncovered_names_every_hole_of_the_window(given, lo, hi, holes):
    assert spans.uncovered(given, lo, hi) == holes
    assert spans.covers(given, lo, hi) == (holes == [])


@pytest.mark.parametrize("given, start, end", [
    ([], 7, 7),                                  # nothing archived: stay
    ([(0, 10), (10, 20)], 0, 20),
    ([(0, 10), (11, 20)], 0, 10),                # a hole stops the run
    ([(0, 10), (10, 20)], 5, 20),                # an offset moved into a range
    ([(10, 20), (0, 10)], 0, 20),                # any order
    ([(0, 10)], 30, 30),                         # ranges behind the start do not pull it back
])
def test_contiguous_end_stops_at_the_first_hole(given, start, end):
    assert spans.contiguous_end(given, start) == end


def test_coverage_reports_first_extent_gaps_and_overlaps():
    cov = spans.coverage([(0, 10), (10, 20), (15, 25), (30, 40)])
    assert cov.first == 0
    assert cov.contiguous_end == 25
    assert cov.gaps == ((25, 30),)
    assert cov.overlaps == ((15, 20),)
    assert spans.coverage([]) == spans.Coverage(None, None, (), ())


@pytest.mark.parametrize("span, lo, hi, clipped", [
    ((0, 10), None, None, (0, 10)),
    ((0, 10), 5, None, (5, 10)),
    ((0, 10), None, 5, (0, 5)),
    ((0, 10), 10, 20, None),
])
def test_clip_narrows_a_span_to_a_window(span, lo, hi, clipped):
    assert spans.clip(span, lo, hi) == clipped
