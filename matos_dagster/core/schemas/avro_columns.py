"""Avro records read a column at a time: a chunk's payloads straight into Arrow arrays.

fastavro reads a record into Python objects (a dict, a str per string, a datetime per
timestamp), which `pa.array` converts again: about 30 µs for a record of 20 fields, several
times what archiving its bytes costs. Here a chunk's records are read at once, field by field,
with numpy over the chunk's bytes: every record's first field, then their second, each record's
position moving by what its own field took. Strings and bytes are not copied out one by one: an
Arrow binary array laid over the chunk's bytes, [start, end] for each record's field, is gathered
by one `take`. Unions split the records by branch; arrays and maps read their items in rounds.

Only what is read exactly as the per-record path (avro.read) reads it, with the same Arrow type.
avro.py's `_plan_columns` gives no plan for a decimal or uuid, or for items of no bytes. A record
that does anything unusual (a varint of 10 bytes, a negative length or block count, an enum or
union index out of range, a string not UTF-8, a date or time Python's datetime cannot hold, a map
key twice, bytes past its end or left after it) is not ok: decode.py reads it again with
fastavro, which says what is wrong, or reads it. No Dagster imports.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.records import arrays as arrow_arrays
from matos_dagster.core.schemas.avro_chunk import PAD, Chunk

_INT32 = (-(2**31), 2**31 - 1)
# What Python's datetime holds (fastavro makes a date, time or datetime of these logical types).
_RANGES = {
    "date": (-719_162, 2_932_896),  # days: 0001-01-01 .. 9999-12-31
    "time-millis": (0, 86_400_000 - 1), "time-micros": (0, 86_400_000_000 - 1),
    "timestamp-millis": (-62_135_596_800_000, 253_402_300_799_999),
    "timestamp-micros": (-62_135_596_800_000_000, 253_402_300_799_999_999),
}
_RANGES["local-timestamp-millis"] = _RANGES["timestamp-millis"]
_RANGES["local-timestamp-micros"] = _RANGES["timestamp-micros"]

class Unsupported(Exception):
    """A schema this reader leaves to the per-record path (avro.py `_plan_columns`)."""


# Arrays from numpy by their buffers, never `pa.array`: its first conversion imports pandas
# (records/arrays.py), which cost a Spark worker's first typed task about 0.3 s of CPU and 30 MiB
# or more of memory (the task's peak over object_bytes counts it).
def _numbers(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])


def _place(sub: pa.Array, sel: np.ndarray, n: int) -> pa.Array:
    """`sub`'s values at rows `sel` of n, null elsewhere. A null struct holds a placeholder row
    (the first value) in its fields, not nulls: Parquet needs values in non-nullable fields."""
    if len(sel) == n:
        return sub
    if len(sub) == 0:
        return pa.array([None] * n, sub.type)
    ix = np.zeros(n, np.int64)
    ix[sel] = np.arange(len(sel))
    valid = np.zeros(n, bool)
    valid[sel] = True
    if pa.types.is_struct(sub.type):
        taken = sub.take(arrow_arrays.indices(ix))
        return pa.StructArray.from_arrays([taken.field(i) for i in range(sub.type.num_fields)],
                                          fields=list(sub.type), mask=arrow_arrays.booleans(~valid))
    return sub.take(arrow_arrays.indices(ix, valid))


class Node:
    type: pa.DataType
    min_bytes = 1  # the fewest bytes a value takes

    def read(self, chunk: Chunk, rows: np.ndarray, pos: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        raise NotImplementedError


class Null(Node):
    type, min_bytes = pa.null(), 0

    def read(self, chunk, rows, pos):
        return pa.nulls(len(rows)), pos


class Boolean(Node):
    type = pa.bool_()

    def read(self, chunk, rows, pos):
        return arrow_arrays.booleans(chunk.data[pos] != 0), chunk.bound(rows, pos + 1)  # fastavro: any byte but 0 is true


class Integer(Node):
    def __init__(self, arrow_type: pa.DataType, bits: int, logical: str | None):
        self.type, self.bits, self.range = arrow_type, bits, _RANGES.get(logical) or (_INT32 if bits == 32 else None)

    def read(self, chunk, rows, pos):
        v, pos = chunk.varint(rows, pos)
        if self.range is not None:
            lo, hi = self.range
            chunk.fail(rows, (v < lo) | (v > hi))
        return _numbers(v.astype(np.int32) if self.bits == 32 else v, self.type), pos


class Floating(Node):
    def __init__(self, width: int):
        self.width, self.min_bytes = width, width
        self.type, self.dtype = (pa.float32(), "<f4") if width == 4 else (pa.float64(), "<f8")

    def read(self, chunk, rows, pos):
        raw = chunk.data[pos[:, None] + np.arange(self.width)]
        return _numbers(raw.view(self.dtype).ravel(), self.type), chunk.bound(rows, pos + self.width)


class Binary(Node):
    """bytes and string: a length, then the bytes."""

    def __init__(self, text: bool):
        self.type = pa.string() if text else pa.binary()

    def read(self, chunk, rows, pos):
        start, n, pos = self.spans(chunk, rows, pos)
        return self.gather(chunk, rows, start, n), pos

    @staticmethod
    def spans(chunk: Chunk, rows: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each record's value starts, its length, and the positions after it."""
        n, pos = chunk.varint(rows, pos)
        wrong = (n < 0) | (pos + n > chunk.ends_of(rows))
        if wrong.any():
            chunk.fail(rows, wrong)
            n = np.where(wrong, 0, n)
        return pos, n, pos + n

    def gather(self, chunk: Chunk, rows: np.ndarray, start: np.ndarray, n: np.ndarray) -> pa.Array:
        """The values at those spans of the chunk's bytes, as one array (one copy, by `take`)."""
        m = len(start)
        if m == 0:
            return pa.nulls(0, self.type)  # not pa.array([]): it imports pandas
        # Every value and the gap after it, in one array laid over the chunk's bytes: the values are
        # its even elements.
        bounds = np.empty(2 * m, np.int32)  # a chunk is a few MiB: int32 offsets
        bounds[0::2], bounds[1::2] = start, start + n
        laid = pa.Array.from_buffers(pa.binary(), 2 * m - 1, [None, pa.py_buffer(bounds), chunk.buffer])
        out = laid.take(chunk.evens(m))
        return self._text(out, chunk, rows) if self.type == pa.string() else out

    @staticmethod
    def _text(out: pa.Array, chunk: Chunk, rows: np.ndarray) -> pa.Array:
        # ASCII is UTF-8: numpy finds no byte of 0x80 or more far faster than Arrow's cast validates
        # (the cast was a fifth of reading the bench's events); the bytes are then viewed as strings
        # as the cast would give them.
        offsets, data = out.buffers()[1:3]
        if data is None or not _has_high_bit(data, np.frombuffer(offsets, np.int32)[[out.offset, out.offset + len(out)]]):
            return out.view(pa.string())
        try:
            return out.cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: those records are fastavro's to judge
            values = out.to_pylist()
            for i, v in enumerate(values):
                try:
                    v.decode("utf-8")
                except UnicodeDecodeError:
                    chunk.bad[rows[i]] = True
                    values[i] = b""
            return pa.array(values, pa.binary()).cast(pa.string())


