"""Whether a target topic keeps the records as archived, judged from settings and manifests only."""

from __future__ import annotations

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import Window
from matos_dagster.core.restore.plan import Unit
from matos_dagster.core.restore.target import NO_LIMIT, RECORD_FRAMING, Demands, demands, target_problems

NOW = 1_800_000_000_000
DAY = 86_400_000
KAFKA4_DEFAULTS = {  # a Kafka 4 broker's defaults for a new topic
    "message.timestamp.type": "CreateTime",
    "message.timestamp.before.max.ms": str(NO_LIMIT),
    "message.timestamp.after.max.ms": "3600000",
    "max.message.bytes": "1048588",
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
}


def test_records_within_every_limit_are_taken():
    needs = Demands(min_timestamp=NOW - DAY, max_timestamp=NOW, largest_record_bytes=1000)
    assert target_problems("t", KAFKA4_DEFAULTS, needs, NOW) == []


def test_each_limit_a_record_would_break_is_named_with_a_value_that_would_do():
    needs = Demands(min_timestamp=1, max_timestamp=7258118400000, largest_record_bytes=4 * 1024**2)  # 1970, 2200
    problems = target_problems("t", KAFKA4_DEFAULTS, needs, NOW)
    assert len(problems) == 3, problems
    after, size, retention = problems
    assert after.startswith("message.timestamp.after.max.ms is 3600000") and "2200-01-01T00:00:00.000" in after
    assert f"more than {7258118400000 - NOW}" in after
    assert size.startswith("max.message.bytes is 1048588") and f"at least {4 * 1024**2 + RECORD_FRAMING}" in size
    assert retention.startswith("retention.ms is 604800000") and "1970-01-01T00:00:00.001" in retention


def test_the_before_window_and_the_old_difference_setting_are_checked():
    needs = Demands(min_timestamp=NOW - 10 * DAY, max_timestamp=NOW)
    config = {**KAFKA4_DEFAULTS, "message.timestamp.before.max.ms": str(DAY), "retention.ms": "-1",
              "message.timestamp.difference.max.ms": str(2 * DAY)}
    problems = target_problems("t", config, needs, NOW)
    assert [p.split(" is ")[0] for p in problems] == ["message.timestamp.before.max.ms",
                                                      "message.timestamp.difference.max.ms"]


def test_log_append_time_targets_take_any_timestamp_and_compacted_ones_keep_old_records():
    needs = Demands(min_timestamp=1, max_timestamp=NO_LIMIT)
    assert target_problems("t", {**KAFKA4_DEFAULTS, "message.timestamp.type": "LogAppendTime", "retention.ms": "-1"},
                           needs, NOW) == []
    assert target_problems("t", {**KAFKA4_DEFAULTS, "cleanup.policy": "compact",
                                 "message.timestamp.after.max.ms": str(NO_LIMIT)}, needs, NOW) == []


def test_records_without_timestamps_or_sizes_ask_nothing_of_those_limits():
    assert target_problems("t", {**KAFKA4_DEFAULTS, "max.message.bytes": "10"}, Demands(), NOW) == []


def unit(objects, since=None, until=None) -> Unit:
    return Unit(source=OffsetRange("t", 0, 0, 100), lo=0, hi=100, window=Window(0, None, None, since, until),
                format="parquet", objects=tuple(objects), target="t2", keep_partition=True, group="g",
                transactional_id="x", kafka_conf={}, swift=None, dry_run=False, timeout_s=1)


def obj(lo, hi, largest=None):
    o = {"min_timestamp": lo, "max_timestamp": hi}
    if largest is not None:
        o["largest_record_bytes"] = largest
    return o


def test_demands_come_from_the_selected_objects_clipped_to_the_time_window():
    needs = demands([unit([obj(100, 200, 5), obj(None, None, 7)]), unit([obj(50, 900, 3)], since=80, until=300)])
    assert needs == Demands(min_timestamp=80, max_timestamp=299, largest_record_bytes=7, unsized_objects=0)
    older = demands([unit([obj(100, 200), obj(100, 200, 9)])])  # a manifest written before the field
    assert older.largest_record_bytes == 9 and older.unsized_objects == 1
