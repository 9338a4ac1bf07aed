"""Where schemas come from: a registry (an unknown id is a bad record, an unreachable registry is
not), the archive's own copies beside the topic, a schema file for topics without a registry."""

from __future__ import annotations

import json
import pickle
import socket

import pytest
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaReference
from confluent_kafka.schema_registry.error import SchemaRegistryError
from schema_support import avro_framed, avro_schema, column, mock_url

from matos_dagster.core.schemas import sources
from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.errors import RegistryUnavailable, SchemaError, UnknownSchema
from matos_dagster.core.schemas.sources import (
    AVRO,
    ArchivedSource,
    FileSource,
    Reference,
    RegistrySource,
    Schema,
    to_document,
)
from matos_dagster.core.swift import layout

POINT = {"type": "record", "name": "Point", "namespace": "geo", "fields": [{"name": "x", "type": "int"}]}
PAIR = {"type": "record", "name": "Pair", "namespace": "geo", "fields": [{"name": "a", "type": "geo.Point"}]}


def test_the_archived_schema_object_name():
    assert layout.schema_name("archive", "orders", 7) == "archive/topic=orders/_schemas/7.json"
    assert layout.is_bookkeeping(layout.schema_name("archive", "orders", 7).rsplit("/", 1)[0])


def test_a_registry_schema_is_asked_once_per_process():
    source = RegistrySource(mock_url())
    schema_id = source.client().register_schema("points-value", RegistrySchema(json.dumps(POINT), "AVRO"))
    calls = []
    client = source.client()
    real = client.get_schema
    client.get_schema = lambda *a, **k: calls.append(a) or real(*a, **k)
    first = source.get(schema_id, AVRO)
    assert first == Schema(schema_id, AVRO, json.dumps(POINT)) and source.get(schema_id) is first
    assert RegistrySource(source.url).get(schema_id) is first and len(calls) == 1  # another instance, same registry


def test_references_are_resolved_and_their_named_types_used():
    source = RegistrySource(mock_url())
    client = source.client()
    client.register_schema("point", RegistrySchema(json.dumps(POINT), "AVRO"))
    pair_id = client.register_schema("pairs-value", RegistrySchema(
        json.dumps(PAIR), "AVRO", [SchemaReference("geo.Point", "point", 1)]))
    schema = source.get(pair_id)
    assert [(r.name, r.subject, r.version, r.schema.text) for r in schema.references] == [
        ("geo.Point", "point", 1, json.dumps(POINT))]
    out = decode(column([avro_framed(pair_id, {**PAIR, "fields": [{"name": "a", "type": POINT}]}, {"a": {"x": 3}})]),
                 Side("avro"), source)
    assert out.data.to_pylist() == [{"a": {"x": 3}}]


def test_an_unknown_id_is_a_bad_record():
    source = RegistrySource(mock_url())
    with pytest.raises(UnknownSchema, match="^unknown schema id 42$"):
        source.get(42)
    assert decode(column([b"\x00\x00\x00\x00\x2a"]), Side("avro"), source).errors.to_pylist() == [
        "unknown schema id 42"]


@pytest.mark.parametrize("error, expected", [
    (SchemaRegistryError(404, 40403, "Schema not found"), UnknownSchema),
    (SchemaRegistryError(404, -1, "Unknown Schema Registry Error: <html>nginx</html>"), RegistryUnavailable),
    (SchemaRegistryError(401, 401, "Unauthorized"), RegistryUnavailable),
    (SchemaRegistryError(500, 50001, "Error in the backend data store"), RegistryUnavailable),
])
def test_what_a_registry_answer_means(error, expected):
    source = RegistrySource(mock_url())

    def refuse(*args, **kwargs):
        raise error

    source.client().get_schema = refuse
    with pytest.raises(expected):
        source.get(1)


def test_a_registry_that_cannot_be_reached_is_unavailable_and_propagates():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    source = RegistrySource(f"http://127.0.0.1:{port}", retries=0, timeout=2)
    with pytest.raises(RegistryUnavailable, match=f"schema registry http://127.0.0.1:{port} could not be reached"):
        decode(column([b"\x00\x00\x00\x00\x01"]), Side("avro"), source)


