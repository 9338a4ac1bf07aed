"""`make bench-estate --peer`: the Iceberg Kafka Connect sink on the estate, after the archive.

- The sink is configured for an estate as its docs configure a table per topic: `topics.regex`,
  static routing on the record's topic, one table per topic.
- Both systems' figures come from the same function over a steady window: latency, records/s,
  CPU per record (own processes, Kafka, Swift apart).
- `--peer` takes commit intervals in seconds or `none`; anything else is a one-line error.
- On the real stack (slow): `python -m matos_dev.bench.estate` at a tiny size runs the archive,
  then the sink at two commit intervals, each on a steady window of its own, and its report holds
  both systems' figures, every record committed by both.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from matos_dev.bench import estate, estate_peer
from matos_dev.bench import iceberg_connect as ic
from matos_dev.bench.stack import Stack


def test_the_sink_reads_the_estate_by_pattern_and_routes_each_topic_to_its_own_table():
    catalog = ic.Catalog(Path("/data/catalog.db"), "b", "http://127.0.0.1:8080", "test:tester", "testing")
    cfg = ic.routed_sink_config("estate-x-.*", {"estate-x-0000": "bench.estate_x_0000",
                                                "estate-x-0001": "bench.estate_x_0001"}, catalog, "ctl", 2, 60_000)
    assert "topics" not in cfg and cfg["topics.regex"] == "estate-x-.*"
    assert cfg["iceberg.tables"] == "bench.estate_x_0000,bench.estate_x_0001"
    assert "iceberg.tables.dynamic-enabled" not in cfg  # static routing: the route field is the topic
    assert cfg["transforms.meta.topic.field"] == cfg["iceberg.tables.route-field"] == "kafka_topic"
    assert cfg["iceberg.table.bench.estate_x_0001.route-regex"] == r"estate\-x\-0001"
    assert cfg["iceberg.control.commit.interval-ms"] == "60000" and cfg["tasks.max"] == "2"
    # The rest is the single-table sink's config (catalog, converters, partition and offset columns).
    single = ic.sink_config(["t"], "bench.t", catalog, "ctl", 2, 60_000)
    assert {k: v for k, v in cfg.items() if k in single and k not in ("iceberg.tables",)} == {
        k: v for k, v in single.items() if k not in ("topics", "iceberg.tables")}


def test_peer_takes_commit_intervals_in_seconds_or_none_and_names_what_to_change_otherwise():
    assert estate_peer.intervals("60,300") == [60_000, 300_000]
    assert estate_peer.intervals("none") == [] and estate_peer.intervals(estate_peer.DEFAULT) == [60_000, 300_000]
    for bad in ("sixty", "0", "", "60,-1"):
        with pytest.raises(ValueError) as e:
            estate_peer.intervals(bad)
        assert "--peer 60,300" in str(e.value) and "\n" not in str(e.value)


def test_both_systems_get_latency_rate_and_cpu_per_record_from_the_same_window_figures():
    produced = {("t", 0, 0): 100.0, ("t", 0, 1): 101.0, ("t", 1, 0): 102.0, ("t", 1, 1): 103.0}
    committed = {("t", 0): {0: 110.0, 1: 111.0}, ("t", 1): {0: 104.0}}  # ("t", 1, 1) never committed
    f = estate_peer.figures(produced, lambda tp, o: committed[tp].get(o), {"client": 2.0, "kafka": 0.4, "swift": 1.0})
    assert (f["records"], f["not_committed"]) == (4, 1)
    assert (f["median_s"], f["p95_s"], f["max_s"]) == (10.0, 10.0, 10.0)  # 2, 10, 10
    assert f["records_per_s"] == round(3 / 11, 1)  # 3 committed from the first sent (100) to the last committed (111)
    assert f["cpu_ms_per_record"] == {"client": 500.0, "kafka": 100.0, "swift": 250.0}

    row = {"partitions": 4, "topics": 2, "per_topic": 2, "steady": f, "peer": {"60000": {**f, "tasks": 2}}}
    md = estate_peer.markdown([row])
    assert "| 4 (2 × 2) | archive | 4 | 1 | 10.0 | 10.0 | 10.0 | 0.3 | 500.0 | 100.0 | 250.0 |" in md
    assert "| 4 (2 × 2) | Iceberg sink, commit every 60 s | 4 | 1 |" in md
    assert "tasks.max 2, a standalone worker with Kafka's offset.flush.interval.ms of 10 s" in md
    assert estate_peer.markdown([{**row, "peer": {}}]) == ""  # --peer none: no second table


@pytest.fixture
def stack(kafka_server, swift_server):
    return Stack(kafka_server, swift_server)


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_bench_estate_runs_the_archive_then_the_sink_at_each_interval_on_the_same_topics(stack, tmp_path, monkeypatch,
                                                                                         output_dir):
    monkeypatch.setattr(estate, "running_stack", lambda: contextlib.nullcontext(stack))
    assert estate.main(["--partitions", "2x2", "--idle-s", "1", "--steady-s", "20", "--busy-topics", "0",
                        "--quiet-every-s", "2", "--busy-latency-s", "0", "--peer", "4,8", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "estate.md").read_text()
    (output_dir / "estate.md").write_text(md)
    (output_dir / "estate.json").write_text((tmp_path / "estate.json").read_text())
    [r] = json.loads((tmp_path / "estate.json").read_text())
    archive, sinks = r["steady"], r["peer"]
    assert list(sinks) == ["4000", "8000"]
    for name, s in [("archive", archive), *sinks.items()]:
        # Each system on a window of its own: a record per partition every 2 s for 20 s, all committed.
        assert 40 <= s["records"] <= 48 and s["not_committed"] == 0, (name, s)
        assert 0 < s["median_s"] <= s["p95_s"] <= s["max_s"] and s["records_per_s"] > 0, (name, s)
        assert s["cpu_ms_per_record"]["client"] > 0 and s["cpu_ms_per_record"]["kafka"] > 0, (name, s)
    for ms, s in sinks.items():
        assert s["tables"] == 2 and s["snapshots"] >= 2, s  # a table per topic, each committed
    assert "| 4 (2 × 2) | archive | " in md
    assert "| 4 (2 × 2) | Iceberg sink, commit every 4 s | " in md and "| 4 (2 × 2) | Iceberg sink, commit every 8 s | " in md
