"""process.py tracks a server by PID *and* start time, and signals nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from matos_dev.stack import process

pytestmark = pytest.mark.timeout(120)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) read straight from /proc, independently of process.py."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _gone(pid: int, start_time: int, timeout: float = 5) -> bool:
    """No live process with this PID and start time (a zombie counts as gone)."""
    deadline = time.monotonic() + timeout
    while True:
        stat = _stat(pid)
        if stat is None or stat[2] != start_time or stat[0] in "ZX":
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[1] == pid and stat[0] not in "ZX":
                found.append(int(entry.name))
    return found


def _wait_for(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _ignores_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def test_started_process_is_running_then_stopped(tmp_path):
    pid_file, log_file = tmp_path / "run" / "sleep.pid", tmp_path / "log" / "sleep.log"
    pid = process.start(["sleep", "60"], pid_file, log_file)
    start_time = _stat(pid)[2]
    proc = process._children[pid]
    try:
        assert pid_file.read_text().split() == [str(pid), str(start_time)]
        assert process.read_pid(pid_file) == pid
        assert process.pid_alive(pid)
        assert log_file.exists()

        assert process.stop(pid_file, timeout=10) is True
        assert proc.returncode == -signal.SIGTERM  # it died of the SIGTERM: no SIGKILL was needed
        assert _gone(pid, start_time, timeout=0)
        assert not pid_file.exists()
        assert process.read_pid(pid_file) is None
        assert process.stop(pid_file) is False  # already stopped: nothing to do
    finally:
        if not _gone(pid, start_time, timeout=0):
            os.kill(pid, signal.SIGKILL)


def test_pid_file_with_another_start_time_names_no_process(tmp_path):
    """A recycled PID: alive, but not the process that was recorded. Never signalled."""
    received = []
    previous = signal.signal(signal.SIGTERM, lambda sig, _frame: received.append(sig))
    other = subprocess.Popen(["sleep", "60"])
    try:
        for pid in (os.getpid(), other.pid):
            real = _stat(pid)[2]
            for text in (f"{pid} {real + 1}\n", f"{pid} {max(real - 100, 0)}\n", f"{pid}\n", "junk\n"):
                pid_file = tmp_path / "stale.pid"
                pid_file.write_text(text)
                assert process.read_pid(pid_file) is None, text
                assert process.stop(pid_file, timeout=1) is False, text
                assert not pid_file.exists()
        time.sleep(0.2)
        assert received == []  # the test process got no SIGTERM (and, being alive, no SIGKILL)
        assert other.poll() is None  # the other process was not touched either
        assert _stat(other.pid)[0] not in "ZX"
    finally:
        signal.signal(signal.SIGTERM, previous)
        other.kill()
        other.wait()


def test_exited_process_is_not_running(tmp_path):
    pid_file = tmp_path / "true.pid"
    pid = process.start(["true"], pid_file, tmp_path / "true.log")
    # It exits at once; whether reaped yet or still a zombie, it is not running.
    _wait_for(lambda: process.read_pid(pid_file) is None)
    assert not process.pid_alive(pid)
    assert process.stop(pid_file) is False
    assert not pid_file.exists()


def test_sigterm_ignored_falls_back_to_sigkill(tmp_path):
    pid_file = tmp_path / "stubborn.pid"
    # exec: the ignored SIGTERM survives exec, and sleep replaces bash (no child left).
    pid = process.start(["bash", "-c", 'trap "" TERM; exec sleep 60'], pid_file, tmp_path / "stubborn.log")
    start_time = _stat(pid)[2]
    proc = process._children[pid]
    try:
        _wait_for(lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0") and _ignores_sigterm(pid))
        assert _children_of(pid) == []

        started = time.monotonic()
        assert process.stop(pid_file, timeout=1.0) is True
        # SIGKILL only once the timeout was over (a lower bound: no load makes it fail).
        assert time.monotonic() - started >= 1.0
        assert proc.returncode == -signal.SIGKILL  # reaped by stop(), killed by SIGKILL
        assert _gone(pid, start_time, timeout=0)
        assert not pid_file.exists()
    finally:
        if not _gone(pid, start_time, timeout=0):
            os.kill(pid, signal.SIGKILL)


def test_group_option_also_stops_children(tmp_path):
    pid_file = tmp_path / "parent.pid"
    # "; true": bash stays the parent of sleep instead of exec'ing it; both ignore SIGTERM.
    pid = process.start(["bash", "-c", 'trap "" TERM; sleep 60; true'], pid_file, tmp_path / "parent.log")
    start_time = _stat(pid)[2]
    _wait_for(lambda: len(_children_of(pid)) == 1)
    child = _children_of(pid)[0]
    child_start_time = _stat(child)[2]
    try:
        _wait_for(lambda: _ignores_sigterm(child))
        assert process.stop(pid_file, timeout=0.5, group=True) is True
        assert _gone(pid, start_time, timeout=0)
        assert _gone(child, child_start_time)
    finally:
        for p, t in ((pid, start_time), (child, child_start_time)):
            if not _gone(p, t, timeout=0):
                os.kill(p, signal.SIGKILL)
