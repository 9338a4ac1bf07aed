"""Event-time windows: a topic's days (or hours), in UTC, as half-open millisecond spans.

A record's event time is its Kafka timestamp in milliseconds since the epoch: the producer's
(CreateTime) or the broker's (LogAppendTime). A record without one (Kafka's -1, archived as
null) belongs to no window. No Dagster imports.
"""

from __future__ import annotations

from datetime import datetime, timezone

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
GRAINS = {"day": DAY_MS, "hour": HOUR_MS}


def window_ms(grain: str) -> int:
    """A window's length: `day` or `hour`."""
    try:
        return GRAINS[grain]
    except KeyError:
        raise ValueError(f"a time window is `day` or `hour`, got {grain!r}") from None


def start_of(ts_ms: int, length_ms: int) -> int:
    """The start of the window holding `ts_ms` (floor: a negative time, before 1970, too)."""
    return ts_ms - ts_ms % length_ms


def key(start_ms: int, length_ms: int) -> str:
    """The window's name, as Dagster's daily and hourly partitions spell it: `2026-11-27`, `2026-11-27-13:00`."""
    t = datetime.fromtimestamp(start_ms / 1000, tz=timezone.utc)
    return t.strftime("%Y-%m-%d") if length_ms == DAY_MS else t.strftime("%Y-%m-%d-%H:%M")


def parse(window_key: str, length_ms: int) -> tuple[int, int]:
    """The window `[start, end)` in milliseconds of a key `key` gives."""
    fmt = "%Y-%m-%d" if length_ms == DAY_MS else "%Y-%m-%d-%H:%M"
    try:
        t = datetime.strptime(window_key, fmt).replace(tzinfo=timezone.utc)
    except ValueError:
        raise ValueError(f"{window_key!r} is not a window of this topic: write it as "
                         f"{'2026-11-27' if length_ms == DAY_MS else '2026-11-27-13:00'} (UTC)") from None
    start = int(t.timestamp() * 1000)
    if start % length_ms:
        raise ValueError(f"{window_key!r} does not start a window of {length_ms // HOUR_MS} h")
    return start, start + length_ms
