"""Peak resident memory of a process tree, sampled from /proc (Linux).

A Spark run is a Python driver, its JVM (in local mode the executor lives in the same JVM)
and the Python workers the JVM forks; each sample sums the memory of every live process below
the root, per kind, and the peaks are kept. Each Python worker's RSS is also kept over time:
a worker runs one task at a time, so its peak above its RSS when the timed work started is
the most one task held (`task_peaks`), which `make bench` compares with `object_bytes`.

Two sums per sample. RSS (`/proc/<pid>/status` VmRSS) counts every page a process maps,
so pages several processes share (pyspark's workers are forked from its daemon and share its
pages copy-on-write; every Python maps the same libraries) count once per process: a sum of
RSS overstates a tree of forked processes. PSS (`/proc/<pid>/smaps_rollup` Pss) charges
each page 1/n to each of the n processes that map it, so a tree's sum of PSS is the memory the
tree takes; for one process alone (a JVM) the two agree but for the libraries it shares with
other processes. smaps_rollup walks the page tables: measured 10-35 ms for a 200-650 MiB
process on the loaded bench machine (status: 0.1 ms), 30-260 ms for a whole Spark tree. The
sampler runs on the same cores as what it measures, so it takes both sums at most every nine
times its last full sample's cost (at most a tenth of a core) and 0.5 s at least; between them
it reads only the Python workers' RSS every 0.2 s, for the per-task peaks, which need it often.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

KINDS = ("driver_python", "jvm", "python_workers", "other")


def _children_map() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out.setdefault(int(fields[1]), []).append(int(entry.name))
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _pss_kb(pid: int) -> int:
    """Proportional set size: each resident page divided by the number of processes mapping it."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _kind(pid: int, root: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if pid == root:
        return "driver_python"
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    if "pyspark" in cmd or "python" in cmd.split(" ", 1)[0]:
        return "python_workers"
    return "other"


def tree_memory(root: int, workers: "WorkerTimeline | None" = None, pss: bool = True) -> dict[str, int]:
    """RSS and PSS in bytes of `root` and all its descendants, summed per kind: the RSS sums
    under the kind's name and 'total', the PSS sums under 'pss_' + kind and 'pss_total'
    (and each Python worker's RSS into `workers`, if given). `pss=False`: RSS only (PSS sums 0)."""
    children = _children_map()
    sums = dict.fromkeys((*KINDS, *(f"pss_{k}" for k in KINDS)), 0)
    todo = [root]
    now = time.time()
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        kind, rss = _kind(pid, root), _rss_kb(pid) * 1024
        sums[kind] += rss
        if rss and pss:
            sums[f"pss_{kind}"] += _pss_kb(pid) * 1024
        if workers is not None and kind == "python_workers" and rss:
            workers.add(now, pid, rss)
    sums["total"] = sum(sums[k] for k in KINDS)
    sums["pss_total"] = sum(sums[f"pss_{k}"] for k in KINDS)
    return sums


def tree_rss(root: int) -> dict[str, int]:
    """RSS in bytes of `root` and all its descendants, summed per kind, plus 'total'."""
    m = tree_memory(root)
    return {k: m[k] for k in (*KINDS, "total")}


class _Sampling:
    """Calls `sample()` every `interval` seconds in a thread, from `with` to its end."""

    interval: float

    def _start_thread(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        raise NotImplementedError


class PeakSampler(_Sampling):
    """Samples `tree_memory(pid)` in a thread until stopped; `peaks` holds the peak of each sum
    (RSS: the kinds and 'total'; PSS: 'pss_' + kind, 'pss_total'), both over the same samples,
    taken every `full_interval` seconds at least and at most every nine times the last one's
    cost. Every `interval` seconds in between, only the Python workers' RSS (`workers`)."""

    share = 9.0  # wait nine times a full sample's cost: the sampler takes at most a tenth of a core

    def __init__(self, pid: int, interval: float = 0.2, full_interval: float = 0.5):
        self.pid, self.interval, self.full_interval = pid, interval, full_interval
        self.peaks = dict.fromkeys((*KINDS, "total", *(f"pss_{k}" for k in KINDS), "pss_total"), 0)
        self.samples = 0  # full samples (both sums)
        self.sample_seconds = 0.0  # time the full samples took, in total
        self.workers = WorkerTimeline()  # each Python worker's RSS over time: per-task peaks
        self._next_full = 0.0
        self._start_thread()

    def sample(self) -> None:
        t = time.monotonic()
        if t < self._next_full:
            tree_memory(self.pid, self.workers, pss=False)
            return
        mem = tree_memory(self.pid, self.workers)
        cost = time.monotonic() - t
        self.sample_seconds += cost
        self._next_full = t + max(self.full_interval, self.share * cost)
        if mem["total"]:
            self.samples += 1
            for k, v in mem.items():
                self.peaks[k] = max(self.peaks[k], v)


# --- per task ---------------------------------------------------------------------------------
# A Spark Python worker runs one task at a time, so a task's memory is its worker's RSS above
# what the worker held when the timed part started (imports, Spark's own state). Arrow's pool
# is sampled only in process (bench/profile.py), where the task runs in this interpreter.


class WorkerTimeline:
    """Every Python worker's RSS over time, sampled with the tree (`PeakSampler` feeds it)."""

    def __init__(self) -> None:
        self.samples: dict[int, list[tuple[float, int]]] = {}

    def add(self, at: float, pid: int, rss: int) -> None:
        self.samples.setdefault(pid, []).append((at, rss))

    def task_peaks(self, started: float) -> list[dict]:
        """Per worker that ran after `started`: RSS at start (or first seen), peak after, the difference."""
        out = []
        for pid, series in sorted(self.samples.items()):
            before = [rss for t, rss in series if t <= started]
            after = [rss for t, rss in series if t > started]
            if not after:
                continue
            base = before[-1] if before else after[0]
            peak = max(after)
            out.append({"pid": pid, "start_rss": base, "peak_rss": peak, "above_start": max(0, peak - base),
                        "seen_before_start": bool(before)})
        return out


def rss_self() -> int:
    """This process's resident bytes now."""
    return _rss_kb(os.getpid()) * 1024


class SelfSampler(_Sampling):
    """Peak RSS of this process and peak bytes in Arrow's memory pool, sampled in a thread
    every `interval` seconds, above what they were when it started (one task run in process)."""

    def __init__(self, interval: float = 0.005):
        import pyarrow as pa

        self._pa = pa
        self.interval = interval
        self.base_rss = rss_self()
        self.base_arrow = pa.total_allocated_bytes()
        self.peak_rss = self.base_rss
        self.peak_arrow = self.base_arrow
        self._start_thread()

    def sample(self) -> None:
        self.peak_rss = max(self.peak_rss, rss_self())
        self.peak_arrow = max(self.peak_arrow, self._pa.total_allocated_bytes())

    @property
    def rss_above(self) -> int:
        return self.peak_rss - self.base_rss

    @property
    def arrow_above(self) -> int:
        return self.peak_arrow - self.base_arrow
