"""Which of a topic's windows (days, or hours) an expiry run expired: those that end at or before its cutoff.

A window wholly before the cutoff holds no archived record any more: the days asset shows it as
expired (jobs/expire.py reports it, assets/windows.py says so when it is materialised). Only the
windows that expired since the previous run are reported: a handful a day, whatever the age.
No Dagster imports.
"""

from __future__ import annotations

from matos_dagster.core.days import windows
from matos_dagster.core.topics import TopicConfig


def expired(topic: TopicConfig, cutoff_ms: int, previous_ms: int | None) -> list[str]:
    """The keys of the windows that end in `(previous_ms, cutoff_ms]` (from the first window when None)."""
    if topic.time_window == "none":
        return []
    length = windows.window_ms(topic.time_window)
    first = windows.parse(topic.windows_start, windows.DAY_MS)[0]
    start = first if previous_ms is None else max(first, windows.start_of(previous_ms, length))
    out = []
    while start + length <= cutoff_ms:
        if previous_ms is None or start + length > previous_ms:
            out.append(windows.key(start, length))
        start += length
    return out


def is_expired(topic: TopicConfig, window_key: str, cutoff_ms: int | None) -> bool:
    return cutoff_ms is not None and windows.parse(window_key, windows.window_ms(topic.time_window))[1] <= cutoff_ms