def _has_high_bit(data: pa.Buffer, span: np.ndarray) -> bool:
    """Whether bytes span[0]..span[1] of `data` hold one of 0x80 or more (are not all ASCII)."""
    start, end = int(span[0]), int(span[1])
    return end > start and int(np.frombuffer(data, np.uint8, count=end)[start:].max()) >= 0x80


class Enum(Node):
    type = pa.string()

    def __init__(self, symbols: list[str]):
        self.symbols = arrow_arrays.strings(symbols)

    def read(self, chunk, rows, pos):
        i, pos = chunk.varint(rows, pos)
        wrong = (i < 0) | (i >= len(self.symbols))
        chunk.fail(rows, wrong)
        return self.symbols.take(arrow_arrays.indices(np.where(wrong, 0, i))), pos


class Fixed(Node):
    def __init__(self, size: int):
        self.size, self.min_bytes, self.type = size, size, pa.binary(size)

    def read(self, chunk, rows, pos):
        end = pos + self.size
        wrong = end > chunk.ends[rows]
        chunk.fail(rows, wrong)
        start = np.where(wrong, 0, pos)
        raw = chunk.data[start[:, None] + np.arange(self.size)] if self.size else np.zeros((len(rows), 0), np.uint8)
        arr = pa.Array.from_buffers(self.type, len(rows), [None, pa.py_buffer(np.ascontiguousarray(raw))])
        return arr, np.where(wrong, pos, end)


