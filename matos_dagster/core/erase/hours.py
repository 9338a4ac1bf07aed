"""A range's `hours` after an erasure that did not read every object of the range (key_index.py).

The manifest keeps the range's hours (per hour: records, bytes, first and last offset, latest
timestamp), not each object's. An hour's records and bytes are the old ones minus the erased
records'. Its first and last offset and latest timestamp stay, unless an erased record was that
first, last or latest: then they are taken again from the objects left that hold records of the
hour: those the erasure read (their hours are known), those it skipped that lie within the hour
(their manifest entry's first and last offset and latest timestamp are the hour's), and those it
skipped that reach into the hour from another one, which are read (rare: one or two an hour). The
result is what summing every object's records left gives. No Dagster imports.
"""

from __future__ import annotations

from typing import Callable

import pyarrow as pa

from matos_dagster.core.compact.merge import row_sizes
from matos_dagster.core.days import buckets
from matos_dagster.core.days.windows import HOUR_MS


def hours_after(doc: dict, entries: list[dict], skipped: list[dict], gone: pa.Table,
                read_hours: Callable[[dict], dict]) -> dict:
    """The range's new `hours` (JSON). `doc`: its manifest before; `entries`: the objects left (those
    read with `hours`, those `skipped` without); `gone`: the erased records; `read_hours(entry)`: an
    object's hours, read (an object read here counts as read)."""
    old = buckets.from_json(doc["hours"])
    out = dict(old)
    taken, _ = buckets.of_records(gone["timestamp"], gone["offset"], row_sizes(gone))
    again = []
    for h, (n, nb, lo, hi, mx) in taken.items():
        on, onb, olo, ohi, omx = old[h]
        out[h] = [on - n, onb - nb, olo, ohi, omx]
        if n >= on:
            del out[h]
        elif lo == olo or hi == ohi or mx == omx:
            again.append(h)
    for e in skipped:
        if any(_reaches(e, h) for h in again) and not _within(e, e["min_timestamp"] - e["min_timestamp"] % HOUR_MS):
            e["hours"] = read_hours(e)
    for h in again:
        held = [b[2:] for e in entries if e.get("hours") and (b := e["hours"].get(str(h)))]
        held += [[e["first_offset"], e["last_offset"], e["max_timestamp"]] for e in entries
                 if not e.get("hours") and _within(e, h)]
        if held:  # else no object left holds the hour: cannot be, its count is above 0
            out[h][2:] = [min(x[0] for x in held), max(x[1] for x in held), max(x[2] for x in held)]
    return buckets.to_json(out)


def _reaches(e: dict, h: int) -> bool:
    """Whether the object's timestamps reach into hour `h`."""
    return e["min_timestamp"] is not None and e["min_timestamp"] < h + HOUR_MS and h <= e["max_timestamp"]


def _within(e: dict, h: int) -> bool:
    """Whether every timestamped record of the object is of hour `h` (records without one are in no hour:
    Kafka gives every record one since its message format 1)."""
    return e["min_timestamp"] is not None and h <= e["min_timestamp"] and e["max_timestamp"] < h + HOUR_MS
