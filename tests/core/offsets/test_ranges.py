"""Offset ranges and the partition keys that name them."""

import pytest

from matos_dagster.core.offsets.ranges import MalformedKey, OffsetRange, cut, overlaps, parse_key
from matos_dagster.core.offsets.spans import contiguous_end, coverage


@pytest.mark.parametrize(
    "topic, partition, start, end, key",
    [
        ("orders", 3, 1000, 2000, "orders:p00003:00000000000000001000-00000000000000002000"),
        ("a.b-c_d", 0, 0, 1, "a.b-c_d:p00000:00000000000000000000-00000000000000000001"),
        ("t", 12345, 2**63 - 2, 2**63 - 1, "t:p12345:09223372036854775806-09223372036854775807"),
    ],
)
def test_a_key_names_exactly_one_range_and_parses_back(topic, partition, start, end, key):
    r = OffsetRange(topic, partition, start, end)
    assert r.key == key
    assert parse_key(key) == r


def test_keys_sort_in_offset_order_within_a_partition():
    ranges = [OffsetRange("t", 1, s, s + 7) for s in (0, 7, 93, 1000, 99999)]
    assert sorted(r.key for r in reversed(ranges)) == [r.key for r in ranges]


@pytest.mark.parametrize(
    "key",
    [
        "",
        "orders",
        "orders:p3:1000-2000",  # not zero-padded: would not sort
        "orders:p00003:00000000000000002000-00000000000000001000",  # end before start
        "orders:p00003:00000000000000001000-00000000000000001000",  # empty
        "orders:00003:00000000000000001000-00000000000000002000",
        "or/ders:p00003:00000000000000001000-00000000000000002000",
        "orders:p00003:00000000000000001000-00000000000000002000 ",
        "orders:p00003:-0000000000000001000-00000000000000002000",
        "orders:p00003:00000000000000001000-00000000000000002000\n",
    ],
)
def test_a_malformed_key_is_refused_showing_the_expected_form(key):
    with pytest.raises(MalformedKey, match="<topic>:p<partition"):
        parse_key(key)


@pytest.mark.parametrize(
    "args, message",
    [
        (("t", 0, 5, 5), "start < end"),
        (("t", 0, 6, 5), "start < end"),
        (("t", 0, -1, 5), "offsets must be >= 0"),
        (("t", -1, 0, 5), "partition must be >= 0"),
        (("bad topic", 0, 0, 5), "invalid Kafka topic name"),
        (("a...b", 0, 0, 5), "Dagster partition keys refuse"),
        (("x" * 250, 0, 0, 5), "invalid Kafka topic name"),
    ],
)
def test_a_range_that_cannot_exist_is_refused(args, message):
    with pytest.raises(ValueError, match=message):
        OffsetRange(*args)


@pytest.mark.parametrize(
    "start, end, size, expected",
    [
        (0, 10, 3, [(0, 3), (3, 6), (6, 9), (9, 10)]),
        (0, 9, 3, [(0, 3), (3, 6), (6, 9)]),
        (5, 6, 100, [(5, 6)]),
        (7, 7, 3, []),
    ],
)
def test_cut_covers_the_range_exactly_with_pieces_no_larger_than_size(start, end, size, expected):
    assert [(r.start, r.end) for r in cut("t", 0, start, end, size)] == expected


def test_cut_refuses_a_size_that_would_never_end():
    with pytest.raises(ValueError):
        list(cut("t", 0, 0, 10, 0))


@pytest.mark.parametrize(
    "ranges, start, expected",
    [
        ([], 0, 0),
        ([(0, 10), (10, 20)], 0, 20),
        ([(10, 20), (0, 10)], 0, 20),  # any order
        ([(0, 10), (20, 30)], 0, 10),  # stops at the hole
        ([(0, 10), (10, 20)], 5, 20),  # an offset moved into a range still counts
        ([(10, 20)], 0, 0),  # nothing starts at 0
        ([(0, 10)], 15, 15),  # ahead of the archive: stays
    ],
)
def test_contiguous_end_is_how_far_a_group_may_commit(ranges, start, expected):
    assert contiguous_end(ranges, start) == expected


@pytest.mark.parametrize(
    "ranges, first, end, gaps, overlaps",
    [
        ([], None, None, (), ()),
        ([(0, 10), (10, 20)], 0, 20, (), ()),
        ([(0, 10), (15, 20)], 0, 10, ((10, 15),), ()),
        ([(0, 10), (5, 20)], 0, 20, (), ((5, 10),)),
        ([(5, 10), (0, 3), (3, 5)], 0, 10, (), ()),
    ],
)
def test_coverage_finds_gaps_and_overlaps(ranges, first, end, gaps, overlaps):
    c = coverage(ranges)
    assert (c.first, c.contiguous_end, c.gaps, c.overlaps) == (first, end, gaps, overlaps)


# -- add_ranges with start -1 (issue 12.6), on the real Kafka, Swift and Spark ------------------


def test_add_ranges_from_minus_one_starts_after_the_archived_prefix_and_skips_archived_ranges(
        kafka, swift, spark, new_topic):
    import uuid

    from dagster import instance_for_test
    from helpers import check_archive, produce

    from matos_dagster.core.archive.range_run import archive_range
    from matos_dagster.core.topics import TopicConfig
    from matos_dagster.jobs.ranges import add_ranges_job

    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 50)
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", max_range_records=100)
    with swift.store() as store, instance_for_test() as instance:
        for start, end in [(0, 10), (10, 20), (30, 40)]:
            archive_range(OffsetRange(topic, 0, start, end), cfg, kafka, store, spark)
        kafka.commit(topic, {0: 10}, cfg.group)  # behind the archive, ranges past a hole beyond it
        result = add_ranges_job([cfg]).execute_in_process(
            run_config={"ops": {"add_range_keys": {"config": {"topic": topic}}}},
            instance=instance, resources={"kafka": kafka, "swift": swift})
        keys = result.output_for_node("add_range_keys")
        assert [(r.start, r.end) for r in map(parse_key, keys)] == [(20, 30), (40, 50)]
        for key in keys:  # each proposed range archives: none is refused as overlapping
            archive_range(parse_key(key), cfg, kafka, store, spark)
        assert check_archive(kafka, store, topic, cfg.group) == {0: 50}
        again = add_ranges_job([cfg]).execute_in_process(
            run_config={"ops": {"add_range_keys": {"config": {"topic": topic}}}},
            instance=instance, resources={"kafka": kafka, "swift": swift})
        assert again.output_for_node("add_range_keys") == []


@pytest.mark.parametrize(
    "spans, expected",
    [
        ([(0, 100), (100, 200)], []),  # adjacent: no offset in both
        ([(0, 100), (50, 150)], [((0, 100), (50, 150))]),
        ([(50, 150), (0, 100)], [((0, 100), (50, 150))]),  # in any order
        ([(0, 100), (10, 20), (30, 40)], [((0, 100), (10, 20)), ((0, 100), (30, 40))]),  # contained
        ([(0, 100), (0, 100)], []),  # the same range twice is one range
        ([(0, 10), (20, 30), (25, 40), (40, 50)], [((20, 30), (25, 40))]),
    ],
)
def test_ranges_of_one_partition_that_share_an_offset_are_found_in_pairs(spans, expected):
    got = overlaps([OffsetRange("t", 0, a, b) for a, b in spans])
    assert [((a.start, a.end), (b.start, b.end)) for a, b in got] == expected


def test_ranges_of_other_partitions_or_topics_never_overlap():
    assert overlaps([OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 100), OffsetRange("u", 0, 0, 100)]) == []
