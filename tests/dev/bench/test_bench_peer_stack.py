"""The peer bench's sink on the real stack (slow: a Connect JVM start scans ~120 plugin jars, then
the sink waits for its commit interval).

- The Iceberg Kafka Connect sink, started by PID, writes a tiny topic into an Iceberg table in
  Swift (S3 API, sqlite JDBC catalog), and every record is in the table, byte for byte.
- The fault comparison, side by side: the sink's worker SIGKILLed 3 times mid-stream and the
  broker stopped once, every source record then compared with the table; the peer's
  lost/duplicated figures are findings, not failures (issue 19). Then the archive under the same
  schedule, rate and producing time (`dagster dev`, the lag sensor, a run's process SIGKILLed 3
  times inside its range, the broker stopped once): every fault injected, and every Kafka record
  read back from Swift by the product's reader exactly once, value for value; the verifier
  clean. Figures in test-output/<test>/peer-faults.json, archive-faults.json and faults.md.
"""

from __future__ import annotations

import json
import uuid

import pytest
from matos_dev.bench import peer
from matos_dev.bench.archive_faults import KILL, archive_faults, schedule
from matos_dev.bench.paths import server_pids
from matos_dev.bench.stack import Stack, Workload, produce_workload


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
    # A commit interval longer than the tasks take to drain 2,000 records: the commit request finds
    # them idle, the case of issue 19's ~1,000 records/s (see the assertion below).
    r = peer.throughput(stack, topic, w.records, 2, tmp_path, server_pids(stack), commit_interval_ms=20_000)
    assert r["records"] == w.records
    assert r["files"]["files"] >= 1 and r["memory"]["total"] > 0 and r["cpu"]["client"] > 0
    # Once the tasks have drained the topic they still answer the coordinator's commit requests
    # (at Kafka's standalone offset flush, 10 s): no commit is given up on (with the worker's 60 s
    # code default, commits timed out until a flush came; issue 19's ~1,000 records/s).
    assert r["offset_flush_interval_ms"] == 10_000 and r["commit_timeouts"] == 0, r["log"]
    # The worker was stopped by its PID file (stopping removes it).
    assert list(tmp_path.rglob("connect.pid")) == []


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_sink_and_archive_under_the_same_faults_are_compared_record_by_record(stack, connect_server, tmp_path,
                                                                             output_dir):
    # 1. The sink: its figures are findings, not failures (issue 19); its faults must all have happened.
    sink = peer.faults(stack, tmp_path, rate=400, cores=2, commit_interval_ms=10_000)
    (output_dir / "peer-faults.json").write_text(json.dumps(sink, indent=1, default=str) + "\n")
    print("SINK " + json.dumps({k: v for k, v in sink.items() if k != "log"}, default=str))
    assert sink["source"] == sink["produced"] > 0  # every record produced is in the source compared with
    assert [f["fault"] for f in sink["faults"]] == ["Connect worker SIGKILL"] * 2 + ["broker stopped",
                                                                                    "Connect worker SIGKILL"]
    # Each fault came after a commit of the sink, so it had committed work to lose or repeat.
    assert all(f["committed_before"] > 0 for f in sink["faults"])
    # The comparison adds up: each row is a source record (once or more) or a mismatch.
    assert sink["rows"] == sink["source"] - sink["lost"] + sink["duplicated"] + sum(
        1 for e in sink["mismatched_examples"] if not e["in_source"])

    # 2. The archive: the same schedule, rate and producing time; its sensor looks as often as the sink commits.
    r = archive_faults(stack, tmp_path, rate=400, seconds=sink["produced_s"], sensor_interval_s=10,
                       spark_url=connect_server.url)
    (output_dir / "archive-faults.json").write_text(json.dumps(r, indent=1, default=str) + "\n")
    (output_dir / "faults.md").write_text("\n".join(peer.faults_markdown({"faults": sink, "archive_faults": r})))
    print("ARCHIVE " + json.dumps({k: v for k, v in r.items() if k != "log"}, default=str))
    # Every fault was injected: three kills of a run inside its range, one broker stop.
    assert [(f["fault"], f["injected"]) for f in r["faults"]] == [(f, True) for f in schedule(3)], r["faults"]
    kills = [f for f in r["faults"] if f["fault"] == KILL]
    # Each killed run was archiving a range not yet committed, and ended failed (not finished first).
    assert all(f["partition_committed_before"] < f["range_end"] and f["run_status_after"] == "FAILURE"
               for f in kills), kills
    # The product recovered by itself: a later run of each killed range succeeded.
    assert all(f["range_archived_again_after_s"] is not None for f in kills), kills
    assert all(f["committed_before"] > 0 for f in r["faults"])  # each came after a commit
    assert r["drained"], "the archive's committed offsets did not reach the log end"
    assert r["source"] == r["produced"] > 0 and r["produced_s"] >= sink["produced_s"]
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


