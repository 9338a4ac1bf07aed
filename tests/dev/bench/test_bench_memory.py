"""The bench's memory sampler (bench/memory.py): sums of RSS and of PSS over a process tree.

Pure unit tests on this machine's /proc (no servers): a Python process and its forked child,
which share a large buffer copy-on-write, as pyspark's daemon and its workers share pages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from matos_dev.bench.memory import PeakSampler, tree_memory

MIB = 1024**2
BUFFER = 192 * MIB

# Fills a buffer (every page written, so resident), forks a child that keeps it without
# writing to it, then says so and waits for stdin to close.
_PARENT = f"""
import os, sys
buf = bytearray(b"x") * {BUFFER}
child = os.fork()
if child == 0:
    sys.stdin.read()
    os._exit(0)
print(child, flush=True)
sys.stdin.read()
os.waitpid(child, 0)
"""


def test_sum_of_pss_counts_a_buffer_shared_by_a_forked_child_once_and_rss_twice():
    proc = subprocess.Popen([sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        mem = tree_memory(proc.pid)
        with PeakSampler(proc.pid, interval=0.05) as sampler:
            sampler.sample()
        # Two processes map the buffer: RSS counts it in each, PSS half in each.
        assert mem["total"] >= 2 * BUFFER
        assert BUFFER <= mem["pss_total"] < 1.25 * BUFFER, mem
        assert mem["total"] - mem["pss_total"] > 0.75 * BUFFER, mem
        # The child is a Python process below the root: kind "python_workers", as Spark's are.
        assert mem["python_workers"] >= BUFFER and mem["pss_python_workers"] < 0.75 * BUFFER, mem
        # The sampler keeps the peak of both sums, over the same samples.
        assert sampler.samples >= 1
        assert sampler.peaks["total"] >= 2 * BUFFER and BUFFER <= sampler.peaks["pss_total"] < 1.25 * BUFFER
        # Between its (costly) full samples it still reads the Python workers' RSS often, for the
        # per-task peaks: with full samples at most every hour, the child's RSS keeps coming.
        with PeakSampler(proc.pid, interval=0.02, full_interval=3600) as sparse:
            give_up = time.monotonic() + 60  # a bound, not a timing assertion
            while len(sparse.workers.samples.get(child, [])) < 5 and time.monotonic() < give_up:
                time.sleep(0.02)
        assert len(sparse.workers.samples.get(child, [])) >= 5
        assert sparse.samples == 1 and sparse.peaks["pss_total"] >= BUFFER
        assert all(rss >= BUFFER for _, rss in sparse.workers.samples[child])
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            if child:
                os.kill(child, signal.SIGKILL)
            proc.kill()
            proc.wait()


def test_a_tree_that_is_gone_sums_to_zero():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    mem = tree_memory(proc.pid)
    assert mem["total"] == 0 and mem["pss_total"] == 0
