"""The CPU per archived range of the estate's batch runs, every process counted, by phase of a run.

During `make bench-estate`'s steady part (bench/estate.py), every 0.5 s, the CPU (utime + stime,
bench/cpu.py) of each process of the deployment's roles: `dagster dev`'s session (its daemon,
code server, webserver and run workers), the Spark Connect server's JVM and its Python workers,
each Swift server and the Kafka broker. The bench's own processes (producer, pollers) do not count.

Each 0.5 s interval's CPU goes to the phases active then, in proportion to the part of the
interval each covers; where two or more phases are active at once (the lag sensor ticking while
a batch runs, two runs at once) the CPU of that time is split evenly among them, and the report
says how much of the CPU was so shared ("overlapped"). Time in no phase is "no run, no tick".

The phases, with their wall-clock bounds:

- a batch run's own spans (core/tracing.py): the run workers export them over OTLP/HTTP to a
  small receiver here (`OTEL_EXPORTER_OTLP_ENDPOINT` set for `dagster dev`): `checks`,
  `spark_job`, `manifests`, `commits` (and any span a batch run adds later, by its name);
  time of `archive_batch` outside them is "batch, other";
- from Dagster's records of the run: "queued/starting" (run created → started), "run start"
  (started → its first span), "materialisations" (its last span → its last materialisation
  event, unless a span says it), "run end" (→ run ended); a run of another job is one phase,
  "run <job>", from created to ended;
- each sensor's ticks ("tick <sensor>": tick start → end, from the instance's tick records).

A span is the run's whose worker process exported it (the span's resource `process.pid`, the run's
"Started process for run (pid: N)" event); a span of no known process goes to the run that was
running when it started.
"""

from __future__ import annotations

import gzip
import re
import statistics
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from matos_dev.bench.cpu import CpuSample, cpu_sample, cpu_used

TARGET_MS = 25.0  # per range of a 1,000-range batch, every process counted
PERIOD_S = 0.5
BATCH_JOB = "archive_ranges"
NOWHERE = "no run, no tick"
ROLES = ("daemon", "code_server", "webserver", "run_worker", "spark_jvm", "spark_python", "swift", "kafka")
# A batch run's phases in the order they happen (others, from new spans, after them by name).
ORDER = ("queued/starting", "run start", "checks", "spark_job", "manifests", "commits", "batch, other",
         "materialisations", "run, between batches", "run end", "run (no spans)")


# ------------------------------------------------------------------------------ the phases


@dataclass(frozen=True)
class Span:
    name: str  # without the "matos." prefix
    start: float  # epoch seconds
    end: float
    pid: int | None = None  # of the process that exported it
    attributes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    """What Dagster recorded of a run (epoch seconds)."""

    run_id: str
    job: str
    created: float
    started: float | None
    ended: float | None
    ranges: int = 0
    pid: int | None = None  # its worker process
    last_materialisation: float | None = None


@dataclass(frozen=True)
class Window:
    phase: str
    start: float
    end: float
    run_id: str | None = None


def run_windows(runs: Iterable[Run], spans: Iterable[Span]) -> list[Window]:
    """Every run's phases, back to back from its creation to its end (see the module's doc)."""
    runs, spans = list(runs), sorted(spans, key=lambda s: s.start)
    by_pid = {r.pid: r for r in runs if r.pid is not None}
    mine: dict[str, list[Span]] = {r.run_id: [] for r in runs}
    for s in spans:
        run = by_pid.get(s.pid) or next((r for r in runs if r.job == BATCH_JOB and r.started is not None
                                         and r.started <= s.start <= (r.ended or float("inf"))), None)
        if run is not None:
            mine[run.run_id].append(s)
    out: list[Window] = []
    for r in runs:
        end = r.ended if r.ended is not None else max([r.created, r.started or 0] + [s.end for s in mine[r.run_id]])
        if r.job != BATCH_JOB:
            out.append(Window(f"run {r.job}", r.created, end, r.run_id))
            continue
        started = r.started if r.started is not None else end
        out.append(Window("queued/starting", r.created, started, r.run_id))
        out += _batch_run(r, started, end, mine[r.run_id])
    return [w for w in out if w.end > w.start]


