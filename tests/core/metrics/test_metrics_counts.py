"""The exporter's pure counts: the compaction backlog from a verdict's state and the compact runs, and the
records erased or expired from the archive's records. Pure logic, no server."""

from __future__ import annotations

from matos_dagster.core.metrics.archive_records import counted
from matos_dagster.core.metrics.compaction import backlog
from matos_dagster.core.monitor.report import Known

# A verdict's archive_state: partition 0 archived [100, 500) and committed 500, partition 1 archived
# [0, 40) and committed 40, partition 2 committed nothing, partition 3 committed 70 with nothing known.
STATE = {
    "offsets": {"0": [100, 900, 500], "1": [0, 50, 40], "2": [0, 5, None], "3": [0, 80, 70]},
    "partitions": {"0": Known(100, 500).to_json(), "1": Known(0, 40).to_json()},
}


def test_the_backlog_counts_each_partition_from_where_its_latest_compact_run_left_it_unmerged():
    assert backlog(STATE, {0: 450, 1: 40}) == (500 - 450) + 0


def test_a_partition_no_compact_run_walked_counts_from_its_first_archived_offset():
    assert backlog(STATE, {}) == (500 - 100) + (40 - 0)
    assert backlog(STATE, {1: 10}) == (500 - 100) + (40 - 10)


def test_a_compact_run_of_an_earlier_log_past_the_committed_offset_counts_nothing_rather_than_less():
    assert backlog(STATE, {0: 900, 1: 40}) == 0


def test_a_topic_missing_from_kafka_has_no_backlog_rather_than_0():
    assert backlog({**STATE, "missing": True}, {}) is None
    assert backlog({}, {}) is None


def test_records_are_summed_per_partition_over_every_record_and_every_log_of_the_topic():
    records = [
        {"topics": {"orders": {"0": {"records_erased": 2}, "1": {"records_erased": 0}}}},
        {"topics": {"orders": {"0": {"records_erased": 1}}, "orders/incarnation=2": {"0": {"records_erased": 4}},
                    "other": {"3": {"records_erased": 5}}}},
        {},  # a record of another kind of work: nothing of this
    ]
    assert counted(records, "records_erased") == {("orders", 0): 7, ("orders", 1): 0, ("other", 3): 5}
    # An expiry run's record: per topic, its settings beside its partitions.
    expiry = {"records_expired": 9, "topics": {"orders": {"retention_days": 30, "stamped_before": 1,
                                                          "partitions": {"2": {"records_expired": 9}}}}}
    assert counted([expiry], "records_expired") == {("orders", 2): 9}
