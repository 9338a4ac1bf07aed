"""The Confluent wire format, split: magic byte 0, a 4-byte big-endian schema id, for Protobuf
the message indexes, then the payload. Every shape that is not one is told by its reason."""

from __future__ import annotations

import io
import struct

import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from hypothesis import given
from hypothesis import strategies as st

from matos_dagster.core.schemas.wire import Framed, frame, split


def test_a_framed_value_gives_its_schema_id_and_payload():
    assert split(b"\x00\x00\x00\x01\x2c" + b"avro bytes") == Framed(300, (), b"avro bytes")


def test_the_payload_may_be_empty():
    assert split(b"\x00\x00\x00\x00\x07") == Framed(7, (), b"")


@pytest.mark.parametrize("value, reason", [
    (b"", "empty"),
    (b'{"json": true}', "no magic byte"),
    (b"\x02\x00\x00\x00\x07", "no magic byte"),
    (b"\x01" + bytes(16), "magic byte 1 (a schema GUID) not supported"),
    (b"\x00\x00\x00", "too short: 3 of the header's 5 bytes"),
    (b"\x00", "too short: 1 of the header's 5 bytes"),
    (b"\x00\xff\xff\xff\xff", "bad schema id 4294967295"),
])
def test_what_is_not_framed_says_why(value, reason):
    assert split(value) == reason


def test_protobuf_message_indexes_the_single_zero_shortcut_is_the_first_message():
    assert split(b"\x00\x00\x00\x00\x07\x00payload", protobuf=True) == Framed(7, (0,), b"payload")


def test_protobuf_message_indexes_a_zigzag_count_then_zigzag_indexes():
    # count 2 -> zigzag 4, indexes 1 and 3 -> zigzag 2 and 6: Order's nested message 3, of message 1
    assert split(b"\x00\x00\x00\x00\x07\x04\x02\x06rest", protobuf=True) == Framed(7, (1, 3), b"rest")


def test_without_protobuf_the_bytes_after_the_id_are_all_payload():
    assert split(b"\x00\x00\x00\x00\x07\x00payload").payload == b"\x00payload"


@pytest.mark.parametrize("tail, reason", [
    (b"", "bad message indexes: truncated varint"),
    (b"\x04\x02", "bad message indexes: truncated varint"),
    (b"\x80\x80", "bad message indexes: truncated varint"),
    (b"\xff" * 11, "bad message indexes: varint longer than 10 bytes"),
    (b"\x01", "bad message indexes: count -1"),
    (b"\xc2\x9a\x0c", "bad message indexes: count 100001"),
    (b"\x02\x01", "bad message indexes: negative index -1"),
])
def test_bad_message_indexes_say_why(tail, reason):
    assert split(b"\x00\x00\x00\x00\x07" + tail, protobuf=True) == reason


def _confluent_framed(schema_id: int, indexes: list[int] | None) -> bytes:
    out = SchemaId("PROTOBUF" if indexes is not None else "AVRO", schema_id, message_indexes=indexes).id_to_bytes()
    return out


@given(st.integers(0, 2**31 - 1), st.lists(st.integers(0, 2**20), min_size=1, max_size=6), st.binary(max_size=20))
def test_message_indexes_are_read_as_confluent_kafka_writes_them(schema_id, indexes, payload):
    value = _confluent_framed(schema_id, indexes) + payload
    assert split(value, protobuf=True) == Framed(schema_id, tuple(indexes), payload)
    assert frame(schema_id, payload, indexes) == value


@given(st.integers(0, 2**31 - 1), st.lists(st.integers(0, 2**20), min_size=1, max_size=6))
def test_what_frame_writes_confluent_kafka_reads(schema_id, indexes):
    read = SchemaId("PROTOBUF")
    rest = read.from_bytes(io.BytesIO(frame(schema_id, b"xyz", indexes)))
    assert (read.id, read.message_indexes, rest.read()) == (schema_id, indexes, b"xyz")


def test_frame_without_indexes_is_the_avro_and_json_header():
    assert frame(300, b"p") == struct.pack(">bI", 0, 300) + b"p" == _confluent_framed(300, None) + b"p"
