"""One column decoded: one Arrow type per call, a reason for every record that does not decode,
nothing raised for a bad record (unless strict), and a registry's absence never taken for one."""

from __future__ import annotations

import pickle
from decimal import Decimal

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from schema_support import FakeSource, avro_bytes, avro_framed, avro_schema, column, mock_url

from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.errors import RegistryUnavailable, SchemaError, UndecodableRecord
from matos_dagster.core.schemas.sources import FileSource, RegistrySource

V1 = {"type": "record", "name": "User", "namespace": "shop", "fields": [{"name": "name", "type": "string"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "age", "type": "int", "default": -1}]}
# Not readable as V2: `name` became a long, with no promotion from string.
OTHER = {**V1, "fields": [{"name": "name", "type": "long"}, {"name": "age", "type": "int"}]}
SOURCE = FakeSource({1: avro_schema(1, V1), 2: avro_schema(2, V2), 5: avro_schema(5, OTHER)})


def test_each_record_is_read_with_its_own_writer_in_the_union_of_their_types_the_newest_first():
    out = decode(column([avro_framed(1, V1, {"name": "old"}), avro_framed(2, V2, {"name": "new", "age": 30})]),
                 Side("avro"), FakeSource({1: avro_schema(1, V1), 2: avro_schema(2, V2)}))
    assert out.reader_schema_id == 2
    # `age` is nullable: V1's records have none (null, not V2's default: V1's writer never set it).
    assert out.data.type == pa.struct([pa.field("name", pa.string(), False), pa.field("age", pa.int32())])
    assert out.data.to_pylist() == [{"name": "old", "age": None}, {"name": "new", "age": 30}]
    assert out.schema_ids.to_pylist() == [1, 2] and out.errors.to_pylist() == [None, None]


def test_a_field_removed_in_a_newer_version_is_kept_for_the_records_that_set_it():
    v3 = {**V1, "fields": [{"name": "age", "type": "long"}]}  # `name` removed, `age` a long now
    out = decode(column([avro_framed(2, V2, {"name": "n", "age": 3}), avro_framed(3, v3, {"age": 2**40})]),
                 Side("avro"), FakeSource({2: avro_schema(2, V2), 3: avro_schema(3, v3)}))
    assert out.data.type == pa.struct([pa.field("age", pa.int64(), False), pa.field("name", pa.string())])
    assert out.data.to_pylist() == [{"age": 3, "name": "n"}, {"age": 2**40, "name": None}]


def test_a_writer_whose_type_has_no_union_with_the_earlier_ones_is_an_error_for_its_records_only():
    out = decode(column([avro_framed(5, OTHER, {"name": 7, "age": 1}), avro_framed(1, V1, {"name": "a"}),
                         avro_framed(2, V2, {"name": "b", "age": 1})]), Side("avro"), SOURCE)
    assert out.reader_schema_id == 5
    assert out.data.to_pylist() == [{"name": 7, "age": 1}, None, None] and (out.decoded, out.failed) == (1, 2)
    first, second = out.errors.to_pylist()[1:]
    assert first.startswith("schema 1 has no type in common with the other records' schemas here (Field name has "
                            "incompatible types: string vs int64)")
    assert second.startswith("schema 2 has no type in common")


def test_bad_records_get_null_data_and_their_reason_the_others_decode():
    good = avro_framed(1, V1, {"name": "ok"})
    values = [good, None, b"", b'{"name": "json"}', b"\x00\x00\x00", avro_framed(7, V1, {"name": "x"}),
              b"\x00\x00\x00\x00\x01\xff\xff", b"\x00\x00\x00\x00\x01" + avro_bytes(V1, {"name": "ok"}) + b"!"]
    out = decode(column(values), Side("avro"), SOURCE)
    assert out.data.to_pylist() == [{"name": "ok"}] + [None] * 7
    errors = out.errors.to_pylist()
    assert errors[:6] == [None, None, "empty", "no magic byte", "too short: 3 of the header's 5 bytes",
                          "unknown schema id 7"]
    assert errors[6].startswith("corrupt payload: ") and errors[7] == "corrupt payload: 1 bytes left after the record"
    assert out.schema_ids.to_pylist() == [1, None, None, None, None, 7, 1, 1]
    assert (out.decoded, out.failed, out.nulls) == (1, 6, 1)


def test_a_null_value_is_null_data_and_no_error():
    source = FakeSource({1: avro_schema(1, V1)})
    out = decode(column([None, None]), Side("avro"), source)
    assert out.data.to_pylist() == [None, None] and out.errors.null_count == 2 and out.nulls == 2
    assert out.reader_schema_id is None and source.asked == []


def test_strict_raises_naming_the_first_bad_record():
    values = column([avro_framed(1, V1, {"name": "ok"}), b"nope", b""])
    with pytest.raises(UndecodableRecord, match=r"record 1 \(offset 41\) does not decode: no magic byte") as e:
        decode(values, Side("avro", strict=True), SOURCE, offsets=[40, 41, 42])
    assert (e.value.index, e.value.offset, e.value.reason) == (1, 41, "no magic byte")
    with pytest.raises(UndecodableRecord, match=r"^record 1 does not decode"):
        decode(values, Side("avro", strict=True), SOURCE)


