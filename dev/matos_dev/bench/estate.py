"""`python -m matos_dev.bench.estate` (part of `make bench`; `make bench-estate` alone): an estate of topics
kept archived by one deployment, at the default policy, as `make run` runs it.

For each size (by default the targets' workloads: 100 partitions as 25 topics of 4 and as 100 of 1,
a record in each every 10 s; 1,000 partitions as 250 topics of 4, every 30 s), on the bench's own
Kafka, Swift and Spark Connect server, with `dagster dev` (webserver, ONE daemon, code server)
and a topics file of one pattern matching every topic:

1. **first backlog**: 1,000 records of 200 bytes in every partition before Dagster starts; the
   seconds from the daemon's start until every partition's committed offset is its log end;
2. **idle CPU**: then nothing is produced for `--idle-s`; CPU-seconds of the daemon's and the
   code server's processes over that time, per second of it (cores);
3. **latency**: for `--steady-s`, every partition gets a record every size's period (the first
   `--busy-topics` topics `--busy-rate` records/s instead); each record's latency is the time
   from its production until its partition's committed offset passes it (polled every second);
   meanwhile the CPU of every process per range archived, by phase of the batch runs (estate_cpu.py);
4. **monitor**: the age of each topic's latest monitor verdict at the end (the oldest);
5. **side by side** (`--peer`): then, on the same topics, the Apache Iceberg Kafka Connect sink at
   each commit interval, each on a steady window of its own (bench/estate_peer.py); latency,
   records/s and CPU per record of both systems.

Each size is measured on each `--instance`: sqlite (dagster.yaml, `make run`'s) and PostgreSQL
(dagster.postgres.yaml on a fresh server of its own, `make run-postgres`'s; bench_instance.py).

Figures to results (JSON and a Markdown table for docs/performance/estate.md).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import uuid
from pathlib import Path

from matos_dagster.core import settings
from matos_dagster.core.kafka import many
from matos_dev.bench import bench_instance, dagster_dev, estate_cpu, estate_peer
from matos_dev.bench.cpu import cpu_used
from matos_dev.bench.stack import produce_records, running_stack
from matos_dev.stack.process import free_port
from matos_dev.stack.spark import SparkConnectServer

PARTITIONS_PER_TOPIC = 4  # unless a size says otherwise (`100x1`: 100 topics of 1 partition)
BACKLOG = 1_000  # records per partition
VALUE_BYTES = 200


def say(msg: str) -> None:
    print(f"bench estate [{time.strftime('%H:%M:%S')}]: {msg}", flush=True)


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes (their threads included), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def service_pids(dev: dagster_dev.DagsterDev) -> dict[str, list[int]]:
    """The daemon's and the code server's processes of `dagster dev`'s session (not the run workers')."""
    out: dict[str, list[int]] = {"daemon": [], "code_server": [], "webserver": []}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not dev.owns(int(entry.name)):
            continue
        cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "dagster._daemon run" in cmd or "dagster-daemon run" in cmd:
            out["daemon"].append(int(entry.name))
        elif "api grpc" in cmd or "code-server" in cmd:
            out["code_server"].append(int(entry.name))
        elif "dagster-webserver" in cmd or "dagster_webserver" in cmd:
            out["webserver"].append(int(entry.name))
    return out


class Committed:
    """Polls every partition's committed offset each second; `when(tp, offset)` is when it first passed."""

    def __init__(self, kafka, group: str, tps: list[tuple[str, int]]):
        self.kafka, self.group, self.tps = kafka, group, tps
        self.history: dict[tuple[str, int], list[tuple[float, int]]] = {tp: [] for tp in tps}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with self.kafka.kept_clients():
            while not self._stop.is_set():
                now = time.time()
                try:
                    got = many.committed(self.kafka, self.group, self.tps)
                except Exception:  # noqa: BLE001 - a missed poll costs a second of precision
                    got = {}
                for tp, c in got.items():
                    h = self.history[tp]
                    if c is not None and (not h or h[-1][1] != c):
                        h.append((now, c))
                self._stop.wait(1.0)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)

    def latest(self, tp) -> int:
        h = self.history[tp]
        return h[-1][1] if h else -1

    def when(self, tp, offset: int) -> float | None:
        for t, c in self.history[tp]:
            if c > offset:
                return t
        return None


