"""Restoring into another schema registry, without servers: the schema ids a restore maps, the
rewrite of a record's wire prefix (its 4 id bytes, nothing else), and the registration that
builds the map, against confluent-kafka's in-memory mock registry.

The same on the real Kafka, Swift, Spark and two registry stand-ins: test_restore_schemas.py.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema as RegistrySchema

from matos_dagster.core.restore import schema_ids
from matos_dagster.core.restore.plan import RestoreRefused
from matos_dagster.core.restore.registry import register_archived, shown_url, target_registry
from matos_dagster.core.restore.schema_ids import NO_PREFIX, REWRITTEN, SAME, UNARCHIVED, rewrite
from matos_dagster.core.schemas import wire
from matos_dagster.core.schemas.errors import UnknownSchema
from matos_dagster.core.schemas.sources import AVRO, PROTOBUF, Reference, RegistrySource, Schema

PAYLOAD = b"\x06abc\x00\x00\xff"  # any bytes: the rewrite never looks at them


# --------------------------------------------------------------------------- the rewrite


def test_a_record_naming_a_mapped_id_gets_the_target_id_in_its_prefix_and_its_payload_unchanged():
    new, outcome = rewrite(wire.frame(3, PAYLOAD), {3: 70000})
    assert outcome == REWRITTEN
    assert new == b"\x00" + (70000).to_bytes(4, "big") + PAYLOAD
    assert wire.split(new) == (70000, (), PAYLOAD)


def test_a_protobuf_records_message_indexes_stay_after_the_rewritten_id():
    archived = wire.frame(5, PAYLOAD, message_indexes=[1, 2])
    new, outcome = rewrite(archived, {5: 9})
    assert outcome == REWRITTEN and new[5:] == archived[5:]
    assert wire.split(new, protobuf=True) == (9, (1, 2), PAYLOAD)


@pytest.mark.parametrize("value", [b"plain text", b"", b"\x00\x00\x00", b"\x01" + bytes(20)],
                         ids=["no magic byte", "empty", "cut short", "a schema GUID"])
def test_a_record_without_the_wire_prefix_is_restored_as_archived_and_counted(value):
    assert rewrite(value, {0: 1, 3: 7}) == (value, NO_PREFIX)


def test_a_record_naming_an_id_that_was_never_archived_is_restored_as_archived_and_counted():
    archived = wire.frame(41, PAYLOAD)
    assert rewrite(archived, {3: 7}) == (archived, UNARCHIVED)


def test_an_id_the_target_gave_back_unchanged_leaves_the_bytes_as_they_are():
    archived = wire.frame(3, PAYLOAD)
    assert rewrite(archived, {3: 3}) == (archived, SAME)


def test_a_null_key_or_value_is_neither_rewritten_nor_counted():
    counts: dict[str, int] = {}
    assert schema_ids.rewrite_all([None, wire.frame(3, b"x"), b"?"], {3: 4}, counts) == [
        None, wire.frame(4, b"x"), b"?"]
    assert counts == {REWRITTEN: 1, NO_PREFIX: 1}


# --------------------------------------------------------------------------- which ids, where


def typed(side: str, fmt: str, ids: list) -> dict:
    return {side: {"format": fmt, "schema_ids": ids, "decoded": 1, "failed": 0, "nulls": 0}}


def test_the_ids_to_map_are_those_the_manifests_list_per_typed_side_with_their_schema_type():
    objects = [
        {"name": "a", "typed": {**typed("key", "protobuf", [8]), **typed("value", "avro", [4, 2])}},
        {"name": "b", "typed": typed("value", "avro", [5, 4])},
        {"name": "c"},  # archived before the topic was typed
        {"name": "d", "typed": typed("value", "json", [])},  # schemaless JSON names no schema
    ]
    assert schema_ids.used(objects) == {"key": {8: PROTOBUF}, "value": {2: AVRO, 4: AVRO, 5: AVRO}}
    assert schema_ids.used([{"name": "e", "typed": typed("value", "json", [])}]) == {}


def test_an_object_maps_only_the_ids_its_records_named():
    ids = {"value": {3: 30, 4: 40}, "key": {8: 80}}
    # A topic typed with a schema file names no id: its bare values may start with a 0 byte by chance.
    bare = {"name": "f", "typed": typed("value", "avro", [])}
    assert schema_ids.for_object(ids, bare) == {"value": {}, "key": {8: 80}}
    assert rewrite(wire.frame(3, PAYLOAD), schema_ids.for_object(ids, bare)["value"])[1] == UNARCHIVED
    assert schema_ids.for_object(ids, {"name": "g", "typed": typed("value", "avro", [4, 99])}) == {
        "value": {4: 40}, "key": {8: 80}}


def test_counts_add_up_per_side_and_outcome():
    total: dict = {}
    schema_ids.add_counts(total, {"value": {REWRITTEN: 2, NO_PREFIX: 1}})
    schema_ids.add_counts(total, {"value": {REWRITTEN: 3}, "key": {SAME: 1}})
    assert total == {"value": {REWRITTEN: 5, NO_PREFIX: 1}, "key": {SAME: 1}}
    assert schema_ids.subject("orders", "value") == "orders-value"


# --------------------------------------------------------------------------- registering in the target


def avro(name: str, fields=("a",)) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": f, "type": "string"} for f in fields]})


class Archived:
    """An archive's schemas (ArchivedSource's `get`), by id."""

    def __init__(self, *schemas: Schema):
        self.schemas = {s.id: s for s in schemas}

    def get(self, schema_id: int, schema_type: str = AVRO) -> Schema:
        if schema_id not in self.schemas:
            raise UnknownSchema(schema_id)
        return self.schemas[schema_id]


@pytest.fixture
def mock_registry() -> RegistrySource:
    """confluent-kafka's in-memory registry, a new one per test, holding another schema already."""
    source = RegistrySource(f"mock://{uuid.uuid4().hex}")
    source.client().register_schema("other-value", RegistrySchema(avro("Other"), AVRO))
    return source


