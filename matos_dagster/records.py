"""Kafka records as Arrow columns, written as Parquet (zstd) or JSON Lines (gzip).

One row a record, nothing lost: key and value stay bytes (null stays null), headers keep
their order and repeated keys. Output is deterministic: the same records always give the
same bytes (no wall-clock time anywhere), which is what makes a retried range rewrite
byte-identical objects. No Dagster imports.
"""

from __future__ import annotations

import base64
import gzip
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

# confluent_kafka.TIMESTAMP_NOT_AVAILABLE / _CREATE_TIME / _LOG_APPEND_TIME
TIMESTAMP_TYPES = {0: "NotAvailable", 1: "CreateTime", 2: "LogAppendTime"}

HEADER = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("timestamp_type", pa.string(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.field("item", HEADER, nullable=False))),
    ]
)


HEADERS = pa.list_(pa.field("item", HEADER, nullable=False))
# Timestamp type names by confluent-kafka's number, for `Array.take`.
_TYPE_NAMES = pa.array([TIMESTAMP_TYPES[i] for i in range(len(TIMESTAMP_TYPES))], pa.string())


class Batch:
    """Records gathered column by column until they are written out as one object.

    `add` runs once per record, so it only appends: headers go to one flat list (with the
    index where each record's end), and timestamp types stay numbers. Every `chunk_bytes` of
    records those lists become one Arrow record batch, built in C, and are emptied: Python
    objects per record (about 180 bytes each beyond the data) are held for one chunk only,
    not for the whole object, so a task's peak stays near two objects' worth of Arrow data
    (the chunks, then one contiguous copy of them to write). The written bytes do not depend
    on the chunking: `table()` combines the chunks into the arrays one build would give.
    """

    def __init__(self, topic: str, partition: int, chunk_bytes: int = 4 * 1024**2):
        self.topic = topic
        self.partition = partition
        self.chunk_bytes = chunk_bytes
        self._chunks: list[pa.RecordBatch] = []
        self._rows = 0  # rows in the chunks
        self._new_lists()
        self.nbytes = 0
        self._chunk_start_nbytes = 0
        self.largest = 0  # the largest record's size (a restore checks it against the target)
        self.first_offset: int | None = None
        self.last_offset: int | None = None
        self.min_timestamp: int | None = None
        self.max_timestamp: int | None = None

    def _new_lists(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.timestamp_types: list[int] = []  # confluent-kafka's numbers, named in _seal()
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.header_pairs: list[tuple[str, bytes | None]] = []
        self.header_ends: list[int] = []  # record i's headers end at header_pairs[header_ends[i]]

    def __len__(self) -> int:
        return self._rows + len(self.offsets)

    def add(self, offset: int, ts_type: int, ts: int, key, value, headers, size: int) -> None:
        self.offsets.append(offset)
        self.timestamps.append(ts if ts_type else None)
        self.timestamp_types.append(ts_type)
        self.keys.append(key)
        self.values.append(value)
        if headers:
            self.header_pairs.extend(headers)
        self.header_ends.append(len(self.header_pairs))
        self.nbytes += size
        if size > self.largest:
            self.largest = size
        if self.nbytes - self._chunk_start_nbytes >= self.chunk_bytes:
            self._seal()

    def _seal(self) -> None:
        """Turn the records gathered in Python lists into one Arrow record batch."""
        n = len(self.offsets)
        if not n:
            return
        if self.first_offset is None:
            self.first_offset = self.offsets[0]
        self.last_offset = self.offsets[-1]
        known = [t for t in self.timestamps if t is not None]
        if known:
            lo, hi = min(known), max(known)
            self.min_timestamp = lo if self.min_timestamp is None else min(self.min_timestamp, lo)
            self.max_timestamp = hi if self.max_timestamp is None else max(self.max_timestamp, hi)
        types = self.timestamp_types
        if set(types) <= set(range(len(TIMESTAMP_TYPES))):
            type_names = _TYPE_NAMES.take(pa.array(types, pa.int8()))
        else:  # a number this code does not know
            type_names = pa.array([TIMESTAMP_TYPES.get(t, "NotAvailable") for t in types], pa.string())
        header_keys, header_values = zip(*self.header_pairs) if self.header_pairs else ((), ())
        headers = pa.ListArray.from_arrays(
            pa.array([0, *self.header_ends], pa.int32()),
            pa.StructArray.from_arrays(
                [pa.array(header_keys, pa.string()), pa.array(header_values, pa.binary())], fields=list(HEADER)
            ),
            type=HEADERS,
        )
        self._chunks.append(pa.RecordBatch.from_arrays(
            [
                pa.array([self.topic] * n, pa.string()),
                pa.array([self.partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.timestamp("ms", tz="UTC")),
                type_names,
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                headers,
            ],
            schema=SCHEMA,
        ))
        self._rows += n
        self._chunk_start_nbytes = self.nbytes
        self._new_lists()

    def table(self) -> pa.Table:
        """The records as one table of contiguous arrays (the chunks are released)."""
        self._seal()
        chunks, self._chunks = self._chunks, []
        table = pa.Table.from_batches(chunks, schema=SCHEMA)
        del chunks
        # One contiguous copy: Parquet's bytes depend on how a column is chunked, and these
        # must be the bytes one build of the whole object gives (a retry rewrites them exactly).
        return table.combine_chunks()

    def stats(self) -> dict:
        self._seal()
        return {
            "records": len(self),
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "min_timestamp": self.min_timestamp,
            "max_timestamp": self.max_timestamp,
        }


def encode(table: pa.Table, fmt: str) -> bytes:
    if fmt == "parquet":
        return to_parquet(table)
    if fmt == "jsonl":
        return to_jsonl_gz(table)
    raise ValueError(f"unknown format {fmt!r}")


def to_parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        compression="zstd",
        # Dictionary encoding pays only on the repetitive columns; on keys and values it
        # would cost time and, once the dictionary overflows, nothing else.
        use_dictionary=["topic", "timestamp_type"],
        write_statistics=["partition", "offset", "timestamp"],
    )
    return buf.getvalue()


def to_jsonl_gz(table: pa.Table) -> bytes:
    """One JSON object a line; bytes as base64; gzip with mtime 0 so the bytes are repeatable.

    `timestamp` is Kafka's milliseconds as a JSON integer, taken from the column's int64
    storage: never through a datetime (its float seconds lose a millisecond of ~0.6% of
    timestamps, and it ends at year 9999 while Kafka's go to 2**63-1).
    """
    out = io.BytesIO()
    b64 = _b64
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=6) as gz:
        cols = table.drop_columns(["timestamp"]).to_pydict()
        stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
        for i in range(table.num_rows):
            row = {
                "topic": cols["topic"][i],
                "partition": cols["partition"][i],
                "offset": cols["offset"][i],
                "timestamp": stamps[i],
                "timestamp_type": cols["timestamp_type"][i],
                "key": b64(cols["key"][i]),
                "value": b64(cols["value"][i]),
                "headers": [{"key": h["key"], "value": b64(h["value"])} for h in cols["headers"][i]],
            }
            gz.write(json.dumps(row, separators=(",", ":")).encode() + b"\n")
    return out.getvalue()


