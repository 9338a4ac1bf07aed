"""Start and stop the local stack's servers as detached processes, tracked by PID file.

Servers are started in their own session so a signal sent to the caller (Ctrl-C in
`make run`, pytest's teardown) never reaches them by accident; they are stopped by the
process recorded when they were started, never by name.

A PID alone does not name a process for long: PIDs are recycled within minutes on a busy
machine (pid_max 32768), and a server that is not our child is reaped by init the moment
it exits, so its PID may soon belong to an unrelated program. The PID file therefore
records the PID *and* the process's start time (field 22 of /proc/<pid>/stat, in clock
ticks since boot, fixed when the process is forked). A process counts as ours only if a
live, non-zombie process has that PID and that start time. `stop` checks that, then pins
the process with a pidfd, checks again, and sends every signal through the pidfd, so it
can never signal another program. Linux only (/proc, pidfd: kernel 5.3+).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

# Popen objects of the servers this Python process started, by PID. Holding them keeps
# subprocess from putting them on its own list of children to reap in the background
# (it does that for a Popen garbage-collected while its process still runs), so only
# this module reaps them, through Popen, and a recycled PID is never reaped by mistake.
_children: dict[int, subprocess.Popen] = {}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def log_tail(log_file: Path, start: int = 0, lines: int = 30) -> str:
    """The last `lines` lines of a server's log written from byte `start` on (this start's own)."""
    try:
        with open(log_file, "rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(nothing logged)"


def wait_for_port(port: int, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port):
            return
        time.sleep(0.2)
    hint = f"; see its log {log}" if log else ""
    raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s{hint}")


def read_pid(pid_file: Path) -> int | None:
    """The PID in `pid_file` if the very process recorded there is still alive, else None.

    "The very process": same PID and same start time, and not a zombie. A PID file
    without a start time (or unreadable) names no process.
    """
    record = _read_record(pid_file)
    if record is None:
        return None
    pid, start_time = record
    return pid if _alive_with_start_time(pid, start_time) else None


def pid_alive(pid: int) -> bool:
    """Whether some live (non-zombie) process has this PID, whichever it is."""
    return _alive_with_start_time(pid, None)


def group_members(pgid: int) -> list[str]:
    """Live (non-zombie) processes whose process group is `pgid`, as `pid state command`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            out.append(f"{entry.name} {state} {cmd}")
    return out


def start(
    argv: list[str],
    pid_file: Path,
    log_file: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start `argv` detached, stdout and stderr appended to `log_file`; record its PID and start time."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    # Our child cannot be reaped before we wait for it, so its /proc entry is there
    # (as a zombie at worst) and its start time readable.
    stat = _stat(proc.pid)
    if stat is None:  # pragma: no cover - only without /proc
        raise RuntimeError(f"cannot read /proc/{proc.pid}/stat of the process just started: {argv[0]}")
    tmp = pid_file.with_name(pid_file.name + ".tmp")
    tmp.write_text(f"{proc.pid} {stat[1]}\n")
    tmp.replace(pid_file)  # readers never see half a record
    return proc.pid


def stop(pid_file: Path, timeout: float = 30.0, group: bool = False) -> bool:
    """Stop the process recorded in `pid_file`: SIGTERM, SIGKILL after `timeout` seconds.

    Returns True if it was running (and is now gone), False if not; the PID file is
    removed either way. Signals only that process, through a pidfd opened after the PID
    and start time were checked (and checked again once the pidfd pins the process).
    `group=True` also signals its process group (it leads its own session), for a server
    that forks children; only while the leader is alive, so the group ID is still its own.
    """
    record = _read_record(pid_file)
    if record is None or not _alive_with_start_time(*record):
        pid_file.unlink(missing_ok=True)
        return False
    pid, start_time = record
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        pid_file.unlink(missing_ok=True)
        return False
    try:
        # The pidfd names whatever process had the PID when it was opened: it must still
        # be the recorded one, or the PID was recycled in between.
        if not _alive_with_start_time(pid, start_time):
            pid_file.unlink(missing_ok=True)
            return False
        _signal(pidfd, pid, signal.SIGTERM, group)
        if not _wait_exit(pidfd, pid, timeout):
            _signal(pidfd, pid, signal.SIGKILL, group)
            if not _wait_exit(pidfd, pid, 10):
                raise TimeoutError(f"PID {pid} (see {pid_file}) did not exit 10 s after SIGKILL")
    finally:
        os.close(pidfd)
    pid_file.unlink(missing_ok=True)
    return True


# --------------------------------------------------------------------------- insides


def _read_record(pid_file: Path) -> tuple[int, int] | None:
    """(PID, start time) from a PID file, or None if missing or not in that form."""
    try:
        fields = pid_file.read_text().split()
        pid, start_time = int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None
    return (pid, start_time) if pid > 0 else None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process from /proc/<pid>/stat, None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold ") ": split after
    # the last one. What follows starts at field 3 (state); field 22 is the start time.
    try:
        fields = stat.rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _alive_with_start_time(pid: int, start_time: int | None) -> bool:
    """A live, non-zombie process has `pid` (and `start_time`, unless None)."""
    stat = _stat(pid)
    if stat is None or (start_time is not None and stat[1] != start_time):
        return False
    if stat[0] in ("Z", "X"):
        _reap(pid)
        return False
    return True


def _reap(pid: int) -> None:
    """Collect the exit status of a child we started; others are left to their parent."""
    proc = _children.get(pid)
    if proc is not None and proc.poll() is not None:
        del _children[pid]


def _signal(pidfd: int, pid: int, sig: int, group: bool) -> None:
    if group and not _exited(pidfd):
        # While the leader lives its PID is its group's ID and cannot be recycled.
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
    try:
        signal.pidfd_send_signal(pidfd, sig)
    except ProcessLookupError:
        pass  # exited in the meantime


def _exited(pidfd: int) -> bool:
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _wait_exit(pidfd: int, pid: int, timeout: float) -> bool:
    """Wait until the process behind `pidfd` has exited; reap it if we started it."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    if not poller.poll(max(timeout, 0) * 1000):
        return False
    proc = _children.pop(pid, None)
    if proc is not None:
        proc.wait()
    # Otherwise it is not our child (init reaps it), or it is someone else's Popen's.
    return True
