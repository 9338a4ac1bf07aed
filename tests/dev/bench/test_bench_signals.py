"""A bench stopped with SIGTERM still stops what it started (its `finally` blocks run)."""

from __future__ import annotations

import signal
import subprocess
import sys

PROGRAM = """
import time
from matos_dev.bench import unwind_on_sigterm
unwind_on_sigterm()
try:
    print("started", flush=True)
    time.sleep(120)
finally:
    print("servers stopped", flush=True)
"""


def test_sigterm_unwinds_the_bench_so_its_servers_are_stopped():
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "started"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "servers stopped" in out
    assert proc.returncode == 128 + signal.SIGTERM
