"""The bytes of a chunk of Avro records as avro_columns.py reads them: each record's end, where a
field of every record being read starts, varints read a byte at a time for every record at once,
and which records went wrong (they are read again by fastavro). No Dagster imports.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from matos_dagster.core.records import arrays as arrow_arrays

PAD = 16  # zero bytes after the chunk's bytes: a varint or a double read at a record's end stays inside


class Chunk:
    """The records being read: the chunk's bytes (padded), each record's end, which went wrong."""

    def __init__(self, data: np.ndarray, ends: np.ndarray):
        self.data = data
        self.buffer = pa.py_buffer(data)
        self.ends = ends
        self.bad = np.zeros(len(ends), bool)
        self._rows, self._ends = None, None  # the last `ends_of` (a record's fields share their rows)
        self._evens: dict[int, pa.Array] = {}

    def ends_of(self, rows: np.ndarray) -> np.ndarray:
        if rows is not self._rows:
            self._rows, self._ends = rows, self.ends[rows]
        return self._ends

    def evens(self, m: int) -> pa.Array:
        """0, 2, ..., 2m - 2: the values of a laid array (Binary.gather)."""
        if m not in self._evens:
            self._evens[m] = arrow_arrays.indices(np.arange(0, 2 * m, 2))
        return self._evens[m]

    def fail(self, rows: np.ndarray, mask: np.ndarray) -> None:
        if mask.any():
            self.bad[rows[mask]] = True

    def bound(self, rows: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Positions past their record's end fail it, and stay at the end (inside the bytes)."""
        ends = self.ends_of(rows)
        over = pos > ends
        if over.any():
            self.bad[rows[over]] = True
            pos = np.minimum(pos, ends)
        return pos

    def varint(self, rows: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Avro longs (zigzag varints) at `pos`, and the positions after them: a byte at a time,
        each round only for the varints not ended yet."""
        b = self.data[pos]
        if b.max(initial=0) < 0x80:  # every one a byte long: the common case of lengths and small numbers
            v = b.astype(np.int64)
            return (v >> 1) ^ -(v & 1), self.bound(rows, pos + 1)
        u = (b & 0x7F).astype(np.uint64)
        length = np.ones(len(pos), np.int64)
        going = np.flatnonzero(b & 0x80)
        k = 1
        while len(going):
            if k == 9:  # past 63 bits: fastavro's to read
                self.fail(rows, np.isin(np.arange(len(pos)), going))
                break
            b = self.data[pos[going] + k]
            u[going] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            length[going] += 1
            going = going[(b & 0x80) != 0]
            k += 1
        v = (u >> np.uint64(1)).astype(np.int64) ^ -(u & np.uint64(1)).astype(np.int64)
        return v, self.bound(rows, pos + length)