class Record(Node):
    def __init__(self, fields: list[tuple[pa.Field, Node]]):
        self.fields = fields
        self.type = pa.struct([f for f, _ in fields])
        self.min_bytes = sum(node.min_bytes for _, node in fields)

    def read(self, chunk, rows, pos):
        children = []
        for _, node in self.fields:
            child, pos = node.read(chunk, rows, pos)
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(self.type.fields)), pos


class Union(Node):
    """[null, T] is a nullable T; more branches a struct of members, the one written set."""

    def __init__(self, branches: list[Node], arrow_type: pa.DataType):
        self.branches, self.type = branches, arrow_type
        self.single = sum(not isinstance(b, Null) for b in branches) == 1

    def read(self, chunk, rows, pos):
        i, pos = chunk.varint(rows, pos)
        wrong = (i < 0) | (i >= len(self.branches))
        chunk.fail(rows, wrong)
        pos = pos.copy()
        m, members, null = len(rows), [], wrong.copy()
        for b, node in enumerate(self.branches):
            if isinstance(node, Null):
                null |= i == b
                continue
            sel = np.flatnonzero((i == b) & ~wrong)
            sub, pos[sel] = node.read(chunk, rows[sel], pos[sel])
            members.append(_place(sub, sel, m))
        if self.single:
            return members[0], pos
        return pa.StructArray.from_arrays(members, fields=list(self.type), mask=arrow_arrays.booleans(null)), pos


class Items(Node):
    """array and map: blocks of a count and that many items, until a count of 0. Read in rounds
    (every record's next item at once), then put in record order: item k of record r at
    offsets[r] + k. String and bytes items are gathered once, in that order."""

    def __init__(self, item: Node, arrow_type: pa.DataType, key: Node | None = None):
        if item.min_bytes + (key.min_bytes if key else 0) < 1:
            raise Unsupported("items of no bytes")
        self.item, self.key, self.type = item, key, arrow_type

    def read(self, chunk, rows, pos):
        m = len(rows)
        pos = pos.copy()
        seen = np.zeros(m, np.int64)  # items read per record so far
        parts: list[tuple] = []  # per round: the records, their items' ordinals, the keys, the items
        active = np.arange(m)
        while len(active):
            count, pos[active] = chunk.varint(rows[active], pos[active])
            wrong = (count < 0) | (count > chunk.ends[rows[active]] - pos[active])  # a negative count: fastavro's
            chunk.fail(rows[active], wrong)
            count = np.where(wrong, 0, count)
            active, count = active[count > 0], count[count > 0]
            for k in range(int(count.max()) if len(count) else 0):
                sel = active[count > k]
                key = None
                if self.key is not None:
                    key, pos[sel] = self._one(self.key, chunk, rows[sel], pos[sel])
                value, pos[sel] = self._one(self.item, chunk, rows[sel], pos[sel])
                parts.append((sel, seen[sel] + k, key, value))
            seen[active] += count
        offsets = np.zeros(m + 1, np.int64)
        np.cumsum(seen, out=offsets[1:])
        order = np.empty(offsets[-1], np.int64)  # for each item in record order, its place in round order
        if parts:
            order[np.concatenate([offsets[p[0]] + p[1] for p in parts])] = np.arange(offsets[-1])
        owners = rows[np.repeat(np.arange(m), seen)]
        values = self._ordered(self.item, chunk, [p[3] for p in parts], order, owners)
        offsets = arrow_arrays.indices(offsets, type=pa.int32())
        if self.key is None:
            return pa.ListArray.from_arrays(offsets, values, type=self.type), pos
        keys = self._ordered(self.key, chunk, [p[2] for p in parts], order, owners)
        _unique_keys(chunk, owners, seen, keys)
        return pa.MapArray.from_arrays(offsets, keys, values, type=self.type), pos

    @staticmethod
    def _one(node: Node, chunk: Chunk, rows: np.ndarray, pos: np.ndarray):
        if isinstance(node, Binary):  # its spans only: gathered once, in order
            start, n, pos = node.spans(chunk, rows, pos)
            return (start, n), pos
        return node.read(chunk, rows, pos)

    @staticmethod
    def _ordered(node: Node, chunk: Chunk, rounds: list, order: np.ndarray, owners: np.ndarray) -> pa.Array:
        if not rounds:
            return pa.nulls(0, node.type)
        if isinstance(node, Binary):
            start, n = (np.concatenate([r[i] for r in rounds])[order] for i in (0, 1))
            return node.gather(chunk, owners, start, n)
        return pa.concat_arrays(rounds).take(arrow_arrays.indices(order))


