"""What goes into a topic's Iceberg table (iceberg_plan.py): pure rules, no servers."""

from __future__ import annotations

import pytest

from matos_dagster.core.iceberg.plan import TableError, catch_up, covering, summary, watermarks
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import manifest
from matos_dagster.core.swift.archived import LOSS, RANGE, Entry
from matos_dagster.core.swift.manifest import Manifest


def doc(start: int, end: int, fmt: str = "parquet", objects: int = 1) -> Manifest:
    r = OffsetRange("orders", 0, start, end)
    step = (end - start) // objects
    objs = [dict(name=f"o/{a}", records=step, bytes=1, md5="x", first_offset=a, last_offset=a + step - 1,
                 min_timestamp=None, max_timestamp=None) for a in range(start, end, step)]
    return Manifest.from_json(manifest.build(r, fmt, objs))


def ranges(*spans):
    return [(Entry(a, b, RANGE), doc(a, b)) for a, b in spans]


def test_catch_up_adds_every_archived_range_from_the_watermark_up_to_the_first_hole():
    step = catch_up(0, 10, ranges((10, 20), (20, 30), (40, 50)))
    assert step.ranges == [(10, 20), (20, 30)]
    assert step.adds == ("o/10", "o/20")
    assert step.end == 30 and step.records == 20 and step.replace is None


def test_catch_up_from_an_up_to_date_watermark_adds_nothing():
    step = catch_up(0, 30, [])
    assert step.empty and step.end == 30


def test_an_acknowledged_loss_adds_nothing_and_the_watermark_passes_over_it():
    entries = ranges((0, 10)) + [(Entry(10, 15, LOSS), None)] + ranges((15, 20))
    step = catch_up(0, 0, entries)
    assert step.adds == ("o/0", "o/15") and step.end == 20


def test_a_range_whose_manifest_vanished_meanwhile_stops_the_step_before_it():
    step = catch_up(0, 0, ranges((0, 10)) + [(Entry(10, 20, RANGE), None)])
    assert step.end == 10 and step.adds == ("o/0",)


def test_a_compacted_range_reaching_below_the_watermark_replaces_the_tables_files_there():
    step = catch_up(0, 25, ranges((0, 40), (40, 50)))
    assert step.replace == (0, 25)
    assert step.adds == ("o/0", "o/40") and step.end == 50


def test_json_lines_archives_are_not_tables_and_the_error_says_what_to_change():
    with pytest.raises(TableError, match="only Parquet archives .* MATOS_ICEBERG_TABLES"):
        catch_up(0, 0, [(Entry(0, 10, RANGE), doc(0, 10, fmt="jsonl"))])


def test_watermarks_round_trip_through_a_snapshot_summary_and_ignore_other_keys():
    props = summary({3: 700, 0: 10})
    assert props == {"matos.end.0": "10", "matos.end.3": "700"}
    assert watermarks({**props, "total-records": "5", "matos.end.x": "1"}) == {0: 10, 3: 700}
    assert watermarks(None) == {}


def test_covering_drops_the_files_inside_the_span_and_refuses_one_across_its_edge():
    files = [("a", 0, 9), ("b", 10, 19), ("c", 20, 29)]
    assert covering(files, 0, 20) == ["a", "b"]
    with pytest.raises(TableError, match="rebuild it"):
        covering(files, 5, 20)
