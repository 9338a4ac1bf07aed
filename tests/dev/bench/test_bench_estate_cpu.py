"""The estate bench's CPU per archived range by phase (bench/estate_cpu.py): the attribution of
sampled CPU to the phases of batch runs (cpu_by_phase.py, pure), the OTLP receiver (otlp.py) fed by
a real process's span (core/tracing.span), the sampler on real processes, and (slow) a tiny estate
end to end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from matos_dev.bench import estate_cpu, otlp
from matos_dev.bench.cpu_by_phase import NOWHERE, Interval, Run, Window, attribute, run_windows, summary
from matos_dev.bench.otlp import Span

def by_phase(att):
    return {phase: round(sum(roles.values()), 6) for phase, roles in att.cpu.items()}


def test_an_intervals_cpu_goes_to_the_phases_active_in_it_in_proportion_to_time():
    # 1 s of 2 CPU-s; checks holds its first quarter, spark_job the rest.
    att = attribute([Interval(10.0, 11.0, {"run_worker": 1.0, "spark_jvm": 1.0})],
                    [Window("checks", 9.0, 10.25), Window("spark_job", 10.25, 12.0)])
    assert by_phase(att) == {"checks": 0.5, "spark_job": 1.5}
    assert att.cpu["checks"] == {"run_worker": 0.25, "spark_jvm": 0.25}
    assert att.total == 2.0 and att.overlapped == 0.0


def test_cpu_of_time_two_phases_share_is_split_evenly_between_them_and_counted_as_overlapped():
    att = attribute([Interval(0.0, 1.0, {"daemon": 0.4}), Interval(1.0, 2.0, {"daemon": 0.4})],
                    [Window("spark_job", 0.0, 2.0), Window("tick lag", 1.0, 2.0)])
    assert by_phase(att) == {"spark_job": 0.6, "tick lag": 0.2}
    assert att.overlapped == pytest.approx(0.4) and att.total == pytest.approx(0.8)
    assert att.shared == {"spark_job": pytest.approx(0.2), "tick lag": pytest.approx(0.2)}


def test_in_shared_time_a_run_workers_cpu_goes_to_its_own_run_and_sparks_to_the_spark_job():
    # Run A (worker 1) in its Spark job while run B (worker 2) starts and the lag sensor ticks.
    windows = [Window("spark_job", 0.0, 1.0, "A", pid=1), Window("queued/starting", 0.0, 1.0, "B", pid=2),
               Window("tick lag", 0.0, 1.0)]
    att = attribute([Interval(0.0, 1.0, {"run_worker/1": 0.1, "run_worker/2": 0.6, "spark_jvm": 0.9,
                                         "daemon": 0.3})], windows)
    assert att.cpu["queued/starting"] == {"run_worker": pytest.approx(0.6), "daemon": pytest.approx(0.1)}
    assert att.cpu["spark_job"] == {"run_worker": pytest.approx(0.1), "spark_jvm": pytest.approx(0.9),
                                    "daemon": pytest.approx(0.1)}
    assert att.cpu["tick lag"] == {"daemon": pytest.approx(0.1)}
    assert att.overlapped == pytest.approx(0.3)  # the daemon's: no phase of the three is more its own


def test_a_run_workers_cpu_after_its_run_ended_is_its_process_exit():
    att = attribute([Interval(1.0, 2.0, {"run_worker/1": 0.2, "run_worker/9": 0.1})],
                    [Window("run end", 0.0, 1.0, "A", pid=1)])
    assert att.cpu == {"run process exit": {"run_worker": pytest.approx(0.2)},
                       NOWHERE: {"run_worker": pytest.approx(0.1)}}  # a process of no run known


def test_cpu_of_time_in_no_phase_is_said_apart():
    att = attribute([Interval(0.0, 2.0, {"kafka": 1.0})], [Window("commits", 0.0, 0.5)])
    assert by_phase(att) == {"commits": 0.25, NOWHERE: 0.75}


BATCH = Run("r1", "archive_ranges", created=100.0, started=108.0, ended=170.0, ranges=1000, pid=42,
            last_materialisation=160.0)
# A parent span starts a little before its first child and ends a little after its last.
SPANS = [Span("archive_batch", 110.0, 150.001, 42), Span("checks", 110.001, 120.0, 42),
         Span("spark_job", 121.0, 140.0, 42), Span("manifests", 140.0, 145.0, 42), Span("commits", 145.0, 150.0, 42)]


def test_a_batch_runs_phases_follow_each_other_from_its_creation_to_its_end():
    windows = sorted(run_windows([BATCH], SPANS), key=lambda w: w.start)
    assert [(w.phase, w.start, w.end) for w in windows] == [
        ("queued/starting", 100.0, 108.0), ("run start", 108.0, 110.001), ("checks", 110.001, 120.0),
        ("batch, other", 120.0, 121.0), ("spark_job", 121.0, 140.0), ("manifests", 140.0, 145.0),
        ("commits", 145.0, 150.0), ("batch, other", 150.0, 150.001), ("materialisations", 150.001, 160.0),
        ("run end", 160.0, 170.0)]
    assert {(w.run_id, w.pid) for w in windows} == {("r1", 42)}


def test_a_span_goes_to_the_run_whose_worker_exported_it_even_when_runs_overlap():
    other = Run("r2", "archive_ranges", created=105.0, started=109.0, ended=175.0, ranges=500, pid=43)
    spans = SPANS + [Span("archive_batch", 130.0, 172.0, 43), Span("checks", 130.0, 172.0, 43)]
    checks = {w.run_id: (w.start, w.end) for w in run_windows([BATCH, other], spans) if w.phase == "checks"}
    assert checks == {"r1": (110.001, 120.0), "r2": (130.0, 172.0)}


def test_a_run_of_another_job_is_one_phase_and_a_batch_run_without_spans_one_too():
    runs = [Run("m", "monitor", 0.0, 1.0, 5.0), Run("b", "archive_ranges", 0.0, 2.0, 9.0, ranges=3)]
    assert sorted((w.phase, w.start, w.end) for w in run_windows(runs, [])) == [
        ("queued/starting", 0.0, 2.0), ("run (no spans)", 2.0, 9.0), ("run monitor", 0.0, 5.0)]


def test_the_summary_gives_each_phases_cpu_ms_per_range_of_the_batch_runs_by_role_and_the_total():
    windows = run_windows([BATCH], SPANS)
    att = attribute([Interval(100.0, 110.0, {"daemon": 1.0}), Interval(121.0, 140.0, {"spark_python": 19.0}),
                     Interval(170.0, 180.0, {"kafka": 0.5})], windows)
    s = summary(att, windows, [BATCH])
    assert s["ranges"] == 1000 and s["batch_runs"] == 1
    assert s["total_ms_per_range"] == pytest.approx(20.5) and s["target_ms_per_range"] == 25.0
    assert s["phases"]["spark_job"]["ms_per_range"] == pytest.approx(19.0)
    assert s["phases"]["spark_job"]["roles_ms_per_range"] == {"spark_python": pytest.approx(19.0)}
    assert s["phases"]["queued/starting"]["ms_per_range"] == pytest.approx(0.8)
    assert s["phases"][NOWHERE]["ms_per_range"] == pytest.approx(0.5)
    assert list(s["phases"])[:3] == ["queued/starting", "run start", "spark_job"]  # a run's order, then the rest
    table = estate_cpu.markdown([{"partitions": 1000, "cpu_budget": s}])
    assert "| spark_job | 19.0 | 19.0 | 0% | " in table and "| **total** (target ≤ 25) | | **20.5** | 0% | " in table


def test_the_receiver_gets_the_span_a_process_exports_with_its_pid():
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="matos-dagster's otel extra is not installed")
    code = ("from matos_dagster.core import tracing\n"
            "with tracing.span('checks', ranges=3):\n    pass\n")
    with otlp.Receiver() as receiver:
        env = {**os.environ, **receiver.env}
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    # The process exported its span before it exited (the provider's shutdown flushes it).
    [span] = receiver.spans
    assert span.name == "checks" and span.attributes == {"ranges": 3}
    assert span.pid is not None and span.pid != os.getpid() and 0 < span.end - span.start < 60


def test_the_sampler_counts_the_cpu_of_a_servers_children_in_its_role():
    # A server whose child burns 0.5 CPU-s and stays: its CPU is the server's while it lives, not
    # only once the server has waited for it.
    burn = "import time\nwhile time.process_time() < 0.5:\n    pass\nprint('burnt', flush=True)\ntime.sleep(120)\n"
    server = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        sampler = estate_cpu.Sampler(None, {"kafka": [server.pid]})
        sampler.start()
        assert server.stdout.readline().strip() == "burnt"
        time.sleep(2 * estate_cpu.PERIOD_S)
        intervals = sampler.stop()
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(30)
    assert all(iv.end > iv.start for iv in intervals)
    assert 0.4 < sum(iv.cpu.get("kafka", 0.0) for iv in intervals) < 1.2


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_tiny_estate_reports_its_cpu_per_range_by_phase_of_its_batch_runs(kafka_server, swift_server, tmp_path):
    from matos_dev.bench import estate
    from matos_dev.bench.stack import Stack

    out = estate.measure(Stack(kafka_server, swift_server), tmp_path, n_topics=2, per_topic=2, idle_s=1,
                         steady_s=20, busy_topics=0, busy_rate=0, quiet_every_s=10, interval_s=5)
    b = out["cpu_budget"]
    assert b["batch_runs"] >= 1 and b["ranges"] >= 4 and b["total_ms_per_range"] > 0
    # The spans arrived: the batch runs' phases are named by them, not "run (no spans)".
    assert {"queued/starting", "checks", "spark_job", "manifests", "commits"} <= set(b["phases"])
    assert "run (no spans)" not in b["phases"], b["phases"]
    print(estate.markdown([out]))
