"""Which pending ranges a run archives before its own, and what it does when one is refused (offset_order.py).

Pure logic, no stack: the real-stack case (a run of range 3 archives 1, 2, 3 in that order) is
tests/end_to_end/test_backfill.py's (test_a_run_archives_the_pending_ranges_below_its_own_first_in_offset_order).
"""

from __future__ import annotations

import pytest

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.offset_order import LowerRangeFailed, archive_first, ranges_first, registered_below


def r(start: int, end: int, partition: int = 0, topic: str = "t") -> OffsetRange:
    return OffsetRange(topic, partition, start, end)


K = r(30, 40)


@pytest.mark.parametrize("registered, base, archived, expected", [
    # Ranges 1 and 2 registered and pending, committed at 10 ([0, 10) archived): both, in order.
    ([r(0, 10), r(10, 20), r(20, 30)], 10, [], [r(10, 20), r(20, 30)]),
    # In whatever order the keys come.
    ([r(20, 30), r(10, 20), r(0, 10)], 0, [], [r(0, 10), r(10, 20), r(20, 30)]),
    # Nothing below: the committed offset is at the range's start (the sensor's runs, in order).
    ([r(0, 10), r(10, 20), r(20, 30)], 30, [], []),
    # Committed past the start (an administrator moved it): nothing.
    ([r(20, 30)], 35, [], []),
    # A range archived out of order already (not committed yet) is walked over, not archived again.
    ([r(10, 20), r(20, 30)], 10, [(20, 30)], [r(10, 20)]),
    # Archived but not committed from the committed offset on (a run died before its commit).
    ([r(10, 20), r(20, 30)], 10, [(10, 20)], [r(20, 30)]),
    # An acknowledged loss is an entry too: the walk goes over it.
    ([r(0, 10), r(20, 30)], 0, [(10, 20)], [r(0, 10), r(20, 30)]),
    # A hole no registered range fills: stop there (not the run's to guess what belongs there).
    ([r(0, 10), r(20, 30)], 0, [], [r(0, 10)]),
    # Two keys starting at one offset: only one can be archived; their runs decide, not this one.
    ([r(0, 10), r(0, 5), r(10, 30)], 0, [], []),
    # A key that would overlap an archived range (refused by its own run): stop before it.
    ([r(0, 15), r(15, 30)], 0, [(10, 12)], []),
    # A key reaching into the target: not below it.
    ([r(0, 10), r(10, 35)], 0, [], [r(0, 10)]),
    # Other partitions and topics do not count.
    ([r(0, 30, partition=1), r(0, 30, topic="u")], 0, [], []),
    # The target itself (registered, as it always is) is not archived first.
    ([r(0, 30), K], 30, [], []),
])
def test_a_run_archives_first_the_registered_pending_ranges_contiguous_from_the_committed_offset(
        registered, base, archived, expected):
    assert ranges_first(K, registered, base, archived) == expected


def test_only_the_keys_of_the_targets_topic_partition_below_it_are_read():
    keys = [r(0, 10).key, r(10, 30).key, K.key, r(40, 50).key, r(0, 10, partition=1).key,
            r(0, 10, topic="tt").key, "t:p00000:not-a-key"]
    assert registered_below(keys, K) == [r(0, 10), r(10, 30)]


class Refused(ValueError):
    pass


def test_a_refused_lower_range_stops_the_walk_and_the_run_goes_on_with_its_own():
    done, said, warned = [], [], []

    def archive(x):
        if x == r(10, 20):
            raise Refused("overlaps the archived range [12, 14)")
        done.append(x)
        return x

    first = archive_first(K, [r(0, 10), r(10, 20), r(20, 30)], archive, (Refused,), said.append, warned.append)
    assert done == [r(0, 10)]  # not [20, 30): it would come before [10, 20) in the archive
    assert first.archived == [r(0, 10)] and first.stopped_at == r(10, 20)
    assert first.reason == "overlaps the archived range [12, 14)"
    assert warned == [f"{r(10, 20)} could not be archived before {K} (overlaps the archived range [12, 14)); its "
                      f"own run will say so. Archiving {K} now: the committed offset stays below 10 until "
                      f"{r(10, 20)} is archived"]
    assert said == [f"{r(0, 10)}: registered, not archived yet, and before {K} in offset order: archiving it first",
                    f"{r(10, 20)}: registered, not archived yet, and before {K} in offset order: archiving it first"]


def test_any_other_failure_of_a_lower_range_fails_the_run_naming_that_range():
    def archive(x):
        raise ConnectionError("Swift unreachable")

    with pytest.raises(LowerRangeFailed) as e:
        archive_first(K, [r(0, 10)], archive, (Refused,), lambda m: None)
    assert str(e.value) == f"archiving {r(0, 10)}, which comes before {K} in offset order, failed: Swift unreachable"
    assert isinstance(e.value.__cause__, ConnectionError)
