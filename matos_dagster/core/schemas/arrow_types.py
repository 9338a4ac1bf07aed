"""Schema -> Arrow type, for the three schema languages of a registry and for schemaless JSON.

Each language's mapping lives with its converter, in one walk, so type and values cannot
disagree: `avro`, `protobuf` and `json_schema` say in their docstrings what maps to what and
why. In short:

    Avro         record -> struct, [null, T] -> nullable T, other unions -> struct<member0, ...>
                 (Spark's names), enum -> string, fixed -> fixed_size_binary, decimal ->
                 decimal128/256 with its scale, date/time/timestamp logical types -> date32,
                 time32/64, timestamp with 'UTC' (local-timestamp: without), uuid -> string,
                 array -> list, map -> map<string, T>; a recursive record is refused
    Protobuf     message -> struct, repeated -> list, map -> map, enum -> string (the name),
                 oneof members and fields with presence -> nullable, Timestamp ->
                 timestamp('ns', 'UTC'), wrappers -> nullable scalars, unsigned stay unsigned;
                 Struct/Value/ListValue -> their JSON text; a recursive message is refused
    JSON Schema  object with properties -> struct, array with items -> list, string, integer ->
                 int64, number -> float64, boolean, [null, T] -> nullable T; anything else ->
                 string holding the JSON text
    JSON         no schema: the type pyarrow infers from the values, growing with the object's
                 records (schemaless.py)

Here: the type of a whole `Schema`, whatever its language, and of the building blocks.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from matos_dagster.core.schemas import avro, json_schema, protobuf
from matos_dagster.core.schemas.errors import SchemaError
from matos_dagster.core.schemas.sources import AVRO, JSON, PROTOBUF, Schema


def arrow_type(schema: Schema, message: str | None = None) -> pa.DataType:
    """The Arrow type of the schema's records; Protobuf: of `message` (a full name), by default
    the file's first message (message indexes [0], the wire format's shortcut)."""
    if schema.schema_type == AVRO:
        return avro.compile(schema).type
    if schema.schema_type == PROTOBUF:
        return protobuf.compile(protobuf_message(schema, message)).type
    if schema.schema_type == JSON:
        return json_schema.compile(schema)[0]
    raise SchemaError(f"schema {schema.id}: unknown schema type {schema.schema_type}")


def protobuf_message(schema: Schema, message: str | None = None):
    """The message descriptor named `message` in the schema's file, or its first message."""
    file = protobuf.file_of(schema)
    try:
        return protobuf.message_named(file, message) if message else protobuf.message_at(file, (0,))
    except LookupError as e:
        raise SchemaError(f"schema {schema.id}: {e}") from None


def avro_type(schema_json: str) -> pa.DataType:
    """The Arrow type of an Avro schema given as its JSON text."""
    return avro.compile(Schema(None, AVRO, schema_json)).type


def protobuf_type(descriptor: Any) -> pa.DataType:
    """The Arrow type of a message descriptor (`Message.DESCRIPTOR`, or one from a pool)."""
    return protobuf.compile(descriptor).type


def json_schema_type(schema_json: str) -> pa.DataType:
    """The Arrow type of a JSON Schema given as its JSON text."""
    return json_schema.compile(Schema(None, JSON, schema_json))[0]
