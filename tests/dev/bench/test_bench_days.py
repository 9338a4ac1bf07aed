"""Pure logic of the event-time days benchmark (bench/days.py): no servers."""

from matos_dev.bench import days

from matos_dagster.core.days import buckets
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift.manifest import Manifest


def test_a_days_range_manifest_has_the_hours_of_its_records_as_the_archive_writes_them():
    t0 = 1_735_689_600_000
    hours, first, last = days.day_hours(2, t0)
    r = OffsetRange("t", 7, 2 * days.PER_DAY, 3 * days.PER_DAY)

    doc = days.range_manifest("kafka", r, "parquet", hours, first, last)

    assert Manifest.from_json(doc).to_json() == doc  # a valid manifest
    b = buckets.from_json(doc["hours"])
    assert sorted(b) == [t0 + 2 * days.DAY + h * 3_600_000 for h in range(24)]
    assert sum(v[0] for v in b.values()) == doc["records"] == days.PER_DAY
    assert min(v[2] for v in b.values()) == r.start and max(v[3] for v in b.values()) == r.end - 1
    assert max(v[4] for v in b.values()) == last < t0 + 3 * days.DAY


def _round(ev: float, sensor: float, state: int) -> dict:
    return {"loadavg": 1.5, "evaluation_s": ev, "sensor_s": sensor, "evaluation_listings": 300, "evaluation_gets": 102,
            "evaluation_puts": 3, "sensor_listings": 300, "sensor_gets": 102, "sensor_puts": 3, "state_bytes": state}


def test_the_report_gives_ratios_per_round_and_says_whether_the_counts_are_equal():
    base = [_round(1.0, 2.0, 1000), _round(2.0, 2.0, 1000), _round(1.0, 2.0, 1000)]
    year = [_round(1.1, 2.0, 1300), _round(2.0, 1.0, 1300), _round(0.9, 2.0, 1300)]
    results = {"repeats": 3, "max_reads": 1000, "max_writes": 200, "setup": [
        {"days": 1, "partitions": 100, "manifests": 100, "first_s": 0.5, "first_gets": 101, "first_puts": 2,
         "first_listings": 300, "first_evaluations": 2, "first_longest_s": 0.4},
        {"days": 365, "partitions": 100, "manifests": 36_500, "first_s": 90.0, "first_gets": 36_865, "first_puts": 800,
         "first_listings": 400, "first_evaluations": 38, "first_longest_s": 12.5}]}
    results.update(days.summarise(base, year), rounds=[base, year])

    assert results["ratios"]["evaluation_s"]["values"] == [1.1, 1.0, 0.9]
    assert results["ratios"]["evaluation_s"]["median"] == 1.0
    assert results["min_ratios"]["evaluation_s"] == 0.9
    md = days.markdown(results)
    assert "| evaluation after a new day (s) | 1.000 (1.000-2.000) | 1.100 (0.900-2.000) | 1.00× (0.90-1.10)" in md
    assert "| evaluation: object GETs | 102 | 102 | equal |" in md
    assert "| evaluation: object PUTs | 3 | 3 | equal |" in md
    assert "| their object GETs / PUTs / listing requests | 101 / 2 / 300 | 36,865 / 800 / 400 | |" in md
    assert "| state object (bytes) | 1,000 | 1,300 | +300 (1.300×) |" in md
    assert "a year (365 days)" in md and "36,500 ranges" in md
    assert "| the history read once: evaluations (sensor ticks) | 2 | 38 | |" in md
    assert "the longest took 12.5 s, within Dagster's default sensor timeout" in md
    assert "writes about 200 windows at most (`MAX_WRITES`)" in md
