"""The fault hook of the crash tests: `MATOS_FAULT=<point>` kills the process at that point.

The archive run, compaction and the Iceberg step each name their points ("after-objects",
"compact-after-manifest", "table-written", ...); a test sets the variable for one run, and the
process dies there as an OOM kill or a lost machine would, so the test can prove that the next
run repairs what was left. Unset (always, outside the tests), `at` does nothing. It is one of
settings.TEST_HOOKS: read, never documented as a setting.
"""

from __future__ import annotations

import os
import signal


def at(point: str) -> None:
    """Die here, by SIGKILL, if the tests asked for this point."""
    if os.environ.get("MATOS_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)
