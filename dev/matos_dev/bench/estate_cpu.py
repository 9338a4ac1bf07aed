"""The CPU per archived range of the estate's batch runs, every process counted, by phase of a run.

During `make bench-estate`'s steady part (bench/estate.py), every 0.5 s, the CPU (utime + stime,
bench/cpu.py) of each process of the deployment's roles: `dagster dev`'s session (its daemon,
code server, webserver and run workers), the Spark Connect server's JVM and its Python workers,
each Swift server and the Kafka broker. The bench's own processes (producer, pollers) do not count.

Each 0.5 s interval's CPU goes to the phases active then, in proportion to the part of the
interval each covers. Where two or more phases are active at once (the lag sensor ticking while
a batch runs, two runs at once), a run worker's CPU goes to its own run's phase and Spark's to a
Spark job when one is active (cpu_by_phase.takers); any other CPU of that time is split evenly
among them, and the report says how much of each phase's CPU was so shared. Time in no phase is
"no run, no tick".

The phases, with their wall-clock bounds:

- a batch run's own spans (core/tracing.py): the run workers export them over OTLP/HTTP to a
  small receiver here (`OTEL_EXPORTER_OTLP_ENDPOINT` set for `dagster dev`): `checks`,
  `spark_job`, `manifests`, `commits` (and any span a batch run adds later, by its name);
  time of `archive_batch` outside them is "batch, other";
- from Dagster's records of the run: "queued/starting" (run created → started), "run start"
  (started → its first span), "materialisations" (its last span → its last materialisation
  event, unless a span says it), "run end" (→ run ended); a run of another job is one phase,
  "run <job>", from created to ended; a run process's CPU after its run ended, "run process exit";
- each sensor's ticks ("tick <sensor>": tick start → end, from the instance's tick records).

A span is the run's whose worker process exported it (the span's resource `process.pid`, the run's
"Started process for run (pid: N)" event); a span of no known process goes to the run that was
running when it started.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from matos_dev.bench.cpu import CpuSample, cpu_sample, cpu_used
from matos_dev.bench.cpu_by_phase import BATCH_JOB, WORKER, Interval, Run, Window, attribute, run_windows, summary
from matos_dev.bench.cpu_by_phase import TARGET_MS  # noqa: F401 - bench/estate.py's target, from here
from matos_dev.bench.otlp import Receiver

PERIOD_S = 0.5


# ------------------------------------------------------------------------ the CPU sampler


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, session) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                f = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry.name)] = (int(f[1]), int(f[3]))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def dev_role(cmd: str) -> str:
    """The role of a process of `dagster dev`'s session, by its command line."""
    if "dagster._daemon run" in cmd or "dagster-daemon run" in cmd:
        return "daemon"
    if "api grpc" in cmd or "code-server" in cmd:
        return "code_server"
    if "dagster-webserver" in cmd or "dagster_webserver" in cmd or " dev " in f" {cmd} ":
        return "webserver"  # `dagster dev` itself with its webserver: neither does a run's work
    return "run_worker"  # a run's process (the code server's subprocess) and anything it starts


def roles(session: int | None, servers: dict[str, list[int]]) -> dict[str, list[int]]:
    """The PIDs of each role: `dagster dev`'s session by command line; each server (`servers`: role ->
    root PIDs, e.g. "spark_jvm", "kafka", "swift/proxy") with all its descendants, a Spark server's
    Python processes as "spark_python"."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, list[int]] = {}
    if session is not None:
        for pid, (_, sess) in table.items():
            if sess == session:
                role = dev_role(_cmdline(pid))
                out.setdefault(f"{WORKER}{pid}" if role == "run_worker" else role, []).append(pid)
    for role, roots in servers.items():
        todo = list(roots)
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            python = role == "spark_jvm" and pid not in roots and "python" in _cmdline(pid).split(" ", 1)[0]
            out.setdefault("spark_python" if python else role, []).append(pid)
    return out


class Sampler:
    """The CPU by role of each PERIOD_S, in a thread, from `start()` to `stop()`."""

    def __init__(self, session: int | None, servers: dict[str, list[int]]):
        self.session, self.servers = session, servers
        self.intervals: list[Interval] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> tuple[float, CpuSample]:
        return time.time(), cpu_sample(roles(self.session, self.servers))

    def _loop(self) -> None:
        t0, s0 = self._sample()
        while not self._stop.wait(max(0.0, t0 + PERIOD_S - time.time())):
            t1, s1 = self._sample()
            used = cpu_used(s0, s1)
            # A server of parts once (Swift's four as "swift"), a run worker by its PID (cpu_by_phase.takers).
            self.intervals.append(Interval(t0, t1, {k: v for k, v in used.items() if k.startswith(WORKER)
                                                    or ("/" not in k and k != "run_worker")}))
            t0, s0 = t1, s1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Interval]:
        self._stop.set()
        self._thread.join(30)
        return self.intervals


# --------------------------------------------------------------- Dagster's records, the hook


_PID = re.compile(r"Started process for run \(pid: (\d+)\)")


def dagster_records(instance, since: float) -> tuple[list[Run], list[Window]]:
    """The runs created since `since` and every sensor's ticks since then, from `instance`."""
    from datetime import datetime, timezone

    from dagster import DagsterEventType, RunsFilter
    from dagster._core.definitions.run_request import InstigatorType

    runs, ticks = [], []
    for rec in instance.get_run_records(RunsFilter(created_after=datetime.fromtimestamp(since, timezone.utc))):
        run = rec.dagster_run
        engine = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ENGINE_EVENT, limit=20).records
        pids = [int(m.group(1)) for e in engine if (m := _PID.search(e.event_log_entry.message or ""))]
        last = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION,
                                            ascending=False, limit=1).records
        runs.append(Run(run.run_id, run.job_name, rec.create_timestamp.timestamp(), rec.start_time, rec.end_time,
                        _ranges(run.run_config), pids[0] if pids else None,
                        last[0].event_log_entry.timestamp if last else None))
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, after=since):
            if tick.end_timestamp:
                ticks.append(Window(f"tick {state.instigator_name}", tick.timestamp, tick.end_timestamp))
    return runs, ticks


