"""Protobuf records as Arrow: nested messages, repeated fields, maps, oneofs, enums, Timestamp,
wrappers; the message the wire format's indexes name; a registered schema's file descriptor."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from schema_support import SHOP_PROTO, FakeSource, column, mock_url, proto_classes, proto_file, proto_schema

from matos_dagster.core.schemas.arrow_types import arrow_type, protobuf_type
from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.errors import SchemaError
from matos_dagster.core.schemas.sources import FileSource, RegistrySource, Schema
from matos_dagster.core.schemas.wire import frame

CLASSES = proto_classes()
Order, Customer, Line = CLASSES["shop.Order"], CLASSES["shop.Customer"], CLASSES["shop.Order.Line"]
SOURCE = FakeSource({3: proto_schema(3)})
UTC = datetime.timezone.utc


def order() -> object:
    m = Order(id=2**62 + 1, status=1, big=2**64 - 1, raw=b"\x00\xff", codes=[-1, 0, 7], weight=0.5, card="visa")
    m.customer.name = "Ann"
    m.lines.add(sku="a", qty=2)
    m.lines.add(sku="b", qty=4294967295)
    m.tags["x"] = -5
    m.placed_at.seconds, m.placed_at.nanos = 1_700_000_000, 123_456_789
    m.note.value = "ring twice"
    return m


def test_a_message_is_a_struct_of_its_fields():
    line = pa.struct([pa.field("sku", pa.string(), False), pa.field("qty", pa.uint32(), False)])
    assert arrow_type(proto_schema(3)) == pa.struct([
        pa.field("id", pa.int64(), False),
        pa.field("customer", pa.struct([pa.field("name", pa.string(), False)])),
        pa.field("lines", pa.list_(pa.field("item", line, False)), False),
        pa.field("tags", pa.map_(pa.string(), pa.field("value", pa.int64(), False)), False),
        pa.field("status", pa.string(), False),
        pa.field("placed_at", pa.timestamp("ns", "UTC")),
        pa.field("card", pa.string()), pa.field("voucher", pa.int32()),  # oneof members: nullable
        pa.field("note", pa.string()),  # StringValue: a nullable string
        pa.field("big", pa.uint64(), False), pa.field("raw", pa.binary(), False),
        pa.field("codes", pa.list_(pa.field("item", pa.int32(), False)), False),
        pa.field("weight", pa.float32(), False),
    ])


def test_every_field_comes_out_exactly():
    out = decode(column([frame(3, order().SerializeToString(), [0])]), Side("protobuf"), SOURCE)
    assert out.errors.to_pylist() == [None] and out.reader_schema_id == 3
    got = out.data.to_pylist()[0]
    placed_at = got.pop("placed_at")
    assert got == {
        "id": 2**62 + 1, "customer": {"name": "Ann"}, "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 4294967295}],
        "tags": [("x", -5)], "status": "PAID", "card": "visa", "voucher": None, "note": "ring twice",
        "big": 2**64 - 1, "raw": b"\x00\xff", "codes": [-1, 0, 7], "weight": 0.5,
    }
    assert out.data.field("placed_at").cast(pa.int64()).to_pylist() == [1_700_000_000_123_456_789]
    assert placed_at is not None


def test_unset_fields_defaults_presence_and_the_other_oneof_member():
    m = Order(voucher=0)  # a oneof member set to its default value is still set
    got = decode(column([frame(3, m.SerializeToString(), [0])]), Side("protobuf"), SOURCE).data.to_pylist()[0]
    assert got == {"id": 0, "customer": None, "lines": [], "tags": [], "status": "NEW", "placed_at": None,
                   "card": None, "voucher": 0, "note": None, "big": 0, "raw": b"", "codes": [], "weight": 0.0}


def test_an_unknown_enum_number_is_its_text():
    m = Order(status=7)
    got = decode(column([frame(3, m.SerializeToString(), [0])]), Side("protobuf"), SOURCE).data.to_pylist()[0]
    assert got["status"] == "7"


def test_the_message_indexes_name_the_message():
    out = decode(column([frame(3, Customer(name="Bo").SerializeToString(), [1])]), Side("protobuf"), SOURCE)
    assert out.data.to_pylist() == [{"name": "Bo"}]
    out = decode(column([frame(3, Line(sku="z", qty=1).SerializeToString(), [0, 0])]), Side("protobuf"), SOURCE)
    assert out.data.to_pylist() == [{"sku": "z", "qty": 1}]


def test_every_message_of_a_call_is_typed_merged_by_field_name_or_one_member_each():
    values = [frame(3, Customer(name="a").SerializeToString(), [1]), frame(3, Order(id=1).SerializeToString(), [0]),
              frame(3, Customer(name="b").SerializeToString(), [1]), frame(3, b"", [5])]
    out = decode(column(values), Side("protobuf"), SOURCE)
    customer, order, other, bad = out.data.to_pylist()
    assert (customer["name"], customer["id"], order["id"], order["name"], other["name"]) == ("a", None, 1, None, "b")
    assert bad is None and out.errors.to_pylist() == [None, None, None, "schema 3: message indexes [5] name no message"]
    out = decode(column(values), Side("protobuf", types="by_record_name"), SOURCE)
    assert out.data.type.names == ["Customer", "Order"]
    customer, order, other, bad = out.data.to_pylist()
    assert customer == {"Customer": {"name": "a"}, "Order": None} and other["Customer"] == {"name": "b"}
    assert order["Customer"] is None and order["Order"]["id"] == 1 and bad is None


def test_a_corrupt_payload_and_bad_indexes_are_reasons():
    out = decode(column([frame(3, b"\x0a\xff", [0]), b"\x00\x00\x00\x00\x03\x01", frame(3, b"", [0])]),
                 Side("protobuf"), SOURCE)
    errors = out.errors.to_pylist()
    assert errors[0].startswith("corrupt payload: ") and errors[1] == "bad message indexes: count -1"
    assert errors[2] is None  # an empty message is a message, every field unset


def test_each_version_reads_its_own_records_in_the_union_of_their_types():
    v2 = proto_file()
    v2.message_type[1].field.add(name="email", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                                 label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    source = FakeSource({3: proto_schema(3), 4: proto_schema(4, v2)})
    newer = proto_classes(v2)["shop.Customer"]
    out = decode(column([frame(3, Customer(name="old").SerializeToString(), [1]),
                         frame(4, newer(name="new", email="n@x").SerializeToString(), [1])]), Side("protobuf"), source)
    assert out.reader_schema_id == 4
    # The older writer has no email: null, not proto3's default "" (its message never had one).
    assert out.data.to_pylist() == [{"name": "old", "email": None}, {"name": "new", "email": "n@x"}]


def test_a_timestamp_outside_nanosecond_range_is_a_bad_record():
    m = Order()
    m.placed_at.seconds = 253402300799  # 9999-12-31: a valid Timestamp, past 2262
    out = decode(column([frame(3, m.SerializeToString(), [0])]), Side("protobuf"), SOURCE)
    assert out.errors.to_pylist()[0].startswith("not representable as ")


def test_a_recursive_message_is_refused_naming_it():
    tree = proto_file('name: "t.proto" package: "t" syntax: "proto3" message_type { name: "Node" field { '
                      'name: "kids" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".t.Node" } }')
    with pytest.raises(SchemaError, match=r"message t\.Node contains itself"):
        arrow_type(proto_schema(1, tree))


def test_well_known_struct_is_json_text_and_compiled_classes_work_too():
    from google.protobuf import struct_pb2, timestamp_pb2

    assert protobuf_type(struct_pb2.Value.DESCRIPTOR) == pa.struct([
        pa.field("null_value", pa.string()), pa.field("number_value", pa.float64()),
        pa.field("string_value", pa.string()), pa.field("bool_value", pa.bool_()),
        pa.field("struct_value", pa.string()), pa.field("list_value", pa.string())])
    assert protobuf_type(timestamp_pb2.Timestamp.DESCRIPTOR) == pa.struct([
        pa.field("seconds", pa.int64(), False), pa.field("nanos", pa.int32(), False)])


def test_values_written_by_confluent_kafkas_serializer_through_a_registry():
    source = RegistrySource(mock_url())
    serialize = ProtobufSerializer(Customer, source.client(), {"use.deprecated.format": False})
    value = serialize(Customer(name="Cy"), SerializationContext("people", MessageField.VALUE))
    out = decode(column([value]), Side("protobuf"), source)
    assert out.data.to_pylist() == [{"name": "Cy"}] and out.errors.to_pylist() == [None]


def test_bare_protobuf_with_a_descriptor_set_file(tmp_path):
    files = descriptor_pb2.FileDescriptorSet()
    from google.protobuf import timestamp_pb2, wrappers_pb2

    for dep in (timestamp_pb2, wrappers_pb2):
        files.file.add().ParseFromString(dep.DESCRIPTOR.serialized_pb)
    files.file.append(proto_file())
    (tmp_path / "shop.desc").write_bytes(files.SerializeToString())
    out = decode(column([Customer(name="Di").SerializeToString()]), Side("protobuf"),
                 FileSource(tmp_path / "shop.desc", message="shop.Customer"))
    assert out.data.to_pylist() == [{"name": "Di"}] and out.schema_ids.to_pylist() == [None]
    out = decode(column([order().SerializeToString()]), Side("protobuf"), FileSource(tmp_path / "shop.desc"))
    assert out.data.to_pylist()[0]["lines"] == [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 4294967295}]
    assert decode(column([]), Side("protobuf"), FileSource(tmp_path / "shop.desc", "shop.Customer")).data.type == \
        pa.struct([pa.field("name", pa.string(), False)])


def test_proto_text_needs_compiling_and_says_how(tmp_path):
    (tmp_path / "shop.proto").write_text(SHOP_PROTO)
    with pytest.raises(SchemaError, match="protoc --include_imports --descriptor_set_out=shop.desc shop.proto"):
        FileSource(tmp_path / "shop.proto")


def test_a_schema_given_as_proto_text_is_unusable_for_its_records():
    source = FakeSource({3: proto_schema(3), 6: Schema(6, "PROTOBUF", 'syntax = "proto3"; message M { int32 a = 1; }')})
    out = decode(column([frame(6, b"", [0]), frame(3, Customer(name="x").SerializeToString(), [1])]),
                 Side("protobuf"), source)
    assert out.errors.to_pylist()[0].startswith("schema 6: default is not a usable serialized FileDescriptorProto")
    assert out.data.to_pylist()[1] == {"name": "x"}
