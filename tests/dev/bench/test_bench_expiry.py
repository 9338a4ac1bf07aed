"""The expiry bench's simulated days (pure: no Swift): a day's range expires on the run 30 days later."""

from __future__ import annotations

from matos_dagster.core.expire.run import DAY_MS, cutoff
from matos_dagster.core.topics import TopicConfig
from matos_dev.bench.expiry import FIRST_EXPIRING, RETENTION_DAYS, T0, stamps_of, markdown


def test_each_days_range_is_stamped_in_its_day_and_first_wholly_old_on_the_run_30_days_later():
    cfg = TopicConfig("t", archive_retention_days=RETENTION_DAYS)
    stamps = stamps_of(100)
    for day in (1, 2, 335):
        ts = stamps((day - 1) * 100, 100)
        assert T0 + (day - 1) * DAY_MS <= ts.min() and ts.max() < T0 + day * DAY_MS
        run = day + RETENTION_DAYS  # the run at the end of that day
        assert ts.max() < cutoff(cfg, T0 + run * DAY_MS)
        assert ts.min() >= cutoff(cfg, T0 + (run - 1) * DAY_MS)
    assert FIRST_EXPIRING == 1 + RETENTION_DAYS


def test_the_report_says_not_met_when_day_365_reads_more_than_twice_day_31s_manifests():
    run = {"first_run": False, "archived_ranges": 1, "objects_read": 0, "objects_deleted": 1, "ranges_expired": 1,
           "swift_requests": 1, "s": 1.0}
    res = {"partitions": 1, "records_a_range": 1, "retention_days": 30, "days": 365,
           "month": [{**run, "day": 31, "manifests_read": 2}], "year": [{**run, "day": 365, "manifests_read": 5}],
           "manifests_ratio": 2.5, "time_ratio": 1.0}
    md = markdown(res)
    assert "**day 31**" in md and "**day 365**" in md
    assert "2.50 times day 31's (target at most 2: **not met**)" in md
    assert "1.00 times day 31's (target at most 2: met)" in md