def test_each_archived_schema_is_registered_under_the_target_topics_subject_and_mapped(mock_registry):
    address = Schema(21, AVRO, avro("Address", ("street",)))
    person = Schema(22, AVRO, json.dumps({"type": "record", "name": "Person",
                                          "fields": [{"name": "home", "type": "Address"}]}),
                    (Reference("Address", "addresses-value", 4, address),))
    reading = Schema(23, AVRO, avro("Reading"))
    archive = Archived(address, person, reading)
    said: list[str] = []
    done = register_archived(archive, mock_registry, "restored", {"value": {22: AVRO, 23: AVRO, 24: AVRO}},
                             say=said.append)

    client = mock_registry.client()
    ids = done.ids["value"]
    assert set(ids) == {22, 23}
    for archived_id, target_id in ids.items():
        assert client.get_schema(target_id).schema_str == archive.get(archived_id).text
    # The reference first, under its own subject, and the schema names it by that subject's version.
    (ref,) = client.get_schema(ids[22]).references
    assert (ref.name, ref.subject) == ("Address", "addresses-value")
    assert client.get_version("addresses-value", ref.version).schema.schema_str == address.text
    assert sorted(client.get_subjects()) == ["addresses-value", "other-value", "restored-value"]
    # 24 was never archived: its records are restored unchanged, and the run says so.
    assert done.unarchived == {"value": {24: "its schema is not archived"}}
    assert any("24 (its schema is not archived)" in s and "unchanged" in s for s in said)

    # Registering again (a rerun) gives the same ids.
    again = register_archived(archive, mock_registry, "restored", {"value": {22: AVRO, 23: AVRO}})
    assert again.ids == done.ids


def test_a_dry_run_registers_nothing(mock_registry):
    said: list[str] = []
    done = register_archived(Archived(Schema(5, AVRO, avro("R"))), mock_registry, "restored", {"value": {5: AVRO}},
                             dry_run=True, say=said.append)
    assert done.ids == {} and mock_registry.client().get_subjects() == ["other-value"]
    assert any(s.startswith("dry run: would register the archived schemas value: 5") for s in said)


def test_records_of_an_untyped_archive_need_no_registry():
    said: list[str] = []
    nowhere = RegistrySource("http://127.0.0.1:9", timeout=1, retries=0)  # never asked
    assert register_archived(Archived(), nowhere, "t", {}, say=said.append).ids == {}
    assert "nothing to register" in said[0]


def test_the_target_registry_comes_from_the_option_with_the_settings_credentials(monkeypatch):
    assert target_registry("") is None and target_registry("  ") is None
    monkeypatch.setenv("MATOS_TARGET_SCHEMA_REGISTRY_USERNAME", "dr-user")
    monkeypatch.setenv("MATOS_TARGET_SCHEMA_REGISTRY_PASSWORD", "s3cr3t-dr")
    source = target_registry("https://registry.dr.example:8081")
    assert (source.url, source.username, source.password) == ("https://registry.dr.example:8081", "dr-user",
                                                                "s3cr3t-dr")
    assert "s3cr3t-dr" not in repr(source)
    with pytest.raises(RestoreRefused, match=r"^target_schema_registry_url is 'registry:8081': it takes `http"):
        target_registry("registry:8081")
    with pytest.raises(RestoreRefused) as refused:
        target_registry("ftp://me:s3cr3t-dr@registry")
    assert "s3cr3t-dr" not in str(refused.value)
    assert shown_url("https://me:pw@registry.dr.example:8081/x") == "https://registry.dr.example:8081/x"
