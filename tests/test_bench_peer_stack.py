"""The peer bench's sink on the real stack (slow: a Connect JVM start scans ~120 plugin jars, then
the sink waits for its commit interval).

- The Iceberg Kafka Connect sink, started by PID, writes a tiny topic into an Iceberg table in
  Swift (S3 API, sqlite JDBC catalog), and every record is in the table, byte for byte.
- The fault comparison: the sink's worker SIGKILLed 3 times mid-stream and the broker stopped
  once; every source record is then compared with the table. The peer's lost/duplicated figures
  are findings, not failures (issue 19): they go to test-output/<test>/peer-faults.json.
"""

from __future__ import annotations

import json
import uuid

import pytest

from matos_dagster.bench import peer
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
