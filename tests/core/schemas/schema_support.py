"""What the schema tests share: values encoded by the libraries themselves (fastavro, protobuf,
json) and framed by hand, a source holding schemas by id, and a Protobuf file written as text."""

from __future__ import annotations

import base64
import io
import json
from itertools import count

import fastavro
import pyarrow as pa
from confluent_kafka.schema_registry.common.protobuf import _init_pool
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from matos_dagster.core.schemas.errors import UnknownSchema
from matos_dagster.core.schemas.sources import AVRO, JSON, PROTOBUF, Schema
from matos_dagster.core.schemas.wire import frame

_mocks = count()


class FakeSource:
    """Schemas by id, as a registry holds them; counts the questions asked."""

    framed = True

    def __init__(self, schemas: dict[int, Schema] | None = None):
        self.schemas = dict(schemas or {})
        self.asked: list[int] = []

    def get(self, schema_id, schema_type=AVRO):
        self.asked.append(schema_id)
        if schema_id not in self.schemas:
            raise UnknownSchema(schema_id)
        return self.schemas[schema_id]


def avro_schema(schema_id: int | None, schema: dict | list | str) -> Schema:
    return Schema(schema_id, AVRO, json.dumps(schema))


def avro_bytes(schema: dict | list | str, value) -> bytes:
    """`value` as bare Avro binary, written by fastavro."""
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), value)
    return buf.getvalue()


def avro_framed(schema_id: int, schema, value) -> bytes:
    return frame(schema_id, avro_bytes(schema, value))


def column(values) -> pa.BinaryArray:
    return pa.array(values, pa.binary())


def json_schema(schema_id: int | None, schema: dict) -> Schema:
    return Schema(schema_id, JSON, json.dumps(schema))


SHOP_PROTO = """
name: "shop.proto" package: "shop" syntax: "proto3"
dependency: "google/protobuf/timestamp.proto" dependency: "google/protobuf/wrappers.proto"
message_type {
  name: "Order"
  field { name: "id" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 }
  field { name: "customer" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".shop.Customer" }
  field { name: "lines" number: 3 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".shop.Order.Line" }
  field { name: "tags" number: 4 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".shop.Order.TagsEntry" }
  field { name: "status" number: 5 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".shop.Status" }
  field { name: "placed_at" number: 6 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.Timestamp" }
  field { name: "card" number: 7 label: LABEL_OPTIONAL type: TYPE_STRING oneof_index: 0 }
  field { name: "voucher" number: 8 label: LABEL_OPTIONAL type: TYPE_INT32 oneof_index: 0 }
  field { name: "note" number: 9 label: LABEL_OPTIONAL type: TYPE_MESSAGE
          type_name: ".google.protobuf.StringValue" }
  field { name: "big" number: 10 label: LABEL_OPTIONAL type: TYPE_UINT64 }
  field { name: "raw" number: 11 label: LABEL_OPTIONAL type: TYPE_BYTES }
  field { name: "codes" number: 12 label: LABEL_REPEATED type: TYPE_SINT32 }
  field { name: "weight" number: 13 label: LABEL_OPTIONAL type: TYPE_FLOAT }
  nested_type {
    name: "Line"
    field { name: "sku" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "qty" number: 2 label: LABEL_OPTIONAL type: TYPE_UINT32 }
  }
  nested_type {
    name: "TagsEntry" options { map_entry: true }
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
    field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_INT64 }
  }
  oneof_decl { name: "payment" }
}
message_type { name: "Customer" field { name: "name" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING } }
enum_type { name: "Status" value { name: "NEW" number: 0 } value { name: "PAID" number: 1 } }
"""


def proto_file(text: str = SHOP_PROTO) -> descriptor_pb2.FileDescriptorProto:
    return text_format.Parse(text, descriptor_pb2.FileDescriptorProto())


def proto_schema(schema_id: int | None, file: descriptor_pb2.FileDescriptorProto | None = None) -> Schema:
    """A registered Protobuf schema, as the registry serves it with format=serialized."""
    file = file or proto_file()
    return Schema(schema_id, PROTOBUF, base64.standard_b64encode(file.SerializeToString()).decode())


def proto_classes(file: descriptor_pb2.FileDescriptorProto | None = None) -> dict[str, type]:
    """The file's message classes by full name, to write test messages with."""
    pool = descriptor_pool.DescriptorPool()
    _init_pool(pool)
    file = file or proto_file()
    pool.Add(file)
    out = {}

    def collect(desc):
        out[desc.full_name] = message_factory.GetMessageClass(desc)
        for nested in desc.nested_types:
            collect(nested)

    for desc in pool.FindFileByName(file.name).message_types_by_name.values():
        collect(desc)
    return out


def mock_url() -> str:
    """A fresh in-memory registry (confluent-kafka's mock) for RegistrySource."""
    return f"mock://schemas-test-{next(_mocks)}"
