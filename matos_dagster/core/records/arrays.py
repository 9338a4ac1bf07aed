"""Arrow arrays from Python values and back to numpy, without importing pandas.

pyarrow imports pandas (when it is installed) the first time it converts Python or numpy
values: `pa.array`, `pa.scalar`, `fill_null(x, 0)` and `Array.to_numpy` all ask pandas
whether the value is one of its own. In a Spark Python worker that costs about 30 MiB of
memory (PSS) per worker for a library the archive never uses. These build the same arrays
from raw buffers (`Array.from_buffers`), which asks nothing. No Dagster imports.
"""

from __future__ import annotations

import operator
from itertools import repeat
from typing import Sequence

import numpy as np
import pyarrow as pa

_NUMPY = {pa.int8(): np.int8, pa.int32(): np.int32, pa.int64(): np.int64}


def numbers(values: Sequence[int] | np.ndarray, type: pa.DataType) -> pa.Array:
    """An array of `type` (int8, int32 or int64) holding `values`, none of them null."""
    data = np.ascontiguousarray(values, dtype=_NUMPY[type])
    return pa.Array.from_buffers(type, len(data), [None, pa.py_buffer(data)])


def optional_numbers(values: Sequence[int | None], type: pa.DataType) -> pa.Array:
    """An array of `type` (int8, int32 or int64) holding `values`; None is null."""
    if None not in values:
        return numbers(values, type)
    n = len(values)
    valid = np.fromiter(map(operator.is_not, values, repeat(None)), dtype=bool, count=n)
    data = np.fromiter((0 if v is None else v for v in values), dtype=_NUMPY[type], count=n)
    return pa.Array.from_buffers(type, n, [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(data)],
                                 null_count=n - int(valid.sum()))


def zero(type: pa.DataType) -> pa.Scalar:
    """0 as an Arrow scalar of `type` (for `fill_null`, which would convert a Python 0)."""
    return numbers([0], type)[0]


def binaries(values: Sequence[bytes | None], type: pa.DataType = pa.binary()) -> pa.Array:
    """An array of `type` (binary or string, whose values are then UTF-8 bytes); None is null."""
    n = len(values)
    # C-level passes over the list (map, join): this runs once per column of every chunk the
    # Python reader seals, so it is as fast as the `pa.array` it replaces.
    valid = None
    try:
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    except TypeError:  # len(None): there are nulls
        valid = np.fromiter(map(operator.is_not, values, repeat(None)), dtype=bool, count=n)
        values = [b"" if v is None else v for v in values]
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{offsets[-1]} bytes do not fit one {type} array (2 GiB at most)")
    nulls = 0 if valid is None else n - int(np.count_nonzero(valid))
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(type, n, [validity, pa.py_buffer(offsets.astype(np.int32)),
                                           pa.py_buffer(b"".join(values))], null_count=nulls)


def strings(values: Sequence[str | None]) -> pa.Array:
    """A string array; None is null."""
    return binaries([None if v is None else v.encode() for v in values], pa.string())


def to_numpy(array: pa.Array) -> np.ndarray:
    """The values of an int32 or int64 array without nulls, as numpy sees them (no copy)."""
    if array.null_count:
        raise ValueError("to_numpy takes arrays without nulls (fill them first)")
    dtype = np.dtype(_NUMPY[array.type])
    if len(array) == 0:
        return np.zeros(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def _validity(valid: np.ndarray | None) -> pa.Buffer | None:
    return None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))


def indices(values: np.ndarray, valid: np.ndarray | None = None, type: pa.DataType = pa.int64()) -> pa.Array:
    """Integers (int64, as `take` wants them, or int32) from numpy; where `valid` is False, null."""
    data = np.ascontiguousarray(values, _NUMPY[type])
    nulls = 0 if valid is None else len(data) - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(type, len(data), [_validity(valid) if nulls else None, pa.py_buffer(data)],
                                 null_count=nulls)


def booleans(values: np.ndarray) -> pa.Array:
    """A numpy bool array as an Arrow one, none null."""
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, _validity(values)])


def to_bools(array: pa.Array) -> np.ndarray:
    """A boolean Arrow array without nulls as numpy bools (its bits unpacked)."""
    bits = np.frombuffer(array.buffers()[1], np.uint8)
    return np.unpackbits(bits, bitorder="little")[array.offset:array.offset + len(array)].astype(bool)
