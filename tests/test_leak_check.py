"""The suite's own last check: a session that leaves a process running fails and names it.

A nested pytest session loads tests/conftest.py as a plugin and runs one test that starts a
process in its own session (so no process-group clean-up would find it) and forgets it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)


def _alive_with_cmdline(cmdline: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == cmdline:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_session_that_leaves_a_process_running_fails_naming_it_and_stops_it(tmp_path):
    seconds = str(3000 + uuid.uuid4().int % 1000)  # a command line no one else runs now
    (tmp_path / "test_leaky.py").write_text(
        "import subprocess\n\n\n"
        "def test_forgets_a_process():\n"
        f"    subprocess.Popen(['sleep', '{seconds}'], start_new_session=True)\n")
    # The session's end waits 2 s, not 30, for the forgotten process to exit by itself (it never does).
    # (conftest.LEAK_GRACE_VARIABLE; by name: a later conftest.py, tests/exporter's, is `conftest` then.)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "PYTEST_MATOS_LEAK_GRACE_S": "2"}
    nested = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "test_leaky.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    out = nested.stdout + nested.stderr
    assert "1 passed" in out, out[-3000:]  # the test itself passed ...
    assert nested.returncode == 1, out[-3000:]  # ... the session did not
    assert "PROCESSES LEFT RUNNING by this test session (now stopped)" in out, out[-3000:]
    assert f"sleep {seconds}" in out, out[-3000:]
    assert _alive_with_cmdline(f"sleep\0{seconds}\0".encode()) == []  # and it was stopped


def test_a_session_that_stops_what_it_started_passes(tmp_path):
    (tmp_path / "test_tidy.py").write_text(
        "import subprocess\n\n\n"
        "def test_stops_its_process():\n"
        "    p = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
        "    p.kill()\n"
        "    p.wait()\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    nested = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "test_tidy.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=500)
    out = nested.stdout + nested.stderr
    assert nested.returncode == 0 and "PROCESSES LEFT RUNNING" not in out, out[-3000:]
