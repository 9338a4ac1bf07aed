"""CPU-seconds of chosen processes between two samples, from /proc/<pid>/stat (Linux).

Only the given processes count (a path's own and the stack's servers), so other load on the
machine does not. Each process counts its own CPU (utime + stime) and that of the children
it has waited for (cutime + cstime, fields 14-17): a pool's parent holds its ended workers'.

A process that ends between two samples is gone from /proc, and its CPU with it. Summing
totals per sample is right only if a sampled parent waited for it (its cutime then rose by
all of the child's CPU). pyspark's daemon ignores SIGCHLD, so the kernel reaps its workers
and their CPU lands nowhere: a bench run's Python workers then showed -1.57 CPU-s, the CPU a
worker killed for being idle had used before the window. So `cpu_used` sums each process's
own rise, which cannot be negative: a process that ended keeps what it had at the first
sample (it adds 0; what it used after that sample is not known, so the figure is a lower
bound), unless its parent's cutime + cstime rose by at least what its ended children had;
then they were waited for, and that rise is moved from the parent to them (shared in
proportion to what each had), so it counts once and in the child's group (the JVM reaping a
Python process counts as Python).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from matos_dev.bench.memory import _children_map

TICK = os.sysconf("SC_CLK_TCK")

Key = tuple[int, int]  # (pid, start time): a PID the kernel hands out again is another process


@dataclass(frozen=True)
class Proc:
    group: str
    ppid: int
    ticks: int  # utime + stime + cutime + cstime
    reaped: int  # cutime + cstime: the children it waited for


@dataclass(frozen=True)
class CpuSample:
    groups: tuple[str, ...]
    procs: dict[Key, Proc]


def _stat(pid: int) -> tuple[Key, int, int, int] | None:
    """(key, ppid, ticks, reaped) of `pid`, None if it is gone."""
    try:
        # The command name (field 2) may hold ") ": what follows the last one is field 3 on.
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    utime, stime, cutime, cstime = (int(x) for x in f[11:15])
    return (pid, int(f[19])), int(f[1]), utime + stime + cutime + cstime, cutime + cstime


def tree(root: int) -> list[int]:
    """`root` and all its descendants."""
    children = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def cpu_sample(groups: dict[str, list[int]]) -> CpuSample:
    """The CPU so far of each live process of each group (a PID in two groups counts in the first)."""
    procs: dict[Key, Proc] = {}
    for group, pids in groups.items():
        for pid in pids:
            s = _stat(pid)
            if s is not None and s[0] not in procs:
                procs[s[0]] = Proc(group, s[1], s[2], s[3])
    return CpuSample(tuple(groups), procs)


def cpu_used(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU-seconds per group between two samples; never negative (see the module's doc).

    A group "<part>/<member>" counts in "<part>" too.

    A process keeps the group it had in `before`; one that started in between counts whole.
    """
    ticks = dict.fromkeys((*before.groups, *after.groups), 0.0)
    for key, p in after.procs.items():
        b = before.procs.get(key)
        ticks[b.group if b else p.group] += p.ticks - (b.ticks if b else 0)
    # Processes that ended, by their parent, where the parent was sampled both times.
    key_of = {key[0]: key for key in before.procs}
    ended: dict[Key, list[Proc]] = {}
    for key, p in before.procs.items():
        parent = key_of.get(p.ppid)
        if key not in after.procs and parent in after.procs:
            ended.setdefault(parent, []).append(p)
    for parent, children in ended.items():
        rose = after.procs[parent].reaped - before.procs[parent].reaped
        had = sum(c.ticks for c in children)
        if rose < had:
            continue  # not waited for (SIGCHLD ignored): each keeps what it had, adds 0
        ticks[before.procs[parent].group] -= rose
        for c in children:
            ticks[c.group] += (rose * c.ticks / had if had else rose / len(children)) - c.ticks
    used = {g: t / TICK for g, t in ticks.items()}
    # A group named "<part>/<member>" (each Swift server) also counts in "<part>": the tables
    # show the part, the results keep each member to say which one a difference is in.
    for g in list(used):
        if "/" in g:
            part = g.split("/", 1)[0]
            used[part] = used.get(part, 0.0) + used[g]
    return used