def _batch_run(r: Run, started: float, end: float, spans: list[Span]) -> list[Window]:
    batches = [s for s in spans if s.name == "archive_batch"]
    leaves = [Window(s.name, s.start, s.end, r.run_id) for s in spans if s.name != "archive_batch"]
    if not spans:
        return [Window("run (no spans)", started, end, r.run_id)]
    last = max(s.end for s in spans)
    if r.last_materialisation is not None and r.last_materialisation > last \
            and not any(w.phase == "materialisations" for w in leaves):
        leaves.append(Window("materialisations", last, r.last_materialisation, r.run_id))
    leaves.sort(key=lambda w: w.start)
    first, final = min(s.start for s in spans), max(w.end for w in leaves) if leaves else last
    out, t = list(leaves), started
    for w in [*leaves, Window("", end, end)]:  # the gaps between them, named by where they are
        if w.start > t:
            mid = (t + w.start) / 2  # a gap is named by its middle: the spans' bounds differ by microseconds
            name = ("run start" if mid < first else "run end" if mid > final
                    else "batch, other" if any(b.start <= mid <= b.end for b in batches) else "run, between batches")
            out.append(Window(name, t, min(w.start, end), r.run_id))
        t = max(t, w.end)
    if final > t:
        out.append(Window("run end", t, end, r.run_id))
    return out


# ------------------------------------------------------------------------ the attribution


@dataclass(frozen=True)
class Interval:
    start: float
    end: float
    cpu: dict[str, float]  # CPU-seconds by role


@dataclass
class Attribution:
    cpu: dict[str, dict[str, float]]  # phase -> role -> CPU-seconds
    overlapped: float  # CPU-seconds of time two or more phases shared (split evenly among them)
    total: float


def attribute(intervals: Iterable[Interval], windows: list[Window]) -> Attribution:
    """Each interval's CPU to the phases active in it, in proportion to time; a shared time's evenly."""
    cpu: dict[str, dict[str, float]] = {}
    overlapped = total = 0.0
    for iv in intervals:
        length = iv.end - iv.start
        if length <= 0:
            continue
        active = [w for w in windows if w.start < iv.end and w.end > iv.start]
        cuts = sorted({iv.start, iv.end, *(t for w in active for t in (w.start, w.end) if iv.start < t < iv.end)})
        for a, b in zip(cuts, cuts[1:]):
            share = (b - a) / length
            here = [w.phase for w in active if w.start <= a and w.end >= b] or [NOWHERE]
            for role, seconds in iv.cpu.items():
                part = seconds * share
                total += part
                if len(here) > 1:
                    overlapped += part
                for phase in here:
                    by_role = cpu.setdefault(phase, {})
                    by_role[role] = by_role.get(role, 0.0) + part / len(here)
    return Attribution(cpu, overlapped, total)


def summary(att: Attribution, windows: list[Window], runs: list[Run]) -> dict:
    """Per phase, CPU ms per range archived by the window's batch runs, by role; and the total."""
    batch = [r for r in runs if r.job == BATCH_JOB]
    ranges = sum(r.ranges for r in batch)

    def ms(seconds: float) -> float | None:
        return round(1000 * seconds / ranges, 2) if ranges else None

    phases = {}
    for phase in sorted(att.cpu, key=_rank):
        spent = [w.end - w.start for w in windows if w.phase == phase]
        phases[phase] = {"ms_per_range": ms(sum(att.cpu[phase].values())),
                         "roles_ms_per_range": {k: ms(v) for k, v in sorted(att.cpu[phase].items())},
                         "windows": len(spent), "median_s": round(statistics.median(spent), 2) if spent else None}
    return {"ranges": ranges, "batch_runs": len(batch),
            "ranges_per_run_median": statistics.median([r.ranges for r in batch]) if batch else None,
            "cpu_s": round(att.total, 2), "overlapped_share": round(att.overlapped / att.total, 3) if att.total else None,
            "total_ms_per_range": ms(att.total), "target_ms_per_range": TARGET_MS, "phases": phases}


