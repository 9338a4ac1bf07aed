"""The CPU of sampled intervals attributed to the phases of batch runs, per range archived (pure:
no process, no Dagster). Used by bench/estate_cpu.py; its doc says what the phases are."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from matos_dev.bench.otlp import Span

TARGET_MS = 25.0  # per range of a 1,000-range batch, every process counted
BATCH_JOB = "archive_ranges"
NOWHERE = "no run, no tick"
WORKER = "run_worker/"  # a run worker's role, by its PID: "run_worker/<pid>"
EXIT = "run process exit"  # a run worker's CPU after its run ended (its process ends later)
# A batch run's phases in the order they happen (others, from new spans, after them by name).
ORDER = ("queued/starting", "run start", "checks", "spark_job", "manifests", "commits", "batch, other",
         "materialisations", "run, between batches", "run end", "run (no spans)", EXIT)


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
    pid: int | None = None  # the run's worker process


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
    pids = {r.run_id: r.pid for r in runs}
    return [replace(w, pid=pids[w.run_id]) for w in out if w.end > w.start]


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
    shared: dict[str, float] = field(default_factory=dict)  # phase -> its CPU-seconds from such time


def takers(role: str, active: list[Window], workers: set[int] = frozenset()) -> list[Window]:
    """Which of the phases active at once take a role's CPU: a run worker's ("run_worker/<pid>") its own
    run's (EXIT once its run has ended: `workers`, the PIDs of the runs), Spark's a Spark job's, when one
    is active; otherwise all of them (shared evenly)."""
    if role.startswith(WORKER):
        pid = int(role[len(WORKER):])
        own = [w for w in active if w.pid == pid] or ([Window(EXIT, 0, 0)] if pid in workers else [])
    elif role.startswith("spark_"):
        own = [w for w in active if w.phase == "spark_job"]
    else:
        own = []
    return own or active


def attribute(intervals: Iterable[Interval], windows: list[Window]) -> Attribution:
    """Each interval's CPU to the phases active in it, in proportion to time; a shared time's evenly
    among the phases that take it (`takers`). A run worker's CPU is reported as "run_worker"."""
    cpu: dict[str, dict[str, float]] = {}
    shared: dict[str, float] = {}
    workers = {w.pid for w in windows if w.pid is not None}
    overlapped = total = 0.0
    for iv in intervals:
        length = iv.end - iv.start
        if length <= 0:
            continue
        active = [w for w in windows if w.start < iv.end and w.end > iv.start]
        cuts = sorted({iv.start, iv.end, *(t for w in active for t in (w.start, w.end) if iv.start < t < iv.end)})
        for a, b in zip(cuts, cuts[1:]):
            share = (b - a) / length
            now = [w for w in active if w.start <= a and w.end >= b]
            for role, seconds in iv.cpu.items():
                part = seconds * share
                total += part
                here = [w.phase for w in takers(role, now, workers)] or [NOWHERE]
                if len(here) > 1:
                    overlapped += part
                for phase in here:
                    by_role = cpu.setdefault(phase, {})
                    name = "run_worker" if role.startswith(WORKER) else role
                    by_role[name] = by_role.get(name, 0.0) + part / len(here)
                    if len(here) > 1:
                        shared[phase] = shared.get(phase, 0.0) + part / len(here)
    return Attribution(cpu, overlapped, total, shared)


def summary(att: Attribution, windows: list[Window], runs: list[Run]) -> dict:
    """Per phase, CPU ms per range archived by the window's batch runs, by role; and the total."""
    batch = [r for r in runs if r.job == BATCH_JOB]
    ranges = sum(r.ranges for r in batch)

    def ms(seconds: float) -> float | None:
        return round(1000 * seconds / ranges, 2) if ranges else None

    phases = {}
    for phase in sorted(att.cpu, key=_rank):
        spent = [w.end - w.start for w in windows if w.phase == phase]
        own = sum(att.cpu[phase].values())
        phases[phase] = {"ms_per_range": ms(own), "shared": round(att.shared.get(phase, 0.0) / own, 3) if own else None,
                         "roles_ms_per_range": {k: ms(v) for k, v in sorted(att.cpu[phase].items())},
                         "windows": len(spent), "median_s": round(statistics.median(spent), 2) if spent else None}
    return {"ranges": ranges, "batch_runs": len(batch),
            "ranges_per_run_median": statistics.median([r.ranges for r in batch]) if batch else None,
            "cpu_s": round(att.total, 2),
            "overlapped_share": round(att.overlapped / att.total, 3) if att.total else None,
            "total_ms_per_range": ms(att.total), "target_ms_per_range": TARGET_MS, "phases": phases}


def _rank(phase: str) -> tuple:
    return (ORDER.index(phase), "") if phase in ORDER else (len(ORDER) + (phase == NOWHERE), phase)
