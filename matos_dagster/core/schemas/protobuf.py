"""Protobuf: a schema's descriptors, a message's Arrow type, and the converter of parsed messages to it.

A registered schema becomes a FileDescriptor the way confluent-kafka's deserializer makes it
(its `_init_pool` for the well-known types, `_str_to_proto` for each serialized file, the
references first); the wire format's message indexes name a message of that file. Type and
converter come from one walk of the message descriptor, so they cannot disagree.

The mapping, and why where there was a choice:
    message -> struct, fields by their .proto names
    a field with presence (message fields, oneof members, proto3 `optional`, proto2 fields) is
        nullable and null when unset; other scalars are never null (proto3: unset is the default)
    repeated -> list; map<K, V> -> map<K, V>, entries sorted by key: a map has no order in
        Protobuf, and Python's (upb) iterates one in an order that changes from process to process
    enum -> string, the value's name (an unknown number, possible in proto3's open enums,
        as its decimal text)
    google.protobuf.Timestamp -> timestamp('ns', 'UTC'): Timestamp counts nanoseconds, 'ns'
        keeps them all (its range, 1677 to 2262, is the price: a value outside is a bad record)
    google.protobuf.Duration -> duration('ns'), for the same reason
    google.protobuf.*Value wrappers -> the nullable scalar they wrap
    google.protobuf.Struct / Value / ListValue -> string, their JSON text (they nest without end)
    int32, sint32, sfixed32 -> int32; uint32, fixed32 -> uint32; int64, sint64, sfixed64 -> int64;
    uint64, fixed64 -> uint64; float -> float32; double -> float64; bool; string; bytes -> binary
A message that contains itself is refused with a SchemaError naming it, as Avro's records are.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, NamedTuple

import pyarrow as pa
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError

from matos_dagster.core.schemas.errors import SchemaError
from matos_dagster.core.schemas.sources import PROTOBUF, Schema

F = FieldDescriptor
SCALARS = {
    F.TYPE_DOUBLE: pa.float64(), F.TYPE_FLOAT: pa.float32(), F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(),
    F.TYPE_BYTES: pa.binary(), F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(), F.TYPE_SFIXED32: pa.int32(),
    F.TYPE_UINT32: pa.uint32(), F.TYPE_FIXED32: pa.uint32(), F.TYPE_INT64: pa.int64(), F.TYPE_SINT64: pa.int64(),
    F.TYPE_SFIXED64: pa.int64(), F.TYPE_UINT64: pa.uint64(), F.TYPE_FIXED64: pa.uint64(),
}
WRAPPERS = {
    "google.protobuf.DoubleValue": pa.float64(), "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(), "google.protobuf.UInt64Value": pa.uint64(),
    "google.protobuf.Int32Value": pa.int32(), "google.protobuf.UInt32Value": pa.uint32(),
    "google.protobuf.BoolValue": pa.bool_(), "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
JSON_TEXT = ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue")
_NANOS = 10**9

Convert = Callable[[Any], Any] | None


class Compiled(NamedTuple):
    descriptor: Descriptor
    message_class: type
    type: pa.DataType
    convert: Callable[[Any], dict]


@lru_cache(maxsize=256)
def file_of(schema: Schema) -> FileDescriptor:
    """The schema's FileDescriptor, in a pool of its own with its references (cached per process)."""
    from confluent_kafka.schema_registry.common.protobuf import _init_pool, _str_to_proto

    if schema.schema_type != PROTOBUF:
        raise SchemaError(f"schema {schema.id} is {schema.schema_type}, not PROTOBUF")
    pool = DescriptorPool()
    _init_pool(pool)
    added: set[str] = set()

    def add(s: Schema, name: str) -> None:
        for ref in s.references:
            if ref.name not in added:
                add(ref.schema, ref.name)
        try:
            pool.Add(_str_to_proto(name, s.text))
        except Exception as e:  # not base64, not a FileDescriptorProto, a missing import
            raise SchemaError(f"schema {schema.id}: {name} is not a usable serialized FileDescriptorProto "
                              f"(Protobuf schemas are read as the registry's format=serialized): {e}") from None
        added.add(name)

    add(schema, "default")  # the name confluent-kafka gives a registered schema's own file
    return pool.FindFileByName("default")


def message_at(file: FileDescriptor, indexes: tuple[int, ...] | list[int]) -> Descriptor:
    """The message the wire format's indexes name: top-level position, then nested positions."""
    candidates = list(file.message_types_by_name.values())
    desc = None
    for i in indexes:
        if i >= len(candidates):
            raise LookupError(f"message indexes {list(indexes)} name no message")
        desc = candidates[i]
        candidates = list(desc.nested_types)
    if desc is None:
        raise LookupError("no message indexes")
    return desc


