"""The Schema Registry stand-in (dev/matos_dev/stack/registry.py) answers confluent-kafka's own
SchemaRegistryClient, serializers and deserializers as a Confluent Schema Registry does.

It is the project's stand-in, not Confluent's registry: it checks no compatibility and
converts no schema format (see its docstring). Each test names its own subjects (a unique
topic): the session's stand-in is shared.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from matos_dev.stack import process
from matos_dev.stack.registry import RegistryServer

from matos_dagster.core.settings import PROJECT_ROOT

pytestmark = pytest.mark.timeout(120)

def _topic() -> str:
    return f"readings-{uuid.uuid4().hex[:8]}"


def reading(topic: str) -> dict:
    """An Avro schema of this test's own: ids are global, and the session's stand-in is shared."""
    return {"type": "record", "name": "Reading", "namespace": f"matos.test.{topic.replace('-', '_')}",
            "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}]}


def reading_v2(topic: str) -> dict:
    """Evolved: one more field, with a default (a compatible change; the stand-in would not check)."""
    v1 = reading(topic)
    return {**v1, "fields": [*v1["fields"], {"name": "unit", "type": "string", "default": "C"}]}


def json_reading(topic: str) -> dict:
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": f"Reading {topic}", "type": "object",
            "properties": {"sensor": {"type": "string"}, "value": {"type": "number"}},
            "required": ["sensor", "value"]}


def _ctx(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def _client(server: RegistryServer, **conf) -> SchemaRegistryClient:
    """A new client, so nothing comes from another client's cache."""
    return SchemaRegistryClient({**server.client_config(), **conf})


def _framed_id(data: bytes) -> int:
    """The schema id of Confluent's wire format: magic byte 0, then the id on 4 bytes, big-endian."""
    assert data[0] == 0
    return int.from_bytes(data[1:5], "big")