class _Run:
    def __init__(self, run_id: str, partition: int, start: int, end: int, status, archiving: bool, pid: int):
        from matos_dagster.assets.archive import CLAIM_TAG
        from matos_dagster.core.offsets.ranges import OffsetRange
        from matos_dagster.core.runs.heartbeat import TAG

        self.run_id, self.status, self.job_name = run_id, status, "__ASSET_JOB"
        self.tags = {"dagster/partition": OffsetRange("t", partition, start, end).key, CLAIM_TAG: "1.0",
                     TAG: "2.0"}
        self.archiving, self.pid = archiving, pid


class _Instance:
    """The instance as _Watch reads it: started runs, their events, a killed run turning FAILURE."""

    def __init__(self, runs):
        self.runs = {r.run_id: r for r in runs}

    def get_runs(self, filters=None):
        wanted = set(filters.statuses) if filters and filters.statuses else None
        return [r for r in self.runs.values() if wanted is None or r.status in wanted]

    def all_logs(self, run_id, of_type=None):
        from types import SimpleNamespace

        r = self.runs[run_id]
        if of_type is not None:
            return [SimpleNamespace(message=f"Started capturing logs in process (pid: {r.pid}).")]
        return [SimpleNamespace(user_message="t/0 [0, 10): archiving in 1 Spark task(s) of up to 100000 offsets")
                ] if r.archiving else [SimpleNamespace(user_message="waiting for its turn")]

    def get_run_by_id(self, run_id):
        from dagster import DagsterRunStatus

        r = self.runs[run_id]
        if r.status == DagsterRunStatus.STARTED and not _alive(r.pid):
            r.status = DagsterRunStatus.FAILURE  # as the code server fails a run whose worker died
        return r


def _alive(pid: int) -> bool:
    import os

    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


class _Dev:
    def __init__(self, pids):
        self.pids = set(pids)

    def check(self):
        pass

    def owns(self, pid):
        return pid in self.pids


class _Kafka:
    def __init__(self, committed):
        self.offsets = committed

    def committed(self, topic, parts, group):
        return dict(self.offsets)


def test_a_kill_goes_only_to_a_run_inside_its_uncommitted_range_and_finding_none_is_recorded_not_injected():
    import subprocess

    from dagster import DagsterRunStatus
    from matos_dev.bench.archive_faults import _Watch

    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    try:
        pids = [p.pid for p in sleepers]
        runs = [
            _Run("committed", 0, 0, 10, DagsterRunStatus.STARTED, True, pids[0]),  # its range committed already
            _Run("waiting", 1, 0, 10, DagsterRunStatus.STARTED, False, pids[1]),  # not archiving yet
            _Run("foreign", 2, 0, 10, DagsterRunStatus.STARTED, True, pids[2]),  # a PID not of our dagster dev
            _Run("going", 3, 0, 10, DagsterRunStatus.STARTED, True, pids[3]),
        ]
        watch = _Watch(_Dev([pids[0], pids[1], pids[3]]), _Instance(runs), _Kafka({0: 10, 1: 0, 2: 0, 3: 4}),
                       "t", [0, 1, 2, 3], "g")
        event = watch.kill_a_going_run(timeout=30)
        assert (event["injected"], event["run_id"], event["pid"]) == (True, "going", pids[3])
        assert (event["partition_committed_before"], event["range_end"], event["committed_before"]) == (4, 10, 14)
        assert event["run_status_after"] == "FAILURE"
        assert [_alive(p) for p in pids] == [True, True, True, False]  # only the going run's worker died

        # Nothing left to kill: recorded as not injected, for the test to fail on, never skipped.
        event = watch.kill_a_going_run(timeout=1)
        assert event["injected"] is False and "no archive run inside its range" in event["why"], event
        assert [_alive(p) for p in pids] == [True, True, True, False]
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