def _rank(phase: str) -> tuple:
    return (ORDER.index(phase), "") if phase in ORDER else (len(ORDER) + (phase == NOWHERE), phase)


# --------------------------------------------------------------------- the OTLP receiver


class Receiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (protobuf, optionally gzip): the spans it was sent."""

    def __init__(self):
        self.spans: list[Span] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceRequest,
                    ExportTraceServiceResponse,
                )

                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.spans += spans_of(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):  # not a line per export on the bench's output
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def env(self) -> dict[str, str]:
        """The environment that makes a process export its spans here, soon after they end, with its PID."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self._server.server_address[1]}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "200",
                "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS": "otel,process"}

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


def spans_of(request) -> list[Span]:
    """The spans of an ExportTraceServiceRequest."""
    out = []
    for rs in request.resource_spans:
        pid = _attributes(rs.resource.attributes).get("process.pid")
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(Span(s.name.removeprefix("matos."), s.start_time_unix_nano / 1e9, s.end_time_unix_nano / 1e9,
                                int(pid) if pid is not None else None, _attributes(s.attributes)))
    return out


def _attributes(kvs) -> dict:
    return {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in kvs if kv.value.WhichOneof("value")}


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
                out.setdefault(dev_role(_cmdline(pid)), []).append(pid)
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
            self.intervals.append(Interval(t0, t1, {k: v for k, v in used.items() if "/" not in k}))
            t0, s0 = t1, s1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[Interval]:
        self._stop.set()
        self._thread.join(30)
        return self.intervals


# --------------------------------------------------------------- Dagster's records, the hook


_PID = re.compile(r"Started process for run \(pid: (\d+)\)")


def dagster_records(home: Path, since: float) -> tuple[list[Run], list[Window]]:
    """The runs created since `since` and every sensor's ticks since then, from the instance in `home`."""
    from datetime import datetime, timezone

    from dagster import DagsterEventType, DagsterInstance, RunsFilter
    from dagster._core.definitions.run_request import InstigatorType

    runs, ticks = [], []
    with DagsterInstance.from_config(str(home)) as instance:
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
        from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

        in_flight = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING,
                     DagsterRunStatus.STARTED, DagsterRunStatus.CANCELING]
        deadline = time.time() + wait_s
        with DagsterInstance.from_config(str(dev.home)) as instance:
            while time.time() < deadline and instance.get_runs_count(RunsFilter(
                    job_name=BATCH_JOB, statuses=in_flight)):
                time.sleep(2)
        time.sleep(1)  # the last spans' export (OTEL_BSP_SCHEDULE_DELAY)
        intervals = self.sampler.stop()
        runs, ticks = dagster_records(dev.home, self.since)
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
                   f"ms of CPU per range ({b['overlapped_share']:.0%} of the CPU in time two phases shared, "
                   "split evenly between them):\n")
        out.append("| phase | median s | ms / range | " + " | ".join(COLUMNS.values()) + " |")
        out.append("| --- | ---: | ---: | " + " | ".join("---:" for _ in COLUMNS) + " |")
        for phase, p in b["phases"].items():
            by = p["roles_ms_per_range"]
            out.append(f"| {phase} | {_num(p['median_s'])} | {_num(p['ms_per_range'])} | "
                       + " | ".join(_num(by.get(k)) for k in COLUMNS) + " |")
        total = {k: sum((p["roles_ms_per_range"].get(k) or 0.0) for p in b["phases"].values()) for k in COLUMNS}
        out.append(f"| **total** (target ≤ {b['target_ms_per_range']:g}) | | **{_num(b['total_ms_per_range'])}** | "
                   + " | ".join(_num(round(v, 2)) for v in total.values()) + " |")
    return "\n".join(out) + ("\n" if out else "")


def _num(x) -> str:
    return "" if x is None else f"{x:,.1f}" if isinstance(x, float) else f"{x:,}"