def size(text: str, every_s: float) -> tuple[int, int, float]:
    """A size of the estate and its quiet partitions' period: `N` partitions (topics of
    PARTITIONS_PER_TOPIC) or `TxP` (T topics of P), then `@S` for a record in each every S seconds
    (default `every_s`)."""
    text, _, period = text.partition("@")
    every = float(period) if period else every_s
    if "x" in text:
        t, p = text.split("x")
        return int(t), int(p), every
    return max(1, int(text) // PARTITIONS_PER_TOPIC), PARTITIONS_PER_TOPIC, every


def measure(stack, tmp: Path, n_topics: int, per_topic: int, idle_s: float, steady_s: float, busy_topics: int,
            busy_rate: float, quiet_every_s: float, interval_s: int = 30, instance: str = "sqlite") -> dict:
    run = uuid.uuid4().hex[:6]
    topics = [f"estate-{run}-{i:04d}" for i in range(n_topics)]
    kafka = stack.kafka()
    for t in topics:
        stack.create_topic(t, per_topic)
    tps = [(t, p) for t in topics for p in range(per_topic)]
    value = os.urandom(VALUE_BYTES)
    say(f"{len(topics)} topics x {per_topic} partitions: producing {BACKLOG} records into each")
    for t in topics:
        produce_records(kafka, t, ((f"k{i}".encode(), value, [], p) for p in range(per_topic)
                                   for i in range(BACKLOG)))
    spark = SparkConnectServer(tmp / "spark", port=free_port())
    spark.start()
    container = f"bench-estate-{run}"
    env = dagster_dev.stack_settings(stack, container, spark.url, interval_s)
    pattern = f"estate-{run}-.*"
    topics_yaml = f'topics:\n  - pattern: "{pattern}"\n'
    out: dict = {"partitions": len(tps), "topics": len(topics), "per_topic": per_topic, "instance": instance,
                 "backlog_records": len(tps) * BACKLOG, "pattern": pattern}
    archive_cpu = estate_peer.ArchiveCpu(stack, spark.status()["pid"])
    budget = estate_cpu.Budget(estate_cpu.servers(stack, spark))  # CPU per range of the steady part, by phase
    try:
        with budget, dagster_dev.running(tmp, topics_yaml, {**env, **budget.env}, instance=instance) as dev, \
                Committed(kafka, "matos-archiver", tps) as committed:
            t0 = time.time()
            ends = many.watermarks(kafka, tps)
            while any(committed.latest(tp) < ends[tp][1] for tp in tps):
                dev.check()
                if time.time() - t0 > 3600:
                    raise TimeoutError("the first backlog was not archived within an hour")
                time.sleep(1)
            out["first_backlog_s"] = round(max(committed.when(tp, ends[tp][1] - 1) for tp in tps) - t0, 1)
            say(f"first backlog archived in {out['first_backlog_s']} s")

            # The runs of the backlog end, and the monitor's and the days' evaluations of it are made: a topic
            # that moved is evaluated again once its last evaluation is MATOS_REEVALUATE_S old.
            time.sleep(2 * interval_s + float(env.get("MATOS_REEVALUATE_S") or settings.get("MATOS_REEVALUATE_S")))
            pids = service_pids(dev)
            c0, w0, s0 = {k: cpu_seconds(v) for k, v in pids.items()}, time.monotonic(), dev.storage.cpu_sample()
            time.sleep(idle_s)
            elapsed = time.monotonic() - w0
            out["idle_cores"] = {k: round((cpu_seconds(v) - c0[k]) / elapsed, 4) for k, v in pids.items()}
            if s0 is not None:  # PostgreSQL's server: the storage's work, which sqlite does in the processes above
                out["idle_cores"]["postgres"] = round(cpu_used(s0, dev.storage.cpu_sample())["postgres"] / elapsed, 4)
            out["idle_cores"]["daemon_and_code_server"] = round(
                out["idle_cores"]["daemon"] + out["idle_cores"]["code_server"], 4)
            say(f"idle: {out['idle_cores']}")

            archive_cpu.start(dev)
            budget.start(dev)
            produced = steady(kafka, topics, per_topic, busy_topics, busy_rate, quiet_every_s, steady_s)
            last = {tp: max(o for (t, p, o) in produced if (t, p) == tp) for tp in {(t, p) for t, p, _ in produced}}
            drain = time.time() + 600
            while any(committed.latest(tp) <= o for tp, o in last.items()) and time.time() < drain:
                time.sleep(1)
            out["steady"] = {**estate_peer.figures(produced, committed.when, archive_cpu.stop(dev)),
                             "busy_topics": busy_topics, "busy_rate": busy_rate, "quiet_every_s": quiet_every_s}
            say(f"steady: {out['steady']}")
            out["cpu_budget"] = budget.stop(dev)
            say(f"CPU per range: {out['cpu_budget']['total_ms_per_range']} ms")
            out["monitor_oldest_verdict_s"] = monitor_age(dev, topics)
            out["runs"] = runs(dev)
    finally:
        spark.stop()
        stack.drop_container(container)
    return out


def steady(kafka, topics: list[str], per_topic: int, busy: int, rate: float, quiet_every_s: float,
           seconds: float) -> dict:
    """Produce for `seconds`: the first `busy` topics at `rate` records/s each, the others a record per
    partition every `quiet_every_s`; {(topic, partition, offset): time sent}."""
    produced: dict = {}
    producer = kafka.producer(**{"linger.ms": 5})
    value = os.urandom(VALUE_BYTES)

    def delivered(sent, err, msg):
        if err is None:
            produced[(msg.topic(), msg.partition(), msg.offset())] = sent

    t0 = time.monotonic()
    sent_busy = 0
    next_quiet = t0
    while time.monotonic() - t0 < seconds:
        now = time.monotonic()
        while sent_busy < int((now - t0) * rate):
            for t in topics[:busy]:
                p = sent_busy % per_topic
                producer.produce(t, value=value, partition=p, on_delivery=lambda e, m, s=time.time(): delivered(s, e, m))
            sent_busy += 1
        if now >= next_quiet:
            for t in topics[busy:]:
                for p in range(per_topic):
                    producer.produce(t, value=value, partition=p,
                                     on_delivery=lambda e, m, s=time.time(): delivered(s, e, m))
            next_quiet += quiet_every_s
        producer.poll(0)
        time.sleep(0.01)
    if producer.flush(60):
        raise RuntimeError("records left unsent")
    return produced


def monitor_age(dev: dagster_dev.DagsterDev, topics: list[str]) -> float | None:
    """Seconds since the oldest of the topics' latest monitor verdicts (None if a topic has none)."""
    from dagster import AssetCheckKey, AssetKey

    keys = [AssetCheckKey(AssetKey("archive_" + t.replace("-", "_")), "monitor") for t in topics]
    with dev.instance() as instance:
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    stamps = [r.event.timestamp for r in latest.values() if r is not None and r.event is not None]
    if len(stamps) < len(keys):
        return None
    return round(time.time() - min(stamps), 1)


def runs(dev: dagster_dev.DagsterDev) -> dict:
    with dev.instance() as instance:
        records = instance.get_run_records()
    jobs: dict[str, int] = {}
    for r in records:
        jobs[r.dagster_run.job_name] = jobs.get(r.dagster_run.job_name, 0) + 1
    return jobs


def markdown(results: list[dict]) -> str:
    rows = ["| figure | " + " | ".join(f"{r['partitions']:,} partitions, "
                                       f"{bench_instance.LABELS[r.get('instance', 'sqlite')]}" for r in results)
            + " | target |",
            "| --- | " + " | ".join("---:" for _ in results) + " | --- |"]

    def row(name, get, target):
        rows.append(f"| {name} | " + " | ".join(str(get(r)) for r in results) + f" | {target} |")

    row("topics × partitions", lambda r: f"{r['topics']} × {r.get('per_topic', PARTITIONS_PER_TOPIC)}", "")
    row("a record in each quiet partition every, s",
        lambda r: format(r["steady"]["quiet_every_s"], "g") if "quiet_every_s" in r.get("steady", {}) else "–", "")
    row(f"first backlog ({BACKLOG:,} records a partition), s", lambda r: r.get("first_backlog_s"), "< 180")
    row("record → committed, median s", lambda r: r.get("steady", {}).get("median_s"), "≤ 35")
    row("record → committed, p95 s", lambda r: r.get("steady", {}).get("p95_s"), "≤ 60")
    row("records not committed", lambda r: r.get("steady", {}).get("not_committed"), "0")
    row("idle CPU, daemon + code server, cores", lambda r: r.get("idle_cores", {}).get("daemon_and_code_server"),
        "< 0.1")
    if any("postgres" in r.get("idle_cores", {}) for r in results):
        row("idle CPU, PostgreSQL server, cores", lambda r: r.get("idle_cores", {}).get("postgres", "–"), "")
    row("oldest monitor verdict at the end, s", lambda r: r.get("monitor_oldest_verdict_s"), "≤ 300")
    row("CPU per range of the batch runs, every process, ms", lambda r: r.get("cpu_budget", {}).get(
        "total_ms_per_range"), f"≤ {estate_cpu.TARGET_MS:g}")
    row("runs", lambda r: ", ".join(f"{k} {v}" for k, v in sorted(r.get("runs", {}).items())), "")
    return "\n".join(rows) + "\n" + estate_peer.markdown(results) + estate_cpu.markdown(results)


def busy_markdown(b: dict) -> str:
    return (f"\nOne busy topic (4 partitions, 1,000 records/s of 1 KiB for {b['seconds']:g} s, the default policy): "
            f"a record reaches its range's manifest a median {b['median_s']:.0f} s after it is produced, p95 "
            f"{b['p95_s']:.0f} s, max {b['max_s']:.0f} s ({b['not_archived']} not archived; {b['runs']['archive_runs']} "
            f"runs, median {b['runs']['starting_s']} s starting and {b['runs']['step_s']} s archiving).\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m matos_dev.bench.estate", description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", default="100@10,100x1@10,1000@30",
                   help="sizes, comma-separated: N partitions (topics of 4), or TxP (T topics of P partitions), "
                        "then @S for a record in each quiet partition every S seconds (default --quiet-every-s); "
                        "default 100@10,100x1@10,1000@30, the targets' workloads")
    p.add_argument("--idle-s", type=float, default=180.0)
    p.add_argument("--steady-s", type=float, default=180.0)
    p.add_argument("--busy-topics", type=int, default=0, help="topics at --busy-rate among the quiet ones")
    p.add_argument("--busy-rate", type=float, default=100.0, help="records/s per busy topic")
    p.add_argument("--quiet-every-s", type=float, default=60.0, help="a record per quiet partition every ...")
    p.add_argument("--busy-latency-s", type=float, default=300.0,
                   help="seconds of one busy topic at 1,000 records/s, latency to its manifests (0: skip)")
    p.add_argument("--peer", default=estate_peer.DEFAULT,
                   help="the Iceberg Kafka Connect sink on each size's topics after the archive, at these commit "
                        f"intervals, seconds (default {estate_peer.DEFAULT}; none: skip)")
    p.add_argument("--instance", type=bench_instance.instances, default="sqlite,postgres",
                   help="Dagster instances to measure each size on, comma-separated: sqlite (dagster.yaml) and "
                        "postgres (dagster.postgres.yaml on a fresh PostgreSQL server); default sqlite,postgres")
    p.add_argument("--out", default=".bench")
    a = p.parse_args(argv)
    try:
        peer_intervals = estate_peer.intervals(a.peer)
    except ValueError as e:
        p.error(str(e))
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = []
    sizes = [size(x, a.quiet_every_s) for x in a.partitions.split(",")]
    for (n_topics, per_topic, every_s), instance in [(x, i) for x in sizes for i in a.instance]:
        with running_stack() as stack:
            tmp = out / f"estate-{n_topics}x{per_topic}-{instance}-{uuid.uuid4().hex[:6]}"
            tmp.mkdir(parents=True)
            results.append(measure(stack, tmp, n_topics, per_topic, a.idle_s, a.steady_s, a.busy_topics, a.busy_rate,
                                   every_s, instance=instance))
            if instance == a.instance[0]:  # the sink's figures do not depend on Dagster's instance: once a size
                results[-1]["peer"] = estate_peer.side_by_side(
                    stack, tmp, results[-1]["pattern"], peer_intervals, os.cpu_count() or 1,
                    lambda kafka, topics: steady(kafka, topics, per_topic, a.busy_topics, a.busy_rate, every_s,
                                                 a.steady_s), say=say)
        (out / "estate.json").write_text(json.dumps(results, indent=2))
        (out / "estate.md").write_text(markdown(results))
    if a.busy_latency_s:
        from matos_dev.bench import latency

        with running_stack() as stack:
            tmp = out / f"estate-busy-{uuid.uuid4().hex[:6]}"
            tmp.mkdir(parents=True)
            busy = latency.measure(stack, tmp, 1000.0, a.busy_latency_s)
        say(f"one busy topic: median {busy['median_s']} s, p95 {busy['p95_s']} s")
        (out / "estate-busy.json").write_text(json.dumps(busy, indent=2))
        (out / "estate.md").write_text(markdown(results) + busy_markdown(busy))
    print((out / "estate.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