def _reading_message_class():
    """A protobuf message class built at run time (no protoc): matos.test.Reading, with a
    google.protobuf.Timestamp field, so the schema has an import as real ones do."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(name="matos/test/reading.proto", package="matos.test",
                                               syntax="proto3", dependency=["google/protobuf/timestamp.proto"])
    message = proto.message_type.add(name="Reading")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="sensor", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="value", number=2, type=field.TYPE_DOUBLE, label=field.LABEL_OPTIONAL)
    message.field.add(name="at", number=3, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                      type_name=".google.protobuf.Timestamp")
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("matos.test.Reading"))


# --------------------------------------------------------------------------- serializers


def test_avro_records_written_with_auto_registration_are_read_back(registry_server):
    topic = _topic()
    serialize = AvroSerializer(_client(registry_server), json.dumps(reading(topic)))
    data = serialize({"sensor": "t1", "value": 21.5}, _ctx(topic))

    registered = _client(registry_server).get_latest_version(f"{topic}-value")
    assert (registered.version, registered.schema_id) == (1, _framed_id(data))
    assert registered.schema.schema_type == "AVRO"
    deserialize = AvroDeserializer(_client(registry_server))  # the writer's schema comes from the registry
    assert deserialize(data, _ctx(topic)) == {"sensor": "t1", "value": 21.5}


def test_protobuf_messages_written_with_auto_registration_are_read_back(registry_server):
    topic, reading_class = _topic(), _reading_message_class()
    message = reading_class(sensor="t1", value=21.5)
    message.at.FromDatetime(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    data = ProtobufSerializer(reading_class, _client(registry_server))(message, _ctx(topic))

    registered = _client(registry_server).get_latest_version(f"{topic}-value")
    assert (registered.version, registered.schema_id) == (1, _framed_id(data))
    assert registered.schema.schema_type == "PROTOBUF"
    deserialize = ProtobufDeserializer(reading_class, schema_registry_client=_client(registry_server))
    assert deserialize(data, _ctx(topic)) == message


def test_json_documents_written_with_auto_registration_are_read_back(registry_server):
    topic = _topic()
    data = JSONSerializer(json.dumps(json_reading(topic)), _client(registry_server))({"sensor": "t1", "value": 21.5},
                                                                              _ctx(topic))

    registered = _client(registry_server).get_latest_version(f"{topic}-value")
    assert (registered.version, registered.schema_id) == (1, _framed_id(data))
    assert registered.schema.schema_type == "JSON"
    deserialize = JSONDeserializer(None, schema_registry_client=_client(registry_server))  # writer's schema
    assert deserialize(data, _ctx(topic)) == {"sensor": "t1", "value": 21.5}


# --------------------------------------------------------------------------- ids and versions


def test_the_same_schema_has_one_id_and_an_evolved_one_the_next_id_and_version(registry_server):
    client, topic = _client(registry_server), _topic()
    subject = f"{topic}-value"
    first = client.register_schema(subject, Schema(json.dumps(reading(topic))))
    assert client.register_schema(subject, Schema(json.dumps(reading(topic)))) == first
    # Same schema written otherwise (spacing, key order): still the same one.
    assert _client(registry_server).register_schema(subject, Schema(json.dumps(reading(topic), indent=4, sort_keys=True))) \
        == first
    # Ids are global, as Confluent's: the same schema under another subject has the same id.
    assert client.register_schema(f"{subject}-copy", Schema(json.dumps(reading(topic)))) == first

    second = client.register_schema(subject, Schema(json.dumps(reading_v2(topic))))
    assert second > first
    assert client.get_versions(subject) == [1, 2]
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    assert json.loads(latest.schema.schema_str) == reading_v2(topic)
    assert client.get_version(subject, 1).schema_id == first
    assert client.lookup_schema(subject, Schema(json.dumps(reading(topic)))).version == 1
    assert {subject, f"{subject}-copy"} <= set(client.get_subjects())
    assert {(v.subject, v.version) for v in client.get_schema_versions(first)} == {(subject, 1), (f"{subject}-copy", 1)}


def test_references_are_stored_and_must_exist(registry_server):
    client, topic = _client(registry_server), _topic()
    unit = {"type": "enum", "name": "Unit", "namespace": "matos.test", "symbols": ["C", "F"], "doc": topic}
    client.register_schema(f"{topic}-unit", Schema(json.dumps(unit)))
    v1 = reading(topic)
    with_unit = {**v1, "fields": [*v1["fields"], {"name": "unit", "type": "matos.test.Unit"}]}
    reference = {"name": "matos.test.Unit", "subject": f"{topic}-unit", "version": 1}
    with_ref = Schema.from_dict({"schema": json.dumps(with_unit), "references": [reference]})
    schema_id = client.register_schema(f"{topic}-value", with_ref)

    assert [r.to_dict() for r in _client(registry_server).get_schema(schema_id).references] == [reference]
    data = AvroSerializer(_client(registry_server), with_ref, conf={"auto.register.schemas": False})(
        {"sensor": "t1", "value": 1.0, "unit": "F"}, _ctx(topic))
    assert AvroDeserializer(_client(registry_server))(data, _ctx(topic))["unit"] == "F"
    missing = Schema.from_dict({"schema": json.dumps(with_unit),
                                "references": [{**reference, "subject": f"{topic}-nothing"}]})
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-other", missing)
    assert (refused.value.http_status_code, refused.value.error_code) == (422, 42201)


def test_what_is_not_there_answers_confluent_error_codes(registry_server):
    client, topic = _client(registry_server), _topic()
    subject = f"{topic}-value"
    for call, status, code in [
        (lambda: client.get_latest_version(subject), 404, 40401),  # subject not found
        (lambda: client.get_versions(subject), 404, 40401),
        (lambda: client.get_schema(999_999), 404, 40403),  # schema not found
        (lambda: client.register_schema(subject, Schema("{not json")), 422, 42201),  # invalid schema
    ]:
        with pytest.raises(SchemaRegistryError) as error:
            call()
        assert (error.value.http_status_code, error.value.error_code) == (status, code)
    client.register_schema(subject, Schema(json.dumps(reading(topic))))
    with pytest.raises(SchemaRegistryError) as error:
        client.get_version(subject, 7)
    assert error.value.error_code == 40402  # version not found
    with pytest.raises(SchemaRegistryError) as error:
        client.lookup_schema(subject, Schema(json.dumps(reading_v2(topic))))
    assert error.value.error_code == 40403


def test_the_compatibility_level_is_stored_not_enforced(registry_server):
    client, topic = _client(registry_server), _topic()
    subject = f"{topic}-value"
    assert client.get_compatibility() == "BACKWARD"  # Confluent's default
    client.register_schema(subject, Schema(json.dumps(reading(topic))))
    with pytest.raises(SchemaRegistryError) as error:
        client.get_compatibility(subject)
    assert error.value.error_code == 40408  # no subject-level level set
    assert client.set_compatibility(subject, "full") == {"compatibility": "FULL"}
    assert client.get_compatibility(subject) == "FULL"
    # Not enforced: an incompatible schema (a new field without a default) is still registered.
    v1 = reading(topic)
    breaking = {**v1, "fields": [*v1["fields"], {"name": "unit", "type": "string"}]}
    assert client.register_schema(subject, Schema(json.dumps(breaking))) > 0
    with pytest.raises(SchemaRegistryError) as error:
        client.set_compatibility(subject, "SOMETIMES")
    assert error.value.error_code == 42203


# --------------------------------------------------------------------------- deletion


def test_a_soft_deleted_schema_still_decodes_a_permanently_deleted_one_answers_40403(registry_server):
    topic = _topic()
    subject = f"{topic}-value"
    data = AvroSerializer(_client(registry_server), json.dumps(reading(topic)))({"sensor": "t1", "value": 1.0}, _ctx(topic))
    schema_id, client = _framed_id(data), _client(registry_server)

    with pytest.raises(SchemaRegistryError) as error:
        client.delete_subject(subject, permanent=True)
    assert error.value.error_code == 40405  # soft delete first, as Confluent's
    assert client.delete_subject(subject) == [1]
    assert subject not in client.get_subjects() and subject in client.get_subjects(deleted=True)
    assert AvroDeserializer(_client(registry_server))(data, _ctx(topic)) == {"sensor": "t1", "value": 1.0}

    assert client.delete_subject(subject, permanent=True) == [1]
    with pytest.raises(SchemaRegistryError) as gone:
        _client(registry_server).get_schema(schema_id)
    assert (gone.value.http_status_code, gone.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as undecodable:
        AvroDeserializer(_client(registry_server))(data, _ctx(topic))
    assert undecodable.value.error_code == 40403
    assert subject not in client.get_subjects(deleted=True)


def test_one_version_is_deleted_softly_then_permanently(registry_server):
    client, topic = _client(registry_server), _topic()
    subject = f"{topic}-value"
    first = client.register_schema(subject, Schema(json.dumps(reading(topic))))
    client.register_schema(subject, Schema(json.dumps(reading_v2(topic))))
    assert client.delete_version(subject, 1) == 1
    assert client.get_versions(subject) == [2] and client.get_versions(subject, deleted=True) == [1, 2]
    assert client.get_version(subject, 1, deleted=True).schema_id == first
    assert client.delete_version(subject, 1, permanent=True) == 1
    with pytest.raises(SchemaRegistryError) as gone:
        _client(registry_server).get_schema(first)
    assert gone.value.error_code == 40403


# --------------------------------------------------------------------------- its process


def test_basic_auth_refuses_a_wrong_password(tmp_path):
    server = RegistryServer(tmp_path / "registry", port=process.free_port(), user="matos", password="s3cret-pw")
    server.start()
    try:
        assert _client(server).register_schema("a-value", Schema(json.dumps(reading("a")))) == 1
        for conf in ({"basic.auth.user.info": "matos:wrong"}, {"basic.auth.user.info": ":"}):  # ":": none
            with pytest.raises(SchemaRegistryError) as refused:
                SchemaRegistryClient({"url": server.url, **conf}).get_subjects()
            assert (refused.value.http_status_code, refused.value.error_code) == (401, 401)
        # The password is on no command line and in no file of its data folder.
        assert b"s3cret-pw" not in Path(f"/proc/{server.pid()}/cmdline").read_bytes()
        assert not [f for f in server.data_dir.iterdir() if b"s3cret-pw" in f.read_bytes()]
    finally:
        server.stop()


def test_a_restart_keeps_the_ids_and_hands_out_new_ones_after_them(tmp_path):
    topic = "a"
    server = RegistryServer(tmp_path / "registry", port=process.free_port())
    server.start()
    try:
        client = _client(server)
        first = client.register_schema("a-value", Schema(json.dumps(reading(topic))))
        second = client.register_schema("a-value", Schema(json.dumps(reading_v2(topic))))
        pid = server.pid()
    finally:
        server.stop()
    assert not server.running() and not process.port_open(server.port)

    again = RegistryServer(tmp_path / "registry")  # its port is the one saved in the data folder
    again.start()
    try:
        assert again.port == server.port and again.pid() != pid
        client = _client(again)
        assert json.loads(client.get_schema(first).schema_str) == reading(topic)
        assert client.get_versions("a-value") == [1, 2]
        assert client.register_schema("a-value", Schema(json.dumps(reading_v2(topic)))) == second
        assert client.register_schema("b-value", Schema(json.dumps(json_reading(topic)), "JSON")) == second + 1
    finally:
        again.stop()


def test_a_taken_port_starts_nothing(tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        server = RegistryServer(tmp_path / "registry", port=listener.getsockname()[1])
        with pytest.raises(RuntimeError, match="already in use"):
            server.start()
    assert not server.pid_file.exists() and not server.running()


def test_the_local_stack_shows_and_stops_it(tmp_path, monkeypatch):
    """`status` lists it (named as the stand-in it is), `down` stops it by its PID."""
    monkeypatch.setenv("MATOS_DEVSTACK_DIR", str(tmp_path / "devstack"))
    monkeypatch.setenv("MATOS_DEVSTACK_REGISTRY_PORT", str(process.free_port()))
    from matos_dev.stack.stack import registry_server

    server = registry_server()
    server.start()
    try:
        cli = [sys.executable, "-m", "matos_dev.stack"]
        status = subprocess.run([*cli, "status"], capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT,
                                check=False)
        (line,) = [line for line in status.stdout.splitlines() if line.startswith("Schema Registry stand-in ")]
        assert f"running  PID {server.pid()}" in line and f"port {server.port}" in line
        assert status.returncode == 1  # the rest of the stack is not running
        pid = server.pid()
        down = subprocess.run([*cli, "down"], capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT,
                              check=False)
        assert down.returncode == 0 and f"stopped Schema Registry stand-in PID {pid}" in down.stdout, down.stderr
        assert not server.running() and not process.port_open(server.port)
    finally:
        server.stop()
