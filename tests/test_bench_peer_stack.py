"""The peer bench's sink on the real stack (slow: a Connect JVM start scans ~120 plugin jars, then
the sink waits for its commit interval).

- The Iceberg Kafka Connect sink, started by PID, writes a tiny topic into an Iceberg table in
  Swift (S3 API, sqlite JDBC catalog), and every record is in the table, byte for byte.
- The fault comparison: the sink's worker SIGKILLed 3 times mid-stream and the broker stopped
  once; every source record is then compared with the table. The peer's lost/duplicated figures
  are findings, not failures (issue 19): they go to test-output/<test>/peer-faults.json.
- The archive under the same schedule (`dagster dev`, the lag sensor, a run's process SIGKILLed
  3 times inside its range, the broker stopped once): every fault injected, and every Kafka
  record read back from Swift by the product's reader exactly once, value for value; the
  verifier clean. Figures in test-output/<test>/archive-faults.json.
"""

from __future__ import annotations

import json
import uuid

import pytest

from matos_dagster.bench import peer
from matos_dagster.bench.archive_faults import KILL, archive_faults, schedule
from matos_dagster.bench.paths import server_pids
from matos_dagster.bench.stack import Stack, Workload, produce_workload


@pytest.fixture
def stack(kafka_server, swift_server):
    return Stack(kafka_server, swift_server)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sink_commits_every_record_of_a_topic_into_an_iceberg_table_in_swift(stack, tmp_path):
    w = Workload("tiny", 2000, 100)
    topic = f"peer-smoke-{uuid.uuid4().hex[:6]}"
    stack.create_topic(topic, w.partitions)
    produce_workload(stack.kafka(), topic, w)
    r = peer.throughput(stack, topic, w.records, 2, tmp_path, server_pids(stack), commit_interval_ms=5000)
    assert r["records"] == w.records
    assert r["files"]["files"] >= 1 and r["memory"]["total"] > 0 and r["cpu"]["client"] > 0
    # The worker was stopped by its PID file (stopping removes it).
    assert list(tmp_path.rglob("connect.pid")) == []


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_sink_under_worker_kills_and_a_broker_stop_is_compared_record_by_record(stack, tmp_path, output_dir):
    r = peer.faults(stack, tmp_path, rate=400, cores=2, commit_interval_ms=10_000)
    (output_dir / "peer-faults.json").write_text(json.dumps(r, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in r.items() if k != "log"}, default=str))
    assert r["source"] == r["produced"] > 0  # every record produced is in the source compared with
    assert [f["fault"] for f in r["faults"]] == ["Connect worker SIGKILL"] * 2 + ["broker stopped",
                                                                                 "Connect worker SIGKILL"]
    # Each fault came after a commit of the sink, so it had committed work to lose or repeat.
    assert all(f["committed_before"] > 0 for f in r["faults"])
    # The comparison adds up: each row is a source record (once or more) or a mismatch.
    assert r["rows"] == r["source"] - r["lost"] + r["duplicated"] + sum(
        1 for e in r["mismatched_examples"] if not e["in_source"])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_archive_under_run_kills_and_a_broker_stop_loses_duplicates_and_mismatches_nothing(
        stack, connect_server, tmp_path, output_dir):
    # The sink's schedule and rate (the test above); the sensor looks as often as the sink commits there.
    r = archive_faults(stack, tmp_path, rate=400, seconds=360, sensor_interval_s=10, spark_url=connect_server.url)
    (output_dir / "archive-faults.json").write_text(json.dumps(r, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in r.items() if k != "log"}, default=str))
    # Every fault was injected: three kills of a run inside its range, one broker stop.
    assert [(f["fault"], f["injected"]) for f in r["faults"]] == [(f, True) for f in schedule(3)], r["faults"]
    kills = [f for f in r["faults"] if f["fault"] == KILL]
    # Each killed run was archiving a range not yet committed, and ended failed (not finished first).
    assert all(f["partition_committed_before"] < f["range_end"] and f["run_status_after"] == "FAILURE"
               for f in kills), kills
    assert all(f["committed_before"] > 0 for f in r["faults"])  # each came after a commit
    assert r["drained"], "the archive's committed offsets did not reach the log end"
    assert r["source"] == r["produced"] > 0
    assert (r["lost"], r["duplicated"], r["mismatched"]) == (0, 0, 0), r
    assert r["rows"] == r["source"]
    assert r["verify"]["ok"] and r["verify"]["compared"] == r["source"], r["verify"]


def test_the_fault_table_puts_both_sides_together_and_flags_a_fault_not_injected():
    side = {"produced": 10, "produced_s": 5.0, "source": 10, "rows": 11, "lost": 0, "duplicated": 1, "mismatched": 0,
            "duplicated_examples": [{"partition": 0, "offset": 3}]}
    md = "\n".join(peer.faults_markdown({
        "faults": {**side, "faults": [{"fault": "Connect worker SIGKILL", "at_s": 3.0, "committed_before": 4}]},
        "archive_faults": {**side, "duplicated": 0, "rows": 10, "duplicated_examples": [],
                           "verify": {"ok": True, "compared": 10},
                           "faults": [{"fault": KILL, "at_s": 2.5, "committed_before": 2, "injected": False}]}}))
    assert "| Iceberg sink | 10 in 5 s | 10 | 11 | 0 | 1 | 0 | — |" in md
    assert "| archive | 10 in 5 s | 10 | 10 | 0 | 0 | 0 | clean (10 compared) |" in md
    assert f"{KILL} at 2.5 s (2 committed before) **not injected**" in md
    assert "- Iceberg sink, duplicated examples: [{'partition': 0, 'offset': 3}]" in md
    assert peer.faults_markdown({}) == []