def test_an_unreachable_registry_propagates_it_is_not_a_bad_record():
    class Down(FakeSource):
        def get(self, schema_id, schema_type="AVRO"):
            raise RegistryUnavailable("schema registry http://registry could not be reached")

    with pytest.raises(RegistryUnavailable):
        decode(column([avro_framed(1, V1, {"name": "a"})]), Side("avro"), Down())


def test_a_schema_of_another_type_or_unusable_is_a_reason_for_its_records():
    source = FakeSource({1: avro_schema(1, V1), 3: avro_schema(3, {"type": "record", "name": "N", "fields": [
        {"name": "next", "type": ["null", "N"]}]})})
    from schema_support import json_schema

    source.schemas[4] = json_schema(4, {"type": "string"})
    out = decode(column([avro_framed(1, V1, {"name": "a"}), b"\x00\x00\x00\x00\x03\x00", b"\x00\x00\x00\x00\x04"]),
                 Side("avro"), source)
    assert out.reader_schema_id == 1
    assert out.errors.to_pylist() == [None, "schema 3 unusable: record N contains itself (N -> N): a recursive "
                                      "record has no Arrow type", "schema 4 is JSON, not AVRO"]


def test_no_usable_schema_at_all_gives_the_null_type():
    out = decode(column([b"\x00\x00\x00\x00\x09abc"]), Side("avro"), SOURCE)
    assert out.data.type == pa.null() and out.errors.to_pylist() == ["unknown schema id 9"]


def test_a_value_arrow_cannot_hold_is_an_error_for_its_record():
    # A 38-digit decimal that fastavro reads from 16 bytes, typed decimal128(4, 2): 123456.00 does not fit.
    narrow = {"type": "record", "name": "D", "fields": [
        {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}}]}
    wide = {**narrow, "fields": [{"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12,
                                                         "scale": 2}}]}
    values = column([avro_framed(1, narrow, {"d": Decimal("12.34")}),
                     b"\x00\x00\x00\x00\x01" + avro_bytes(wide, {"d": Decimal("123456.00")})])
    out = decode(values, Side("avro"), FakeSource({1: avro_schema(1, narrow)}))
    assert out.data.to_pylist()[0] == {"d": Decimal("12.34")} and out.data.to_pylist()[1] is None
    assert out.errors.to_pylist()[1].startswith("not representable as struct<d: decimal128(4, 2) not null>")


def test_values_written_by_confluent_kafkas_serializer_through_a_registry():
    source = RegistrySource(mock_url())
    serialize = AvroSerializer(source.client(), _json(V2))
    ctx = SerializationContext("users", MessageField.VALUE)
    out = decode(column([serialize({"name": "ann", "age": 3}, ctx), None]), Side("avro"), source)
    assert out.data.to_pylist() == [{"name": "ann", "age": 3}, None] and out.schema_ids.to_pylist() == [1, None]


def test_bare_avro_with_a_schema_file_has_no_schema_ids(tmp_path):
    (tmp_path / "user.avsc").write_text(_json(V2))
    source = FileSource(tmp_path / "user.avsc")
    out = decode(column([avro_bytes(V2, {"name": "a", "age": 1}), b"\x02"]), Side("avro"), source)
    assert out.data.to_pylist()[0] == {"name": "a", "age": 1} and out.data.to_pylist()[1] is None
    assert out.errors.to_pylist()[1].startswith("corrupt payload: ")
    assert out.schema_ids.to_pylist() == [None, None] and out.reader_schema_id is None
    assert pickle.loads(pickle.dumps(source)).schema == source.schema  # travels to Spark workers with its schema
    assert decode(column([None]), Side("avro"), source).data.type.names == ["name", "age"]  # typed, even all null


def test_an_unusable_schema_file_raises_it_is_configuration(tmp_path):
    (tmp_path / "node.avsc").write_text(_json({"type": "record", "name": "N", "fields": [
        {"name": "next", "type": ["null", "N"]}]}))
    with pytest.raises(SchemaError, match="record N contains itself"):
        decode(column([b"\x00"]), Side("avro"), FileSource(tmp_path / "node.avsc"))


def test_side_travels_to_workers_and_refuses_an_unknown_format():
    assert pickle.loads(pickle.dumps(Side("protobuf", strict=True))) == Side("protobuf", strict=True)
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        Side("xml")


def test_format_none_decodes_nothing():
    out = decode(column([b"x", None]), Side("none"))
    assert out.data.type == pa.null() and out.errors.null_count == 2 and (out.decoded, out.nulls) == (0, 1)


def test_large_binary_and_chunked_columns_decode_alike():
    values = [avro_framed(1, V1, {"name": "a"}), None]
    for col in (pa.array(values, pa.large_binary()), pa.chunked_array([values[:1], values[1:]], pa.binary())):
        assert decode(col, Side("avro"), SOURCE).data.to_pylist() == [{"name": "a"}, None]


def _json(schema) -> str:
    import json

    return json.dumps(schema)


def test_decoded_into_an_objects_type_a_record_has_null_for_fields_its_writer_lacks():
    into = pa.struct([pa.field("name", pa.string()), pa.field("age", pa.int32()), pa.field("x", pa.float64())])
    out = decode(column([avro_framed(1, V1, {"name": "a"})]), Side("avro"), SOURCE, into=into)
    assert out.data.type == into and out.data.to_pylist() == [{"name": "a", "age": None, "x": None}]
