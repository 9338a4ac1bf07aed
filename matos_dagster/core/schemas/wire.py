"""The Confluent wire format: split a framed key or value into schema id, message indexes, payload.

    byte 0      magic byte 0
    bytes 1-4   the schema id, big-endian
    then        Protobuf only: the message indexes (which message of the schema's file)
    then        the payload: Avro binary, Protobuf bytes, or JSON text

The message indexes are Confluent's encoding, matched to confluent_kafka's `SchemaId` (its
`_read_index_array`): a zigzag varint count, then that many zigzag varints, a path of
positions in the .proto file (top-level message, then nested ones). A count of 0 is the
shortcut for [0], the file's first message, the most common case, in one byte.

A value that is not framed is told by a reason, never an exception: it is a bad record, and
its raw bytes stay in the archive whatever happens here.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

MAGIC = 0
MAGIC_GUID = 1  # a 16-byte schema GUID instead of the id (confluent-kafka 2.11+): not read yet
HEADER = 5
MAX_INDEXES = 100_000  # confluent_kafka refuses longer index arrays: a corrupt count, not a message path
_MAX_VARINT = 10  # bytes of a 64-bit varint
_MAX_ID = 2**31 - 1  # the registry's ids are Java ints


class Framed(NamedTuple):
    schema_id: int
    message_indexes: tuple[int, ...]  # () unless split with protobuf=True
    payload: bytes


def split(value: bytes, protobuf: bool = False) -> Framed | str:
    """The parts of a framed value, or the reason it is not one.

    Reasons: "empty", "no magic byte", "too short: ...", "bad schema id ...",
    "bad message indexes: ..." (Protobuf: a truncated or overlong varint, a bad count or index).
    """
    if not value:
        return "empty"
    if value[0] != MAGIC:
        return "magic byte 1 (a schema GUID) not supported" if value[0] == MAGIC_GUID else "no magic byte"
    if len(value) < HEADER:
        return f"too short: {len(value)} of the header's {HEADER} bytes"
    (schema_id,) = struct.unpack_from(">I", value, 1)
    if schema_id > _MAX_ID:
        return f"bad schema id {schema_id}"
    if not protobuf:
        return Framed(schema_id, (), bytes(value[HEADER:]))
    indexes = _indexes(value, HEADER)
    if isinstance(indexes, str):
        return f"bad message indexes: {indexes}"
    path, end = indexes
    return Framed(schema_id, path, bytes(value[end:]))


def frame(schema_id: int, payload: bytes, message_indexes: list[int] | tuple[int, ...] | None = None) -> bytes:
    """A framed value, as confluent_kafka's serializers write it (message indexes for Protobuf)."""
    out = bytearray(struct.pack(">bI", MAGIC, schema_id))
    if message_indexes is not None:
        if list(message_indexes) == [0]:
            out.append(0)  # the shortcut, as Confluent writes it
        else:
            out += zigzag_varint(len(message_indexes))
            for i in message_indexes:
                out += zigzag_varint(i)
    return bytes(out + payload)


def _indexes(value: bytes, at: int) -> tuple[tuple[int, ...], int] | str:
    count = _varint(value, at)
    if isinstance(count, str):
        return count
    n, at = count
    if n < 0 or n > MAX_INDEXES:
        return f"count {n}"
    if n == 0:
        return (0,), at
    path = []
    for _ in range(n):
        index = _varint(value, at)
        if isinstance(index, str):
            return index
        i, at = index
        if i < 0:
            return f"negative index {i}"
        path.append(i)
    return tuple(path), at


def _varint(value: bytes, at: int) -> tuple[int, int] | str:
    """A zigzag varint at `at`: (value, the position after it), or what is wrong with it."""
    result = shift = 0
    for k in range(_MAX_VARINT):
        if at + k >= len(value):
            return "truncated varint"
        b = value[at + k]
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), at + k + 1
    return f"varint longer than {_MAX_VARINT} bytes"


def zigzag_varint(v: int) -> bytes:
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v & ~0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)