def message_named(file: FileDescriptor, full_name: str) -> Descriptor:
    try:
        return file.pool.FindMessageTypeByName(full_name)
    except KeyError:
        raise LookupError(f"no message {full_name}") from None


@lru_cache(maxsize=256)
def compile(descriptor: Descriptor) -> Compiled:
    arrow, convert = _message(descriptor, ())
    return Compiled(descriptor, message_factory.GetMessageClass(descriptor), arrow, convert)


def read(payload: bytes, compiled: Compiled) -> dict:
    """One message parsed and converted for Arrow; ValueError if the bytes are not one."""
    msg = compiled.message_class()
    try:
        msg.ParseFromString(payload)
    except DecodeError as e:
        raise ValueError(str(e)) from None
    return compiled.convert(msg)


def _message(desc: Descriptor, stack: tuple[str, ...]) -> tuple[pa.StructType, Callable[[Any], dict]]:
    if desc.full_name in stack:
        raise SchemaError(f"message {desc.full_name} contains itself "
                          f"({' -> '.join(stack + (desc.full_name,))}): a recursive message has no Arrow type")
    fields, getters = [], []
    for fd in desc.fields:
        arrow, nullable, get = _field(fd, stack + (desc.full_name,))
        fields.append(pa.field(fd.name, arrow, nullable=nullable))
        getters.append((fd.name, get))

    def convert(m: Any) -> dict:
        return {name: get(m) for name, get in getters}
    return pa.struct(fields), convert


def _field(fd: FieldDescriptor, stack: tuple[str, ...]) -> tuple[pa.DataType, bool, Callable[[Any], Any]]:
    """(Arrow type, nullable, how to take the field's value from its message)."""
    name = fd.name
    if _is_map(fd):
        key_t = _value(fd.message_type.fields_by_name["key"], stack)[0]  # keys are integers, bool or string
        val_t, val_nullable, val_c = _value(fd.message_type.fields_by_name["value"], stack)
        arrow = pa.map_(key_t, pa.field("value", val_t, nullable=val_nullable))
        if val_c is None:
            return arrow, False, lambda m: sorted(getattr(m, name).items(), key=_key)
        return arrow, False, lambda m: [(k, val_c(v)) for k, v in sorted(getattr(m, name).items(), key=_key)]
    arrow, nullable, c = _value(fd, stack)
    if _is_repeated(fd):
        item = pa.list_(pa.field("item", arrow, nullable=False))
        if c is None:
            return item, False, lambda m: list(getattr(m, name))
        return item, False, lambda m: [c(v) for v in getattr(m, name)]
    if fd.has_presence:
        if c is None:
            return arrow, True, lambda m: getattr(m, name) if m.HasField(name) else None
        return arrow, True, lambda m: c(getattr(m, name)) if m.HasField(name) else None
    return arrow, nullable, (lambda m: getattr(m, name)) if c is None else (lambda m: c(getattr(m, name)))


def _value(fd: FieldDescriptor, stack: tuple[str, ...]) -> tuple[pa.DataType, bool, Convert]:
    """One value of the field's type: (Arrow type, nullable, converter)."""
    if fd.type == F.TYPE_ENUM:
        names = {v.number: v.name for v in fd.enum_type.values}
        return pa.string(), False, lambda v: names.get(v) or str(v)
    if fd.type in SCALARS:
        return SCALARS[fd.type], False, None
    kind = fd.message_type.full_name
    if kind == "google.protobuf.Timestamp":
        return pa.timestamp("ns", "UTC"), True, lambda v: v.seconds * _NANOS + v.nanos
    if kind == "google.protobuf.Duration":
        return pa.duration("ns"), True, lambda v: v.seconds * _NANOS + v.nanos
    if kind in WRAPPERS:
        return WRAPPERS[kind], True, lambda v: v.value
    if kind in JSON_TEXT:
        return pa.string(), True, lambda v: json_format.MessageToJson(v, indent=None)
    arrow, convert = _message(fd.message_type, stack)
    return arrow, True, convert


def _key(entry: tuple) -> Any:
    return entry[0]


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.type == F.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry


def _is_repeated(fd: FieldDescriptor) -> bool:
    # protobuf 7 drops `label` for `is_repeated` (as confluent-kafka's own `_is_repeated` knows).
    repeated = getattr(fd, "is_repeated", None)
    return repeated if repeated is not None else fd.label == F.LABEL_REPEATED
