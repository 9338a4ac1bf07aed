"""Expiry's rules without a server: the setting, the manifest's `expired`, the spans, the cursor, the days."""

from __future__ import annotations

import pytest

from matos_dagster.core.days import windows
from matos_dagster.core.expire import cursor as cursors
from matos_dagster.core.expire.days import expired as expired_days
from matos_dagster.core.expire.run import DAY_MS, cutoff
from matos_dagster.core.expire.span import runs, wholly_old
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.archived import EXPIRED, LOSS, RANGE, Entry, effective, entry_of
from matos_dagster.core.topics import TopicConfig, TopicsFileError, parse


def test_archive_retention_days_is_unset_by_default_and_must_be_a_positive_number_of_days():
    got = parse({"topics": [{"name": "a", "archive_retention_days": 30}, "b"]})
    assert (got.get("a").archive_retention_days, got.get("b").archive_retention_days) == (30.0, None)
    for bad, says in ((0, "must be > 0"), (-1, "must be > 0"), ("30d", "must be a number")):
        with pytest.raises(TopicsFileError, match=says) as e:
            parse({"topics": [{"name": "a", "archive_retention_days": bad}]})
        assert "\n" not in str(e.value)
    assert cutoff(TopicConfig("b"), 10**12) is None  # kept forever
    assert cutoff(TopicConfig("a", archive_retention_days=1.5), 10**12) == 10**12 - int(1.5 * DAY_MS)


def test_an_expired_spans_marker_makes_its_folder_that_span_whatever_else_the_folder_still_holds():
    folder = layout.range_dir("p", OffsetRange("t", 0, 10, 20))
    found = [entry_of(f"{folder}/{m}") for m in (layout.EXPIRED, layout.LOSS, layout.MANIFEST)]  # as Swift lists them
    assert [e.kind for e in effective(found)] == [EXPIRED]
    assert [e.kind for e in effective([Entry(0, 10, LOSS), Entry(0, 10, RANGE)])] == [RANGE]


def test_a_manifest_names_its_expired_records_as_offset_spans_inside_its_range():
    r = OffsetRange("t", 0, 0, 10)
    o = {"name": "x/part-00000000000000000005.parquet", "records": 5, "bytes": 1, "md5": "m", "first_offset": 5,
         "last_offset": 9, "min_timestamp": 1, "max_timestamp": 2}
    doc = {**manifest.build(r, "parquet", [o]), "expired": [[0, 5]]}
    assert manifest.Manifest.from_json(doc).to_json() == doc
    for bad in ([[5, 5]], [0, 5], [[0, "5"]], "0-5"):
        with pytest.raises(manifest.ManifestError, match="expired must be a list of"):
            manifest.Manifest.from_json({**doc, "expired": bad})


def test_expired_spans_never_contain_a_kept_record():
    assert runs([1, 2, 3, 7, 9], [0, 4, 8, 10]) == [(1, 4), (7, 8), (9, 10)]
    assert runs([5, 6], []) == [(5, 7)]
    assert runs([], [1]) == []


def test_a_range_is_wholly_old_only_when_its_manifest_counts_every_record_before_the_cutoff():
    doc = {"records": 3, "max_timestamp": 99, "hours": {"0": [3, 30, 0, 2, 99]}}
    assert wholly_old(doc, 100)
    assert not wholly_old(doc, 99)  # the newest record is at the cutoff: kept
    assert not wholly_old({**doc, "records": 4}, 100)  # a record without a timestamp is kept
    assert not wholly_old({"records": 3, "max_timestamp": 99}, 100)  # without hours: its objects decide


def test_the_cursor_gives_the_kept_ranges_whose_oldest_record_is_now_due():
    c = cursors.Cursor(scanned_to=50, kept={20: (30, 500), 40: (50, 100), 30: (40, None)})
    assert c.due(200) == [(40, 50)]
    assert c.expired_to == 20
    c.forget_within(20, 45)
    assert c.kept == {} and c.expired_to == 50


def test_the_days_reported_expired_are_those_ending_by_the_cutoff_since_the_previous_run():
    topic = TopicConfig("a", windows_start="2026-01-01")
    day = windows.parse("2026-01-05", windows.DAY_MS)[0]
    assert expired_days(topic, day, None) == ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]
    assert expired_days(topic, day + DAY_MS + 5, day - 10) == ["2026-01-04", "2026-01-05"]
    assert expired_days(TopicConfig("a", time_window="none"), day, None) == []