def from_jsonl_gz(data: bytes) -> pa.Table:
    """Read back what `to_jsonl_gz` wrote, as the same Arrow table."""
    unb64 = _unb64
    rows = [json.loads(line) for line in gzip.decompress(data).splitlines() if line]
    return pa.Table.from_arrays(
        [
            pa.array([r["topic"] for r in rows], pa.string()),
            pa.array([r["partition"] for r in rows], pa.int32()),
            pa.array([r["offset"] for r in rows], pa.int64()),
            # Integers straight into the int64 storage (JSON integers parse exactly).
            pa.array([r["timestamp"] for r in rows], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            pa.array([r["timestamp_type"] for r in rows], pa.string()),
            pa.array([unb64(r["key"]) for r in rows], pa.binary()),
            pa.array([unb64(r["value"]) for r in rows], pa.binary()),
            pa.array(
                [[{"key": h["key"], "value": unb64(h["value"])} for h in r["headers"]] for r in rows],
                pa.list_(pa.field("item", HEADER, nullable=False)),
            ),
        ],
        schema=SCHEMA,
    )


def decode(data: bytes, fmt: str) -> pa.Table:
    if fmt == "parquet":
        return pq.read_table(io.BytesIO(data)).cast(SCHEMA)
    if fmt == "jsonl":
        return from_jsonl_gz(data)
    raise ValueError(f"unknown format {fmt!r}")


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def _unb64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)