def test_a_registry_source_pickles_without_its_client_and_hides_its_password():
    source = RegistrySource("https://registry:8081", username="u", password="secret", ca_file="/ca.pem")
    assert pickle.loads(pickle.dumps(source)) == source and "secret" not in repr(source)


class FakeStore:
    def __init__(self):
        self.objects: dict[str, dict] = {}

    def get_json(self, name):
        return self.objects.get(name)


def test_archived_schemas_are_read_back_with_their_references():
    store = FakeStore()
    point = avro_schema(11, POINT)
    pair = Schema(12, AVRO, json.dumps(PAIR), (Reference("geo.Point", "point", 1, point),))
    for s in (point, pair):
        store.objects[layout.schema_name("arch", "pairs", s.id)] = to_document(s)
    source = ArchivedSource(store, "arch", "pairs")
    assert source.get(12) == pair
    assert store.objects["arch/topic=pairs/_schemas/12.json"] == {
        "id": 12, "schemaType": "AVRO", "schema": json.dumps(PAIR),
        "references": [{"name": "geo.Point", "subject": "point", "version": 1, "id": 11}]}
    with pytest.raises(UnknownSchema, match="^unknown schema id 13$"):
        source.get(13)
    del store.objects["arch/topic=pairs/_schemas/11.json"]
    with pytest.raises(UnknownSchema, match=r"schema 12: its reference geo.Point \(schema 11\) is not archived"):
        ArchivedSource(store, "arch", "pairs").get(12)


def test_an_archived_object_of_another_id_is_refused():
    store = FakeStore()
    store.objects[layout.schema_name("arch", "t", 3)] = to_document(avro_schema(4, POINT))
    with pytest.raises(SchemaError, match="is not a schema document of id 3"):
        ArchivedSource(store, "arch", "t").get(3)


def test_schema_files_by_extension(tmp_path):
    (tmp_path / "p.avsc").write_text(json.dumps(POINT))
    (tmp_path / "p.json").write_text('{"type": "string"}')
    (tmp_path / "p.xml").write_text("<schema/>")
    (tmp_path / "p.desc").write_bytes(b"\xff\xff")
    assert FileSource(tmp_path / "p.avsc").schema == Schema(None, AVRO, json.dumps(POINT))
    assert FileSource(tmp_path / "p.json").schema.schema_type == "JSON"
    assert FileSource(tmp_path / "p.json").framed is False
    with pytest.raises(SchemaError, match="not a schema file"):
        FileSource(tmp_path / "p.xml")
    with pytest.raises(SchemaError, match="not a Protobuf descriptor set"):
        FileSource(tmp_path / "p.desc")


def test_the_package_imports_no_pandas_and_no_dagster():
    import subprocess
    import sys

    code = ("import sys, matos_dagster.core.schemas.decode, matos_dagster.core.schemas.arrow_types; "
            "print(sorted(m for m in ('pandas', 'dagster') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert sources.__name__  # the module under test is importable as the tests import it


def test_a_registry_url_holding_a_user_and_password_is_refused_in_one_line_that_shows_neither(monkeypatch):
    """Else the password would be in RegistryUnavailable's message (kept in the run's events by
    Dagster) and in every repr of the source, a restore's included."""
    from matos_dagster.core import settings
    from matos_dagster.core.restore.plan import RestoreRefused
    from matos_dagster.core.restore.registry import target_registry

    url = "https://api-key:s3cr3t-in-url@registry.example:8081"
    (problem,) = [p for p in settings.problems({"MATOS_SCHEMA_REGISTRY_URL": url}, connections=False)
                  if p.startswith("MATOS_SCHEMA_REGISTRY_URL")]
    assert problem.startswith("MATOS_SCHEMA_REGISTRY_URL is 'https://registry.example:8081': it takes ")
    assert "MATOS_SCHEMA_REGISTRY_USERNAME and MATOS_SCHEMA_REGISTRY_PASSWORD" in problem
    for refusal in (SchemaError, RestoreRefused):
        with pytest.raises(refusal) as refused:
            RegistrySource(url) if refusal is SchemaError else target_registry(url)
        message = str(refused.value)
        assert "s3cr3t" not in message and "api-key" not in message and "\n" not in message
        assert "PASSWORD" in message
    assert not settings.problems({"MATOS_SCHEMA_REGISTRY_URL": "https://registry.example:8081/a@b"}, connections=False)  # @ in a path
