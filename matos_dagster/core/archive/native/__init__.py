"""The native slice reader (slice_reader.c), loaded through ctypes, and why it is not used if not.

`available()` says whether it can be used here; `SliceReader` reads one slice as Arrow record
batches (records.SCHEMA), with no Python object per record. Built by the package build where
librdkafka's header is (setup.py), by `make install`, or by `python -m
matos_dagster.core.archive.native.build`. `MATOS_NATIVE_READER=false` turns it off.
No Dagster imports.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pyarrow as pa

from matos_dagster.core import settings

LIBRARY = Path(__file__).resolve().parent / "_slice_reader.so"

SR_DONE, SR_CHUNK, SR_OBJECT_END = 0, 1, 2
SR_KAFKA_ERROR, SR_TOO_LARGE, SR_STUCK, SR_BAD_RECORD, SR_NO_MEMORY = -1, -2, -3, -4, -5


class _Result(ctypes.Structure):
    _fields_ = [
        ("rows", ctypes.c_int64), ("nbytes", ctypes.c_int64), ("largest", ctypes.c_int64),
        ("first_offset", ctypes.c_int64), ("last_offset", ctypes.c_int64),
        ("min_ts", ctypes.c_int64), ("max_ts", ctypes.c_int64),
        ("has_ts", ctypes.c_int32), ("object_end", ctypes.c_int32),
        ("err_code", ctypes.c_int32), ("pad", ctypes.c_int32),
        ("err_offset", ctypes.c_int64), ("err_size", ctypes.c_int64), ("position", ctypes.c_int64),
        ("errstr", ctypes.c_char * 512),
    ]


ARROW_ARRAY_BYTES = 80  # sizeof(struct ArrowArray)

_lib: ctypes.CDLL | None = None
_why_not: str | None = None


def _load() -> None:
    global _lib, _why_not
    if _lib is not None or _why_not is not None:
        return
    if not LIBRARY.is_file():
        _why_not = f"{LIBRARY.name} is not built (python -m matos_dagster.core.archive.native.build says why)"
        return
    import confluent_kafka  # noqa: F401  (loads its librdkafka, whose functions the module calls)

    rdkafka = _loaded_librdkafka()
    if rdkafka is None:
        _why_not = "the librdkafka confluent-kafka uses is not found in this process (/proc/self/maps)"
        return
    try:
        # The module links no librdkafka (build.py): confluent-kafka's, made global, lends it its functions.
        ctypes.CDLL(rdkafka, mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as e:
        _why_not = f"{LIBRARY.name} does not load: {e}"
        return
    lib.sr_open.restype = ctypes.c_void_p
    lib.sr_open.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p), ctypes.c_int,
                            ctypes.c_char_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                            ctypes.c_double, ctypes.POINTER(_Result)]
    lib.sr_next.restype = ctypes.c_int
    lib.sr_next.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(_Result)]
    lib.sr_close.restype = None
    lib.sr_close.argtypes = [ctypes.c_void_p]
    lib.sr_release.restype = None
    lib.sr_release.argtypes = [ctypes.c_void_p]
    _lib = lib


def _loaded_librdkafka() -> str | None:
    """The file of the librdkafka this process has loaded (confluent-kafka's wheel's own, or the system's)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if Path(path).name.startswith("librdkafka"):
                    return path
    except OSError:  # no /proc: not Linux, where the reader is not built either
        pass
    return None


def disabled() -> bool:
    return not settings.flag("MATOS_NATIVE_READER")


def why_not(kafka_conf: dict[str, Any] | None = None) -> str | None:
    """None when the native reader can read with these settings; else why not (for the log)."""
    if disabled():
        return "MATOS_NATIVE_READER=false"
    _load()
    if _why_not is not None:
        return _why_not
    for k, v in (kafka_conf or {}).items():
        if not isinstance(v, (str, bool, int, float)):
            return f"the Kafka setting {k!r} is a Python object (only the Python reader passes those to librdkafka)"
    return None


def conf_strings(conf: dict[str, Any]) -> dict[str, str]:
    """librdkafka's string values, converted as confluent-kafka converts them."""
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in conf.items()}


class Chunk:
    """One chunk of an object: an Arrow record batch and what Batch needs to know of it."""

    __slots__ = ("batch", "nbytes", "largest", "first_offset", "last_offset", "min_timestamp", "max_timestamp")

    def __init__(self, batch: pa.RecordBatch, r: _Result):
        self.batch = batch
        self.nbytes = r.nbytes
        self.largest = r.largest
        self.first_offset = r.first_offset
        self.last_offset = r.last_offset
        self.min_timestamp = r.min_ts if r.has_ts else None
        self.max_timestamp = r.max_ts if r.has_ts else None


class NativeError(Exception):
    """The reader stopped: `code` is one of SR_*, `result` holds its details."""

    def __init__(self, code: int, result: _Result):
        super().__init__(result.errstr.decode(errors="replace"))
        self.code = code
        self.err_code = result.err_code
        self.offset = result.err_offset
        self.size = result.err_size
        self.position = result.position


class SliceReader:
    """A consumer of one slice `[start, end)` of a partition, read as Arrow chunks."""

    def __init__(self, conf: dict[str, Any], topic: str, partition: int, start: int, end: int,
                 max_record_bytes: int, stall_timeout_s: float, schema: pa.Schema):
        _load()
        if _lib is None:
            raise RuntimeError(f"native slice reader unavailable: {_why_not}")
        self._lib = _lib
        self._schema = schema
        items = list(conf_strings(conf).items())
        keys = (ctypes.c_char_p * len(items))(*[k.encode() for k, _ in items])
        values = (ctypes.c_char_p * len(items))(*[v.encode() for _, v in items])
        r = _Result()
        handle = self._lib.sr_open(keys, values, len(items), topic.encode(), partition, start, end,
                                   max_record_bytes, stall_timeout_s, ctypes.byref(r))
        if not handle:
            raise NativeError(SR_KAFKA_ERROR, r)
        self._handle = handle
        self._out = ctypes.create_string_buffer(ARROW_ARRAY_BYTES)

    def next(self, object_bytes: int, chunk_bytes: int) -> tuple[int, Chunk | None, bool]:
        """(SR_CHUNK, chunk, object ends) | (SR_OBJECT_END, None, True) | (SR_DONE, None, False)."""
        r = _Result()
        code = self._lib.sr_next(self._handle, object_bytes, chunk_bytes, self._out, ctypes.byref(r))
        if code == SR_CHUNK:
            struct = pa.RecordBatch._import_from_c(ctypes.addressof(self._out), self._schema)
            return code, Chunk(struct, r), bool(r.object_end)
        if code in (SR_DONE, SR_OBJECT_END):
            return code, None, code == SR_OBJECT_END
        raise NativeError(code, r)

    def close(self) -> None:
        if self._handle:
            self._lib.sr_close(self._handle)
            self._handle = None
