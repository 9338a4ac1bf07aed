"""Peak resident memory of a process tree, sampled from /proc (Linux).

A Spark run is a Python driver, its JVM (in local mode the executor lives in the same JVM)
and the Python workers the JVM forks; each sample sums the RSS of every live process below
the root, per kind, and the peaks are kept.
"""

from __future__ import annotations

import threading
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


def tree_rss(root: int) -> dict[str, int]:
    """RSS in bytes of `root` and all its descendants, summed per kind, plus 'total'."""
    children = _children_map()
    sums = dict.fromkeys(KINDS, 0)
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        sums[_kind(pid, root)] += _rss_kb(pid) * 1024
    sums["total"] = sum(sums[k] for k in KINDS)
    return sums


class PeakSampler:
    """Samples `tree_rss(pid)` every `interval` seconds in a thread until stopped."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid, self.interval = pid, interval
        self.peaks = dict.fromkeys((*KINDS, "total"), 0)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = tree_rss(self.pid)
            if rss["total"]:
                self.samples += 1
                for k, v in rss.items():
                    self.peaks[k] = max(self.peaks[k], v)
            self._stop.wait(self.interval)
