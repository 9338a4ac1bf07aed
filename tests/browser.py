"""Headless Chromium for the UI tests: install it if we may, then screenshot or dump a page.

The Dagster UI is a JavaScript application, so a page's content exists only after the
browser ran its scripts and its GraphQL answers arrived: `--virtual-time-budget` lets the
page run that long (in virtual time) before the screenshot or the DOM dump is taken.
Every Chromium runs in its own session with a fresh profile folder, and is stopped by its
process group if it hangs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from helpers import missing

CHROMIUM = Path("/usr/bin/chromium")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--window-size=1600,1000",
]


def ensure_chromium() -> str:
    """The path of Chromium, installed from Debian's `chromium` package if missing.

    Installing needs root (apt-get); where it cannot be installed, the calling test is skipped
    saying how to get it, or fails under CI (helpers.missing): the UI's proof is not optional there.
    """
    if CHROMIUM.exists():
        return str(CHROMIUM)
    if os.geteuid() != 0:
        missing(f"{CHROMIUM} is missing and we are not root to install it: run `sudo apt-get install -y chromium`")
    if shutil.which("apt-get") is None:
        missing(f"{CHROMIUM} is missing and there is no apt-get to install it: install Chromium so that "
                f"{CHROMIUM} runs it (Debian's `chromium` package)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    p = subprocess.run(
        "apt-get update && apt-get install -y chromium",
        shell=True, env=env, capture_output=True, text=True, timeout=900,
    )
    if p.returncode != 0 or not CHROMIUM.exists():
        missing(f"could not install chromium with apt-get (exit {p.returncode}; run `apt-get install -y chromium` "
                f"to see why): {(p.stdout + p.stderr)[-1500:]}")
    return str(CHROMIUM)


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    argv = [ensure_chromium(), *FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"chromium did not finish within {timeout:.0f}s: {' '.join(args)}\n{err[-2000:]}")
    finally:
        try:  # the browser's helpers (zygote, renderers) are in its group too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_using(profile)  # and any that left the group (a crash handler) names its profile
        shutil.rmtree(profile, ignore_errors=True)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {' '.join(args)}\n{err[-2000:]}"
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_using(profile: str) -> None:
    """SIGKILL every process whose command line names this Chromium's profile folder: ours."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if profile.encode() in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue


def dump_dom(url: str, budget_ms: int = 15000, timeout: float = 300) -> str:
    """The page's DOM after `budget_ms` of virtual time, as HTML."""
    return _run([f"--virtual-time-budget={budget_ms}", "--dump-dom", url], timeout).stdout


def screenshot(url: str, path: Path, budget_ms: int = 15000, timeout: float = 300) -> Path:
    """A PNG of the page after `budget_ms` of virtual time."""
    path.unlink(missing_ok=True)
    _run([f"--virtual-time-budget={budget_ms}", f"--screenshot={path}", url], timeout)
    assert path.exists() and path.stat().st_size > 0, f"chromium wrote no screenshot {path}"
    return path
