"""The bench's report (bench/report.py) and chart (bench/chart.py) from a small results dict:
no servers, only the arithmetic and matplotlib."""

import io

import matplotlib.image
import pytest
from matos_dev.bench.chart import throughput_png
from matos_dev.bench.report import main, markdown, summarize

MIB = 1024**2
N = 1000  # records per run


def spark(seconds: float, cpu: float, task_bytes: int) -> dict:
    return {"records": N, "record_bytes": N * 1040, "seconds": seconds, "seconds_with_startup": seconds + 10,
            "cpu": {"client": cpu, "kafka": 0.0, "swift": 0.0,
                    "client_kinds": {"driver_python": 0.0, "jvm": 0.0, "python_workers": cpu}},
            "task_memory": [{"above_start": task_bytes // 2}, {"above_start": task_bytes}], "reader": "x"}


def results(python_reader: bool = True) -> dict:
    # Reading costs 0.5 CPU-s per 1,000 records and writing 0.5: on 2 cores the bound of
    # archiving is 2 / (1.0 / 1000) = 2,000 records/s.
    runs = {
        "read": [{"seconds": 0.4, "records": N, "cpu": {"client": 0.4, "kafka": 0.1, "swift": 0.0}}],
        "write": [{"seconds": 0.5, "bytes": 1, "objects": 1, "cpu": {"client": 0.1, "kafka": 0.0, "swift": 0.4}}],
        # native: 1,429 records/s (0.71x the bound), 1.5x the CPU of read + write, a task 2x object_bytes
        "archive": [spark(0.7, 1.5, 2 * 64 * MIB)],
        # Python: 500 records/s (0.25x), 2.0x the CPU, a task 4x object_bytes
        "archive_python": [spark(2.0, 2.0, 4 * 64 * MIB)] if python_reader else [],
        "spark_kafka": [spark(5.0, 5.0, 0)],
    }
    return {"setting": "quick", "repeat": 1, "master": "local[2]", "machine_cores": 2, "object_bytes": 64 * MIB,
            "load_average": [0.5, 0.4, 0.3], "load_average_finished": [1.5, 1.0, 0.5], "notes": [],
            "workloads": {name: {"records": N, "value_bytes": 1024, "runs": runs} for name in ("W1", "W2")}}


def test_issue_17s_targets_are_judged_for_each_reader_from_the_runs_numbers():
    r = summarize(results())

    assert r["workloads"]["W1"]["cpu"]["bound_records_per_s"]["median"] == pytest.approx(2000)
    rows = {t["target"]: (t["figure"], t["met"]) for t in r["targets"]}
    bound = "(2,000 records/s on 2 cores)"
    assert rows[f"W1: archive (native reader) ≥ 0.6 × the CPU bound of read + write {bound}"] == ("0.71×", True)
    assert rows[f"W1: archive (Python reader) ≥ 0.6 × the CPU bound of read + write {bound}"] == ("0.25×", False)
    assert rows["W1: archive (native reader) CPU per record ≤ 1.6 × read + write"] == ("1.50×", True)
    assert rows["W1: archive (Python reader) CPU per record ≤ 1.6 × read + write"] == ("2.00×", False)
    assert rows["W1: archive (native reader) peak memory per task ≤ 3 × object_bytes"] == ("2.00×", True)
    assert rows["W1: archive (Python reader) peak memory per task ≤ 3 × object_bytes"] == ("4.00×", False)


def test_the_tables_show_both_readers_side_by_side_and_an_older_run_without_one():
    md = markdown(summarize(results()))

    assert "| W1 | native (x) | 1,429 | 0.71 | 1,500 | 1.50 | 1,500 | 128.0 | 2.00 |" in md
    assert "| W1 | Python (x) | 500.0 | 0.25 | 2,000 | 2.00 | 2,000 | 256.0 | 4.00 |" in md
    assert "| archive, Python reader | 500.0 |" in md

    older = markdown(summarize(results(python_reader=False)))
    assert "Python reader" not in older and "| W1 | native" not in older
    assert "W1: archive (native reader) ≥ 0.6" in older


def test_the_chart_is_a_png_that_matplotlib_reads_back_at_the_figure_size(tmp_path):
    png = throughput_png(summarize(results()), dpi=50)

    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    height, width = matplotlib.image.imread(io.BytesIO(png)).shape[:2]
    assert (width, height) == (11 * 50, round((0.8 + 4.2 * 2) * 50))  # two workloads, one axes each


def test_the_report_command_redraws_tables_and_chart_from_a_results_file(tmp_path):
    import json

    (tmp_path / "results.json").write_text(json.dumps(results()))

    assert main([str(tmp_path / "results.json"), "--markdown", str(tmp_path / "r.md"),
                 "--chart", str(tmp_path / "r.png")]) == 0
    assert "| W1 | Python (x) | 500.0 |" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "r.png").read_bytes().startswith(b"\x89PNG")


def test_the_memory_table_shows_the_trees_pss_where_the_run_sampled_it():
    def mib(v):
        return {"median": v, "min": v, "max": v, "n": 1}

    r = results()
    r["memory"] = {n: {"records": N, **{f"{k}_mib": mib(100.0) for k in ("total", "driver_python", "jvm",
                                                                          "python_workers")}}
                   for n in ("W1", "4×W1")}
    r["memory"]["ratio"] = mib(1.0)
    assert "tree's PSS" not in markdown(summarize(r))  # a run before PSS was sampled

    r["memory"]["W1"]["pss_total_mib"] = mib(60.0)
    r["memory"]["4×W1"]["pss_total_mib"] = mib(61.0)
    md = markdown(summarize(r))
    assert "| W1 (1,000 records) | 100.0 | 100.0 | 100.0 | 100.0 | 60.0 |" in md
    assert "| 4×W1 (1,000 records) | 100.0 | 100.0 | 100.0 | 100.0 | 61.0 |" in md
