"""A key given as its decoded value matches the records whose key a Schema Registry serializer wrote,
whichever version of the key subject wrote it (core/erase/registry_keys.py), on the real stack."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from helpers import produce, read_kafka, table_rows

from matos_dagster.core import reader
from matos_dagster.core.archive.batch import archive_batch
from matos_dagster.core.erase import keys, registry_keys, request
from matos_dagster.core.erase.run import carry_out
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.schemas.sources import RegistrySource
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig

SECRET = "an erasure key for the tests, 32b"
KEY_V1 = {"type": "record", "name": "CustomerKey", "fields": [{"name": "id", "type": "int"}]}
KEY_V2 = {**KEY_V1, "fields": KEY_V1["fields"] + [{"name": "region", "type": "string", "default": "eu"}]}
KEY_JSON = {"type": "object", "properties": {"id": {"type": "integer"}, "region": {"type": "string"}}}


def key_message_class():
    """A Protobuf key message built at run time (no protoc): CustomerKey {int32 id = 1; string region = 2;}."""
    proto = descriptor_pb2.FileDescriptorProto(name=f"keys_{uuid.uuid4().hex[:8]}.proto", package="matos.keys",
                                               syntax="proto3")
    message = proto.message_type.add(name="CustomerKey")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="id", number=1, type=field.TYPE_INT32, label=field.LABEL_OPTIONAL)
    message.field.add(name="region", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("matos.keys.CustomerKey"))


def test_a_decoded_key_matches_its_records_written_by_every_version_of_the_key_schema_and_no_other(
        kafka, swift, spark, new_topic, registry_server, monkeypatch):
    monkeypatch.setenv(keys.SETTING, SECRET)
    client = SchemaRegistryClient(registry_server.client_config())
    registry = RegistrySource(registry_server.url)
    avro, js, pb = new_topic(), new_topic(), new_topic()
    # Avro keys: customer 42 written by version 1 and by version 2 (its region the default), others around it.
    v1, v2 = (AvroSerializer(client, json.dumps(s)) for s in (KEY_V1, KEY_V2))
    ctx = SerializationContext(avro, MessageField.KEY)
    avro_keys = [v1({"id": i}, ctx) for i in (41, 42, 43)] + [v2({"id": i, "region": "eu"}, ctx) for i in (42, 44)] + \
        [v2({"id": 42, "region": "us"}, ctx)]  # another key: its region differs
    # JSON Schema keys, as Confluent's serializer writes them.
    jctx = SerializationContext(js, MessageField.KEY)
    write = JSONSerializer(json.dumps(KEY_JSON), client)
    json_keys = [write({"id": i, "region": "eu"}, jctx) for i in (42, 7, 42)]
    # Protobuf keys, as Confluent's serializer writes them.
    key_class = key_message_class()
    write_pb = ProtobufSerializer(key_class, client, {"use.deprecated.format": False})
    pctx = SerializationContext(pb, MessageField.KEY)
    pb_keys = [write_pb(key_class(id=i, region=r), pctx) for i, r in ((42, "eu"), (42, "us"), (42, "eu"))]
    produce(kafka, avro, [(k, b"v", []) for k in avro_keys], partition=0)
    produce(kafka, js, [(k, b"v", []) for k in json_keys], partition=0)
    produce(kafka, pb, [(k, b"v", []) for k in pb_keys], partition=0)
    cfgs = {t: TopicConfig(name=t, group=f"g-{uuid.uuid4().hex[:8]}", key_format=f)
            for t, f in ((avro, "avro"), (js, "json_schema"), (pb, "protobuf"))}

    given = '{"id": 42, "region": "eu"}'
    raw = [r for t in (avro, js, pb) for r in registry_keys.encodings(given, cfgs[t], registry)]
    assert len(raw) == 2 + 2 + 1  # the Avro subject's two versions; the JSON one in two spellings; Protobuf's

    with swift.store() as store:
        # Archived untyped, in one Spark job: matching is on the raw bytes, whatever columns the objects have.
        archived = archive_batch([(OffsetRange(t, 0, 0, n), dataclasses.replace(cfgs[t], key_format="none"))
                                  for t, n in ((avro, len(avro_keys)), (js, len(json_keys)), (pb, len(pb_keys)))],
                                 kafka, store, spark)
        assert all(o.ok for o in archived.outcomes)
        ends = {t: {0: kafka.watermarks(t, [0])[0][1]} for t in (avro, js, pb)}
        req = request.make(keys.erasure_key(SECRET), raw, "ticket 9", ends)
        request.write(store, store.params.prefix, req)

        done = carry_out(req.id, store, cfgs, SECRET)

        assert {(p.topic, p.records) for p in done.partitions} == {(avro, 2), (js, 2), (pb, 2)}
        for t, erased in ((avro, {1, 3}), (js, {0, 2}), (pb, {0, 2})):
            got = table_rows(reader.read_table(store, layout.join(store.params.prefix, cfgs[t].prefix), t,
                                               partitions=[0]))
            assert [r["offset"] for r in got] == [r["offset"] for r in read_kafka(kafka, t, 0)
                                                  if r["offset"] not in erased]


@pytest.mark.parametrize("key_format, message", [
    ("none", "has key_format none, not registry-encoded"),
    ("avro", "no versions of subject"),
])
def test_a_decoded_key_of_a_topic_without_registry_keys_is_refused_in_one_line_that_does_not_repeat_it(
        registry_server, key_format, message):
    cfg = TopicConfig(name=f"never-{uuid.uuid4().hex[:8]}", key_format=key_format)
    with pytest.raises(keys.BadKey, match=message) as e:
        registry_keys.encodings('{"id": 4711}', cfg, RegistrySource(registry_server.url))
    assert "\n" not in str(e.value) and "4711" not in str(e.value)
    with pytest.raises(keys.BadKey, match="give the decoded key as JSON"):
        registry_keys.encodings("{id: 4711", dataclasses.replace(cfg, key_format="avro"),
                                RegistrySource(registry_server.url))
