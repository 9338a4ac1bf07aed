"""Pure logic of the growth benchmark (bench/history.py, bench/history_rows.py): no servers."""

import hashlib

from matos_dev.bench import history, history_rows

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.store import canonical_json


def test_a_listing_row_is_the_row_a_real_put_of_the_manifest_leaves():
    r = OffsetRange("t", 0, 41, 42)
    body = canonical_json(manifest.build(r, "parquet", []))  # what Store.put_json sends

    row = history_rows.manifest_row("kafka/p", r, "parquet", 1764000000.5)

    assert row["name"] == layout.manifest_name("kafka/p", r)
    assert row["size"] == len(body)
    assert row["etag"] == hashlib.md5(body).hexdigest()
    assert row["content_type"] == "application/json"
    assert (row["deleted"], row["storage_policy_index"]) == (0, 0)
    assert row["created_at"] == "1764000000.50000"  # Swift's Timestamp.internal: 16 chars, 5 decimals


def test_history_rows_are_one_range_of_one_offset_each_in_offset_order():
    rows = list(history_rows.history_rows("kafka", "t", 3, range(0, 5), "parquet", 1.0))

    spans = [layout.parse_range_dir(row["name"].rpartition("/")[0]) for row in rows]
    assert spans == [(i, i + 1) for i in range(5)]
    assert all(row["name"].startswith(layout.partition_dir("kafka", "t", 3) + "/") for row in rows)
    assert [row["name"] for row in rows] == sorted(row["name"] for row in rows)  # Swift lists them in this order
    assert rows[0]["created_at"] == "0000000001.00000"


def test_a_read_of_a_listing_only_range_is_caught_and_fails_the_benchmark():
    deep = history.DeepReads()
    pdir = layout.partition_dir("kafka", "t", 0)
    deep.watch("c", pdir, below=100)

    deep._see("c", layout.manifest_name("kafka", OffsetRange("t", 0, 100, 101)))  # a real (recent) range
    deep._see("c", layout.manifest_name("kafka", OffsetRange("t", 1, 5, 6)))  # another partition
    deep._see("other", layout.manifest_name("kafka", OffsetRange("t", 0, 5, 6)))  # another container
    deep.check("nothing old")  # does not raise

    deep._see("c", layout.manifest_name("kafka", OffsetRange("t", 0, 99, 100)))
    try:
        deep.check("the reader")
    except RuntimeError as e:
        assert "the reader read 1 object(s) of the listing-only history" in str(e)
    else:
        raise AssertionError("a read of an old range went unnoticed")


def test_ratios_are_per_round_to_n_zero_with_median_and_spread():
    base = [{"archive_run_s": 2.0, "monitor_first_s": 1.0, "monitor_s": 1.0},
            {"archive_run_s": 4.0, "monitor_s": 1.0},
            {"archive_run_s": 2.0, "monitor_s": 2.0}]
    big = [{"archive_run_s": 2.2, "monitor_first_s": 3.0, "monitor_s": 1.0},
           {"archive_run_s": 4.0, "monitor_s": 1.5},
           {"archive_run_s": 3.0, "monitor_s": 2.0}]

    out = history.summarise([{"n": 0, "rounds": base}, {"n": 10, "rounds": big}])

    ratio = out["ratios"]["10"]["archive_run_s"]
    assert [round(v, 2) for v in ratio["values"]] == [1.1, 1.0, 1.5]  # each round against its own N = 0
    assert (round(ratio["median"], 2), round(ratio["min"], 2), round(ratio["max"], 2)) == (1.1, 1.0, 1.5)
    assert out["ratios"]["10"]["monitor_first_s"]["values"] == [3.0]  # round 1 only
    assert out["summary"]["10"]["monitor_s"]["median"] == 1.5
    assert "sensor_tick_s" not in out["ratios"]["10"]  # not measured: no ratio invented


def test_the_ratio_of_minima_is_what_the_code_costs_apart_from_the_machines_load():
    base = [{"sensor_tick_s": 0.10}, {"sensor_tick_s": 0.30}, {"sensor_tick_s": 0.12}]
    big = [{"sensor_tick_s": 0.25}, {"sensor_tick_s": 0.11}, {"sensor_tick_s": 0.13}]  # one loaded round
    out = history.summarise([{"n": 0, "rounds": base}, {"n": 10, "rounds": big}])
    assert round(out["min_ratios"]["10"]["sensor_tick_s"], 2) == 1.1
    md = history.markdown({**out, "by_n": [{"n": 0, "rounds": base}, {"n": 10, "rounds": big}], "repeats": 3,
                           "keep_real": 2000, "loadavg_start": (0.3, 0.6, 1.2), "loadavg_end": (1.2, 0.9, 1.3)})
    assert "| ratio of minima 10 / 0 |" in md and "1.10×" in md
