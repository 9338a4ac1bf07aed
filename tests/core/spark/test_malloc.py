"""A worker gives a freed object's buffer back to the system (malloc.py).

Run in fresh processes: the threshold is process-wide, and what glibc did before the test
would change what it does in it.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

# Frees one mapped block (as a task's first uploaded object is), then allocates, touches and
# frees a 20 MiB one with a small block allocated after it; prints the MiB still resident.
PROBE = """
import sys
from matos_dagster.core.spark import malloc
from matos_dev.bench.memory import rss_self

def rss_mib():
    return rss_self() / 1024**2

if sys.argv[1] == "fixed":
    assert malloc.fix_mmap_threshold()
first = bytearray(24 * 1024**2)  # zero-filled: every page touched
del first
before = rss_mib()
block = bytearray(20 * 1024**2)
pin = bytearray(4096)  # a heap block after it, as a task's other allocations are
del block
print(rss_mib() - before)
"""


def held_mib(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return float(out.stdout)


def test_by_default_glibc_keeps_a_freed_block_once_a_larger_one_was_freed():
    # The case the fix is for: the threshold rose to 24 MiB, so the 20 MiB block came from the
    # heap and stays there when freed.
    assert held_mib("default") > 15


def test_with_the_threshold_fixed_a_freed_block_goes_back_to_the_system():
    assert held_mib("fixed") < 5


def test_fixing_it_again_is_harmless():
    # Every Python-reader task calls it; only the first call changes anything.
    code = "from matos_dagster.core.spark import malloc; print(malloc.fix_mmap_threshold(), malloc.fix_mmap_threshold())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
