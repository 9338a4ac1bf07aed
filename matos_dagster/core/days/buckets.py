"""What one archived object or range holds of each hour: the unit the day and hour windows are
summed from, so deciding a window never reads records again.

`{hour_start_ms: [records, bytes, first_offset, last_offset, max_timestamp]}`; records without a
timestamp are counted apart (`untimed`). No Dagster imports.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.days.windows import HOUR_MS
from matos_dagster.core.records import arrays as arrow_arrays

Buckets = dict[int, list[int]]


def of_records(timestamps: pa.Array, offsets: pa.Array, sizes: np.ndarray) -> tuple[Buckets, int]:
    """The hours of these records (ms timestamps, null: none; their offsets; their bytes), and how
    many have no timestamp. Arrow buffers read as numpy (arrays.py): nothing that imports pandas
into a Spark worker."""
    if isinstance(timestamps, pa.ChunkedArray):
        timestamps, offsets = timestamps.combine_chunks(), offsets.combine_chunks()
    ts = pc.cast(timestamps, pa.int64())
    timed = _valid(ts)
    untimed = int(len(ts) - timed.sum())
    t = arrow_arrays.to_numpy(pc.fill_null(ts, arrow_arrays.zero(pa.int64())))[timed]
    if not len(t):
        return {}, untimed
    o = arrow_arrays.to_numpy(pc.cast(offsets, pa.int64()))[timed]
    b = np.asarray(sizes, dtype=np.int64)[timed]
    hour = t - np.mod(t, HOUR_MS)  # floor, also before 1970
    order = np.argsort(hour, kind="stable")
    hour, t, o, b = hour[order], t[order], o[order], b[order]
    starts = np.flatnonzero(np.r_[True, hour[1:] != hour[:-1]])
    counts = np.diff(np.r_[starts, len(hour)])
    out = {}
    for h, n, nb, lo, hi, mx in zip(hour[starts].tolist(), counts.tolist(), np.add.reduceat(b, starts).tolist(),
                                    np.minimum.reduceat(o, starts).tolist(), np.maximum.reduceat(o, starts).tolist(),
                                    np.maximum.reduceat(t, starts).tolist()):
        out[h] = [n, nb, lo, hi, mx]
    return out, untimed


def _valid(a: pa.Array) -> np.ndarray:
    """Which values are not null, from the validity bitmap (no `to_numpy` of a boolean array,
    which imports pandas)."""
    if a.null_count == 0:
        return np.ones(len(a), dtype=bool)
    bits = np.unpackbits(np.frombuffer(a.buffers()[0], np.uint8), bitorder="little")
    return bits[a.offset:a.offset + len(a)].astype(bool)


def merge(*parts: Buckets) -> Buckets:
    """The hours of several objects (or ranges) as one."""
    out: Buckets = {}
    for part in parts:
        for h, (n, nb, lo, hi, mx) in part.items():
            if h in out:
                a = out[h]
                out[h] = [a[0] + n, a[1] + nb, min(a[2], lo), max(a[3], hi), max(a[4], mx)]
            else:
                out[h] = [n, nb, lo, hi, mx]
    return out


def to_json(buckets: Buckets) -> dict[str, list[int]]:
    return {str(h): list(v) for h, v in sorted(buckets.items())}


def from_json(doc: dict) -> Buckets:
    return {int(h): [int(x) for x in v] for h, v in doc.items()}
