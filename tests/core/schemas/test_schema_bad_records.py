"""No record stops a partition: whatever a record's bytes make a decoder do (a lone surrogate, JSON
nested without end, a number no float holds, a schema with no Arrow type), that record gets a reason
of one line and the others decode; with decode_strict the first one names its offset instead.
And schemaless JSON's type never holds Arrow's null type, nor lets one record's odd value spoil the
others'. Records are written by confluent-kafka's serializers where a registry frames them (its
in-memory mock registry: no server)."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from schema_support import FakeSource, column, proto_classes, proto_file, proto_schema

from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.schemas import typed
from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.errors import UndecodableRecord
from matos_dagster.core.schemas.sources import RegistrySource
from matos_dagster.core.schemas.wire import frame

DEEP = b"[" * 100_000 + b"]" * 100_000
MAX_DEPTH = 64  # levels of JSON a record may nest (docs/operations/typed.md)


def one_line(errors: list) -> None:
    for e in errors:
        assert e is None or ("\n" not in e and len(e) <= 300), e


def test_schemaless_json_that_python_or_arrow_cannot_take_is_a_reason_for_that_record_only():
    values = [b'{"s": "\\ud800"}',  # half of a surrogate pair: what JavaScript writes for an emoji cut in two
              DEEP, b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), b"[" * MAX_DEPTH + b"]" * MAX_DEPTH,
              b'{"s": "ok"}']
    out = decode(column(values), Side("json"))
    errors = out.errors.to_pylist()
    assert errors[0].startswith("not representable in Arrow: UnicodeEncodeError")
    assert errors[1] == errors[2] == f"corrupt payload: JSON nested deeper than {MAX_DEPTH} levels"
    assert errors[3] is None and errors[4] is None and (out.decoded, out.failed) == (2, 3)
    assert out.data.to_pylist()[4] == {"s": "ok"}
    one_line(errors)
    with pytest.raises(UndecodableRecord) as strict:
        decode(column(values), Side("json", strict=True), offsets=[10, 11, 12, 13, 14])
    assert strict.value.offset == 10


def test_a_json_schema_number_no_float_holds_is_a_reason_for_that_record_only():
    source = FakeSource()
    registry = RegistrySource(f"mock://bad-{uuid.uuid4().hex[:8]}")
    ctx = SerializationContext("t", MessageField.VALUE)
    schema = {"type": "object", "properties": {"n": {"type": "number"}}}
    write = JSONSerializer(json.dumps(schema), registry.client(), conf={"auto.register.schemas": True})
    values = [write({"n": 1.5}, ctx), write({"n": 10**400}, ctx)]  # a 401-digit integer: valid JSON, valid "number"
    out = decode(column(values), Side("json_schema"), registry)
    assert out.data.to_pylist() == [{"n": 1.5}, None]
    assert out.errors.to_pylist()[1].startswith("not representable as struct<n: double>: OverflowError")
    one_line(out.errors.to_pylist())
    assert source.asked == []


def test_a_registered_protobuf_schema_with_no_arrow_type_is_a_reason_for_its_records():
    tree = proto_file('name: "t.proto" package: "t" syntax: "proto3" message_type { name: "Node" field { '
                      'name: "kids" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".t.Node" } }')
    source = FakeSource({3: proto_schema(3), 9: proto_schema(9, tree)})
    customer = proto_classes()["shop.Customer"]
    out = decode(column([frame(9, b"", [0]), frame(3, customer(name="a").SerializeToString(), [1])]),
                 Side("protobuf"), source)
    assert out.errors.to_pylist()[0] == ("schema 9 unusable: message t.Node contains itself (t.Node -> t.Node): "
                                         "a recursive message has no Arrow type")
    assert out.data.to_pylist() == [None, {"name": "a"}]


def object_of(values: list[bytes], typing: typed.Typing, chunk_bytes: int) -> tuple[pa.Table, dict]:
    """One object of these values, sealed in chunks of `chunk_bytes`: its table and its counts."""
    import io

    import pyarrow.parquet as pq

    batch = Batch("t", 0, chunk_bytes=chunk_bytes, fmt="parquet", typing=typing)
    for i, v in enumerate(values):
        batch.add(i, 1, 1000 + i, None, v, [], len(v))
    data = batch.writer("parquet").finish()
    return pq.read_table(io.BytesIO(data)), batch.typed()["value"]


def test_a_later_chunk_of_mostly_another_protobuf_message_of_another_schema_is_typed_too():
    a = proto_file('name: "a.proto" package: "x" syntax: "proto3" message_type { name: "A" field { '
                   'name: "a" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING } }')
    b = proto_file('name: "b.proto" package: "x" syntax: "proto3" message_type { name: "B" field { '
                   'name: "b" number: 1 label: LABEL_OPTIONAL type: TYPE_INT64 } }')
    registry = RegistrySource(f"mock://bad-{uuid.uuid4().hex[:8]}")
    ctx = SerializationContext("t", MessageField.VALUE)
    A, B = proto_classes(a)["x.A"], proto_classes(b)["x.B"]
    conf = {"use.deprecated.format": False}
    write_a, write_b = (ProtobufSerializer(cls, registry.client(), conf) for cls in (A, B))
    values = [write_a(A(a=f"a{i}"), ctx) for i in range(20)] + [write_b(B(b=i), ctx) for i in range(30)] + \
        [write_a(A(a="last"), ctx)]
    for types in ("one", "by_record_name"):
        side = Side("protobuf") if types == "one" else Side("protobuf", types=types)
        t, counts = object_of(values, typed.Typing(value=side, value_source=registry),
                              chunk_bytes=100)  # the A records in the first chunks, mostly B in the later ones
        assert (counts["decoded"], counts["failed"]) == (51, 0)
        read = {cls: ProtobufDeserializer(cls, conf, registry.client()) for cls in (A, B)}
        got = t.column("value_data").to_pylist()
        for i, (v, row) in enumerate(zip(values, got)):
            cls, name = (B, "B") if 20 <= i < 50 else (A, "A")
            message = read[cls](v, ctx)
            want = {f.name: getattr(message, f.name) for f in cls.DESCRIPTOR.fields}
            assert (row[name] if types == "by_record_name" else {k: row[k] for k in want}) == want


def test_schemaless_json_fields_null_or_empty_at_first_get_their_type_later_and_one_odd_value_spoils_no_other():
    first = [json.dumps({"n": i, "x": None, "y": []}).encode() for i in range(30)]
    later = [json.dumps({"n": i, "x": f"x{i}", "y": [i]}).encode() for i in range(30)]
    values = first + later[:10] + [b'{"n": 18446744073709551616}'] + later[10:]  # 2**64: past int64
    t, counts = object_of(values, typed.Typing(value=Side("json")), chunk_bytes=200)
    data_type = t.schema.field("value_data").type
    assert data_type == pa.struct([pa.field("n", pa.int64()), pa.field("x", pa.string()),
                                   pa.field("y", pa.list_(pa.int64()))])  # no null type, at any depth
    assert (counts["decoded"], counts["failed"]) == (len(values) - 1, 1)
    errors = t.column("value_error").to_pylist()
    assert errors[40].startswith("not representable in Arrow: OverflowError") and errors.count(None) == len(values) - 1
    got = t.column("value_data").to_pylist()
    assert got[0] == {"n": 0, "x": None, "y": None} and got[31] == {"n": 1, "x": "x1", "y": [1]}
    assert t.schema.names[:len(SCHEMA)] == SCHEMA.names
