"""Kafka records gathered into Arrow record batches (`SCHEMA`) as they are read: `Batch`.

The slice task adds records one by one (the Python reader) or in Arrow chunks (the native
reader); every `chunk_bytes` of records the gathered columns become one record batch, built
from buffers in C. Given the object's format, each chunk goes straight into the object's
`ObjectWriter` (objects.py), so a task holds one chunk of rows and the encoded object, never
the whole object's rows twice. Given a `Typing` (core/schemas/typed.py), each sealed chunk
gets the topic's typed columns beside its raw bytes before it is written (`ObjectTypes`): when a
chunk widens the object's type, the chunks written so far are read back and written again in it
(`_rewritten`); when a record's writer has a type the object's cannot take, the object ends
before it, and the records from there on wait in `overflow` for the next object (the slice task
starts it). Without a Typing, nothing of that is imported and the chunks are written exactly as
before. No Dagster imports.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.days import buckets
from matos_dagster.core.records import arrays as arrow_arrays
from matos_dagster.core.records.objects import ObjectWriter, row_sizes
from matos_dagster.core.records.schema import HEADER, HEADERS, SCHEMA, TIMESTAMP_TYPES

# Timestamp type names by confluent-kafka's number, for `Array.take`. Built from buffers, as
# everything a task runs here (arrow_arrays: `pa.array` would import pandas into every worker).
_TYPE_NAMES = arrow_arrays.strings([TIMESTAMP_TYPES[i] for i in range(len(TIMESTAMP_TYPES))])


class Batch:
    """Records gathered column by column until they are written out as one object.

    `add` runs once per record, so it only appends: headers go to one flat list (with the
    index where each record's end), and timestamp types stay numbers. Every `chunk_bytes` of
    records those lists become one Arrow record batch, built in C, and are emptied: Python
    objects per record (about 180 bytes each beyond the data) are held for one chunk only.
    Given `fmt`, each chunk goes straight into the object's `ObjectWriter` (encoded, then
    released), so a task holds one chunk of rows and the encoded object, not the object's
    rows; without it the chunks are kept for `table()`. The written bytes do not depend on
    the chunking (`ObjectWriter` cuts row groups by the records themselves).
    """

    def __init__(self, topic: str, partition: int, chunk_bytes: int = 4 * 1024**2, fmt: str | None = None,
                 typing=None, key_index=None):
        self.topic = topic
        self.partition = partition
        self.chunk_bytes = chunk_bytes
        self._chunks: list[pa.RecordBatch] = []
        self._fmt = fmt
        self._types = None  # the object's typed columns (ObjectTypes), for a typed topic
        if typing is not None:
            from matos_dagster.core.schemas.typed import ObjectTypes  # decoders: only where a topic is typed

            self._types = ObjectTypes(typing, topic, partition)
        # A typed object's writer waits for its schema, which its first chunk gives.
        self._writer = ObjectWriter(fmt) if fmt is not None and self._types is None else None
        self._rows = 0  # rows in the chunks
        self._new_lists()
        self.nbytes = 0
        self._chunk_start_nbytes = 0
        self.largest = 0  # the largest record's size (a restore checks it against the target)
        self._largest_kept = 0  # ...of the records in chunks (those a typed cut left out not counted)
        self.first_offset: int | None = None
        self.last_offset: int | None = None
        self.min_timestamp: int | None = None
        self.max_timestamp: int | None = None
        self.hours: buckets.Buckets = {}  # what the object holds of each hour (the days' unit)
        # Records a typed cut left for the next object (SCHEMA), not part of this one.
        self.overflow: pa.RecordBatch | None = None
        # The object's key index as its chunks come (core/erase/key_index.py `Gathered`), None for none.
        self._key_index = key_index

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

    def seal(self) -> None:
        """The records gathered so far made a chunk (typed, for a typed topic: see `overflow`)."""
        self._seal()

    def _seal(self) -> None:
        """Turn the records gathered in Python lists into one Arrow record batch."""
        n = len(self.offsets)
        if not n:
            return
        # Arrays built from buffers (arrow_arrays), not by `pa.array`, which imports pandas.
        types = self.timestamp_types
        if set(types) <= set(range(len(TIMESTAMP_TYPES))):
            type_names = _TYPE_NAMES.take(arrow_arrays.numbers(types, pa.int8()))
        else:  # a number this code does not know
            type_names = arrow_arrays.strings([TIMESTAMP_TYPES.get(t, "NotAvailable") for t in types])
        header_keys, header_values = zip(*self.header_pairs) if self.header_pairs else ((), ())
        headers = pa.ListArray.from_arrays(
            arrow_arrays.numbers([0, *self.header_ends], pa.int32()),
            pa.StructArray.from_arrays(
                [arrow_arrays.strings(header_keys), arrow_arrays.binaries(header_values)], fields=list(HEADER)
            ),
            type=HEADERS,
        )
        chunk = pa.RecordBatch.from_arrays(
            [
                arrow_arrays.strings([self.topic]).take(arrow_arrays.numbers(np.zeros(n, np.int32), pa.int32())),
                arrow_arrays.numbers(np.full(n, self.partition), pa.int32()),
                arrow_arrays.numbers(self.offsets, pa.int64()),
                arrow_arrays.optional_numbers(self.timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                type_names,
                arrow_arrays.binaries(self.keys),
                arrow_arrays.binaries(self.values),
                headers,
            ],
            schema=SCHEMA,
        )
        self._new_lists()
        self._emit(chunk)
        del chunk
        self._chunk_start_nbytes = self.nbytes

    def add_chunk(self, chunk: pa.RecordBatch, nbytes: int) -> None:
        """Records already in Arrow (the native reader's chunk, a cut's overflow) of `nbytes` record
        bytes, taken as `_seal` takes its own."""
        self._seal()
        self.nbytes += nbytes
        self._emit(chunk)
        self._chunk_start_nbytes = self.nbytes

    def _emit(self, chunk: pa.RecordBatch) -> None:
        """A sealed chunk (SCHEMA) to the object: typed first for a typed topic (which may keep
        only its first records: the rest waits in `overflow`), then into the writer, or kept for `table()`."""
        if self._types is not None:
            if self.overflow is not None:
                raise ValueError("this batch's object ended at a typed cut: its overflow starts the next one")
            chunk, rest = self._types.add(chunk)
            if rest is not None:
                self.overflow = rest
                self.nbytes -= int(row_sizes(rest).sum())
                self.largest = self._largest_kept  # the records not sealed yet: none (a cut comes at a seal)
            if not chunk.num_rows:
                return
        sizes = row_sizes(chunk)
        offsets = chunk.column("offset")
        if self.first_offset is None:
            self.first_offset = offsets[0].as_py()
        self.last_offset = offsets[-1].as_py()
        self._largest_kept = max(self._largest_kept, int(sizes.max()))
        self.largest = max(self.largest, self._largest_kept)
        stamps = pc.min_max(chunk.column("timestamp").cast(pa.int64()))
        if stamps["min"].is_valid:
            lo, hi = stamps["min"].as_py(), stamps["max"].as_py()
            self.min_timestamp = lo if self.min_timestamp is None else min(self.min_timestamp, lo)
            self.max_timestamp = hi if self.max_timestamp is None else max(self.max_timestamp, hi)
        hours, _ = buckets.of_records(chunk.column("timestamp"), offsets, sizes)
        self.hours = buckets.merge(self.hours, hours)
        if self._key_index is not None:
            self._key_index.add(chunk.column("key"))
        self._rows += chunk.num_rows
        self._keep(chunk)

    def _keep(self, chunk: pa.RecordBatch) -> None:
        if self._fmt is not None:
            if self._writer is None:
                self._writer = ObjectWriter(self._fmt, chunk.schema)
            elif self._types is not None and not chunk.schema.equals(self._writer.schema, check_metadata=True):
                self._writer = self._rewritten(chunk.schema)
            self._writer.write(chunk)
            return
        if self._types is not None and self._chunks and not chunk.schema.equals(self._chunks[0].schema,
                                                                                check_metadata=True):
            self._chunks = [self._types.conform(c) for c in self._chunks]
        self._chunks.append(chunk)

    def _rewritten(self, schema: pa.Schema) -> ObjectWriter:
        """A writer of `schema` holding the object's chunks so far, read back from the old writer's
        bytes a row group at a time and conformed to it. The bytes are those one writer of `schema`
        writes for the same rows: row groups are cut by the rows alone."""
        import pyarrow.parquet as pq

        written = pq.ParquetFile(pa.BufferReader(self._writer.finish()))
        self._writer = None
        out = ObjectWriter(self._fmt, schema)
        for i in range(written.num_row_groups):
            for b in written.read_row_group(i).to_batches():
                out.write(self._types.conform(b))
        return out

    def _end(self) -> None:
        """The records gathered so far sealed."""
        self._seal()

    @property
    def schema(self) -> pa.Schema:
        """The object's Arrow schema: SCHEMA, or with a topic's typed columns once they are known."""
        return SCHEMA if self._types is None or self._types.schema is None else self._types.schema

    def key_index(self) -> dict | None:
        """The object's manifest entry `key_index`, None without an erasure key."""
        return None if self._key_index is None else self._key_index.index()

    def typed(self) -> dict | None:
        """The object's decode counts per typed side (its manifest entry's `typed`), None if untyped."""
        return None if self._types is None else self._types.stats()

    def writer(self, fmt: str) -> "ObjectWriter":
        """The batch's records in an `ObjectWriter` of `fmt`, ready to `finish` (kept chunks are
        written and released one by one)."""
        self._end()
        if self._writer is None:
            self._writer = ObjectWriter(fmt, self.schema)
        elif self._writer.fmt != fmt:
            raise ValueError(f"this batch is being written as {self._writer.fmt}, not {fmt}")
        while self._chunks:
            self._writer.write(self._chunks.pop(0))
        return self._writer

    def table(self) -> pa.Table:
        """The records as one table of contiguous arrays (the chunks are released)."""
        if self._writer is not None:
            raise ValueError("this batch's records went into its ObjectWriter as they came; there is no table")
        self._end()
        chunks, self._chunks = self._chunks, []
        table = pa.Table.from_batches(chunks, schema=self.schema)
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
            "hours": buckets.to_json(self.hours),
        }
