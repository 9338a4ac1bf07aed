"""JSON as Arrow: JSON Schema (wire format, or bare with a schema file) typed by its schema, the
untypable kept as JSON text; schemaless JSON typed by what pyarrow infers from the batch."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from schema_support import FakeSource, column, json_schema, mock_url

from matos_dagster.core.schemas.arrow_types import json_schema_type
from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.sources import FileSource, RegistrySource
from matos_dagster.core.schemas.wire import frame

ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"}, "price": {"type": "number"}, "paid": {"type": "boolean"},
        "at": {"type": "string", "format": "date-time"}, "note": {"type": ["null", "string"]},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
        "extra": {}, "either": {"type": ["string", "integer"]},
    },
    "definitions": {"Line": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}},
}
LINE = pa.struct([pa.field("sku", pa.string()), pa.field("qty", pa.int64())])
ORDER_TYPE = pa.struct([
    pa.field("id", pa.int64()), pa.field("price", pa.float64()), pa.field("paid", pa.bool_()),
    pa.field("at", pa.string()), pa.field("note", pa.string()), pa.field("lines", pa.list_(LINE)),
    pa.field("extra", pa.string()), pa.field("either", pa.string()),
])
SOURCE = FakeSource({8: json_schema(8, ORDER)})


def framed(value, schema_id: int = 8) -> bytes:
    return frame(schema_id, json.dumps(value).encode())


def test_a_json_schema_maps_to_arrow_untypable_parts_are_json_text():
    assert json_schema_type(json.dumps(ORDER)) == ORDER_TYPE


@pytest.mark.parametrize("schema, arrow", [
    ({"anyOf": [{"type": "null"}, {"type": "integer"}]}, pa.int64()),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, pa.string()),
    ({"enum": ["a", "b"]}, pa.string()),
    ({"type": "object"}, pa.string()),  # no properties: a map of anything, kept as text
    ({"type": "array", "items": [{"type": "string"}]}, pa.string()),  # a tuple
    ({"allOf": [{"type": "integer"}]}, pa.string()),
    ({"type": "null"}, pa.null()),
    ({"$ref": "#"}, pa.string()),
    ({"type": "object", "properties": {"child": {"$ref": "#"}}}, pa.struct([pa.field("child", pa.string())])),
    ({"$ref": "other.json#/Thing"}, pa.string()),
])
def test_json_schema_shapes(schema, arrow):
    assert json_schema_type(json.dumps(schema)) == arrow


def test_records_convert_to_the_schemas_type():
    value = {"id": 2**53 + 1, "price": 3, "paid": True, "at": "2024-01-01T00:00:00Z", "note": None,
             "lines": [{"sku": "a", "qty": 1.0}], "extra": {"any": [1, "x"]}, "either": 5, "unknown": "dropped"}
    out = decode(column([framed(value), framed({"id": 1}), None]), Side("json_schema"), SOURCE)
    assert out.errors.to_pylist() == [None, None, None] and out.data.type == ORDER_TYPE
    assert out.data.to_pylist()[:2] == [
        {"id": 2**53 + 1, "price": 3.0, "paid": True, "at": "2024-01-01T00:00:00Z", "note": None,
         "lines": [{"sku": "a", "qty": 1}], "extra": '{"any":[1,"x"]}', "either": "5"},
        {"id": 1, "price": None, "paid": None, "at": None, "note": None, "lines": None, "extra": None,
         "either": None},
    ]
    assert out.schema_ids.to_pylist() == [8, 8, None] and out.reader_schema_id == 8


def test_a_value_of_the_wrong_shape_says_where():
    out = decode(column([framed({"id": "one"}), framed({"lines": [{"qty": 1}, {"qty": True}]}), framed([1]),
                         frame(8, b"{not json")]), Side("json_schema"), SOURCE)
    errors = out.errors.to_pylist()
    assert errors[:3] == ["does not match schema 8: expected an integer, got a string at $.id",
                          "does not match schema 8: expected an integer, got a boolean at $.lines[1].qty",
                          "does not match schema 8: expected an object, got an array at $"]
    assert errors[3].startswith("corrupt payload: not JSON: ") and out.data.null_count == 4


def test_bare_json_with_a_json_schema_file(tmp_path):
    (tmp_path / "order.json").write_text(json.dumps(ORDER))
    out = decode(column([b'{"id": 4}', b'{"id": 4.5}']), Side("json_schema"), FileSource(tmp_path / "order.json"))
    assert out.data.to_pylist()[0]["id"] == 4 and out.reader_schema_id is None
    assert out.errors.to_pylist()[1] == "does not match the schema: expected an integer, got a number at $.id"


def test_values_written_by_confluent_kafkas_serializer_through_a_registry():
    source = RegistrySource(mock_url())
    serialize = JSONSerializer(json.dumps(ORDER), source.client())
    value = serialize({"id": 9, "lines": []}, SerializationContext("orders", MessageField.VALUE))
    out = decode(column([value]), Side("json_schema"), source)
    assert out.data.to_pylist()[0]["id"] == 9 and out.errors.to_pylist() == [None]


def test_schemaless_json_is_typed_by_what_the_batch_holds():
    out = decode(column([b'{"a": 1, "b": [true]}', b'{"a": 2.5, "c": "x"}', None, b"nope"]), Side("json"))
    assert out.data.type == pa.struct([pa.field("a", pa.float64()), pa.field("b", pa.list_(pa.bool_())),
                                       pa.field("c", pa.string())])
    assert out.data.to_pylist() == [{"a": 1.0, "b": [True], "c": None}, {"a": 2.5, "b": None, "c": "x"}, None, None]
    assert out.errors.to_pylist()[3].startswith("corrupt payload: not JSON: ") and out.schema_ids.null_count == 4


def test_schemaless_json_that_does_not_fit_the_type_of_the_records_before_it_is_an_error_of_its_own():
    out = decode(column([b'{"a": 1}', b'{"a": "one"}', b"[1,2]", b'{"a": 2, "b": true}']), Side("json"))
    assert out.data.type == pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.bool_())])
    assert out.data.to_pylist() == [{"a": 1, "b": None}, None, None, {"a": 2, "b": True}]
    errors = out.errors.to_pylist()
    assert errors[0] is None and errors[3] is None
    assert errors[1].startswith("does not fit this object's type struct<a: int64> (given by its earlier records)")


def test_json_schema_versions_each_keep_their_properties_in_the_union_of_their_types():
    source = RegistrySource(mock_url())
    ctx = SerializationContext("t", MessageField.VALUE)
    v1 = {"type": "object", "properties": {"id": {"type": "integer"}, "gone": {"type": "string"}}}
    v2 = {"type": "object", "properties": {"id": {"type": "integer"}, "added": {"type": "boolean"}}}
    old, new = (JSONSerializer(json.dumps(v), source.client()) for v in (v1, v2))
    out = decode(column([old({"id": 1, "gone": "g"}, ctx), new({"id": 2, "added": True}, ctx)]), Side("json_schema"),
                 source)
    # v2 removed `gone`: the v1 record keeps it (its writer set it); v2's `added` is null for it.
    assert out.data.type == pa.struct([pa.field("id", pa.int64()), pa.field("added", pa.bool_()),
                                       pa.field("gone", pa.string())])
    assert out.data.to_pylist() == [{"id": 1, "added": None, "gone": "g"}, {"id": 2, "added": True, "gone": None}]