def _ranges(config) -> int:
    """The number of ranges of a batch run's config (0 for another run)."""
    if isinstance(config, dict):
        if isinstance(config.get("ranges"), list):
            return len(config["ranges"])
        return sum(_ranges(v) for v in config.values())
    return 0


class Budget:
    """The hook of bench/estate.py: its `env` into `dagster dev`'s settings; `with budget:` around
    `dagster dev` (the receiver); `start(dev)` when the steady part starts, `stop(dev)` after it."""

    def __init__(self, servers: dict[str, list[int]]):
        self.servers = servers
        self.receiver = Receiver()
        self.env = self.receiver.env
        self.sampler: Sampler | None = None
        self.since = 0.0

    def __enter__(self):
        self.receiver.__enter__()
        return self

    def __exit__(self, *exc):
        if self.sampler is not None:
            self.sampler.stop()
        self.receiver.__exit__(*exc)

    def start(self, dev) -> None:
        self.since = time.time()
        self.sampler = Sampler(dev.proc.pid, self.servers)
        self.sampler.start()

    def stop(self, dev, wait_s: float = 300) -> dict:
        """Once the batch runs in flight have ended (at most `wait_s`), the figures (summary's)."""
        from dagster import DagsterRunStatus, RunsFilter

        in_flight = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                     DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
        deadline = time.time() + wait_s
        # dev.instance(): PostgreSQL's instance reads its connection from the environment it sets
        with dev.instance() as instance:
            while time.time() < deadline and instance.get_runs_count(RunsFilter(
                    job_name=BATCH_JOB, statuses=in_flight)):
                time.sleep(2)
            time.sleep(1)  # the last spans' export (OTEL_BSP_SCHEDULE_DELAY)
            intervals = self.sampler.stop()
            runs, ticks = dagster_records(instance, self.since)
        windows = run_windows(runs, self.receiver.spans) + ticks
        return summary(attribute(intervals, windows), windows, runs)


def servers(stack, spark) -> dict[str, list[int]]:
    """The root PIDs of the bench's servers by role: Kafka, each Swift server, the Spark Connect server."""
    from matos_dev.bench.paths import server_pids

    return {**server_pids(stack), "spark_jvm": [p for p in [spark.status()["pid"]] if p]}


# ------------------------------------------------------------------------------- the report


COLUMNS = {"daemon": "daemon", "code_server": "code server", "webserver": "webserver", "run_worker": "run",
           "spark_jvm": "Spark JVM", "spark_python": "Spark Python", "swift": "Swift", "kafka": "Kafka"}


def markdown(results: list[dict]) -> str:
    """Per size measured, a table: per phase, its median seconds and CPU ms per range, by role."""
    out = []
    for r in results:
        b = r.get("cpu_budget")
        if not b:
            continue
        out.append(f"\nCPU per archived range, {r['partitions']:,} partitions: {b['batch_runs']} batch runs, "
                   f"{b['ranges']:,} ranges (a median {b['ranges_per_run_median']} a run), every process counted; "
                   "ms of CPU per range; shared: the part of it from time the phase shared with another one "
                   "(its CPU split evenly between them):\n")
        out.append("| phase | median s | ms / range | shared | " + " | ".join(COLUMNS.values()) + " |")
        out.append("| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS) + " |")
        for phase, p in b["phases"].items():
            by = p["roles_ms_per_range"]
            out.append(f"| {phase} | {_num(p['median_s'])} | {_num(p['ms_per_range'])} | {_pct(p.get('shared'))} | "
                       + " | ".join(_num(by.get(k)) for k in COLUMNS) + " |")
        total = {k: sum((p["roles_ms_per_range"].get(k) or 0.0) for p in b["phases"].values()) for k in COLUMNS}
        out.append(f"| **total** (target ≤ {b['target_ms_per_range']:g}) | | **{_num(b['total_ms_per_range'])}** | "
                   f"{_pct(b['overlapped_share'])} | "
                   + " | ".join(_num(round(v, 2)) for v in total.values()) + " |")
    return "\n".join(out) + ("\n" if out else "")


def _pct(x) -> str:
    return "" if x is None else f"{x:.0%}"


def _num(x) -> str:
    return "" if x is None else f"{x:,.1f}" if isinstance(x, float) else f"{x:,}"