def _unique_keys(chunk: Chunk, owners: np.ndarray, seen: np.ndarray, keys: pa.Array) -> None:
    """A key twice in a map: fastavro's dict keeps one; fastavro reads that record. Keys of one record
    compared pair by pair (a record's keys are next to each other), their lengths first."""
    most = int(seen.max()) if len(seen) else 0
    if most < 2:
        return
    if most > 8:
        rows = np.repeat(np.arange(len(seen)), seen)
        counts = pa.table({"r": arrow_arrays.indices(rows), "k": keys}).group_by(["r", "k"]).aggregate([([], "count_all")])
        twice = arrow_arrays.to_numpy(pc.filter(counts["r"], pc.greater(counts["count_all"], 1)).combine_chunks())
        chunk.bad[owners[np.searchsorted(rows, twice)]] = True
        return
    starts = np.concatenate([[0], np.cumsum(seen)[:-1]])
    lengths = arrow_arrays.to_numpy(pc.binary_length(keys))
    for b in range(1, most):
        has = np.flatnonzero(seen > b)
        for a in range(b):
            i, j = starts[has] + a, starts[has] + b
            maybe = lengths[i] == lengths[j]
            if maybe.any():
                same = pc.equal(keys.take(arrow_arrays.indices(i[maybe])), keys.take(arrow_arrays.indices(j[maybe])))
                chunk.bad[owners[j[maybe][arrow_arrays.to_bools(same)]]] = True


def schema_ids(values: pa.Array) -> np.ndarray:
    """The schema id each value of a binary column names in the wire format (wire.py), -1 for a null
    or a value `wire.split` gives a reason for."""
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset:values.offset + n + 1]
    ids = np.full(n, -1, np.int64)
    body = values.buffers()[2]
    if body is None:
        return ids
    data = np.frombuffer(body, np.uint8)
    starts = offsets[:-1]
    framed = np.diff(offsets) >= 5
    if values.null_count:
        framed &= ~arrow_arrays.to_bools(values.is_null())
    at = starts[framed]
    header = data[at[:, None] + np.arange(5)].astype(np.int64)
    sid = (header[:, 1] << 24) | (header[:, 2] << 16) | (header[:, 3] << 8) | header[:, 4]
    ids[np.flatnonzero(framed)] = np.where((header[:, 0] == 0) & (sid <= 2**31 - 1), sid, -1)
    return ids


def read(root: Node, values: pa.Array, rows: np.ndarray, skip: int) -> tuple[pa.Array, np.ndarray]:
    """Records `rows` of a binary column (each `skip` bytes in: the wire header) read by `root`:
    their array, and which were read exactly (the others: fastavro's, see the module's doc)."""
    offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset:values.offset + len(values) + 1]
    body = values.buffers()[2]
    size = int(offsets[-1])
    data = np.empty(size + PAD, np.uint8)  # zeroed only where nothing is copied
    data[size:] = 0
    if body is not None and size:
        data[:size] = np.frombuffer(body, np.uint8, count=size)
    ends = offsets[rows + 1].astype(np.int64)
    chunk = Chunk(data, ends)
    out, pos = root.read(chunk, np.arange(len(rows)), offsets[rows].astype(np.int64) + skip)
    return out, ~chunk.bad & (pos == ends)
