"""Restoring a typed topic: byte-exact with its schema ids by default, or into another cluster
whose registry lacks its schemas (disaster recovery), with the archived schemas registered there
and each record's schema id rewritten to the one that registry gives, the payload unchanged.

On the real Kafka, Swift and Spark, with two Schema Registry stand-ins: the session's, which the
records were produced with, and a second one started here, empty but for other schemas (so its
ids are not the archive's), with basic auth. The rewrite itself, without servers: test_schema_ids.py.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from dagster import DagsterInstance
from helpers import produce, read_kafka
from matos_dev.stack.process import free_port
from matos_dev.stack.registry import RegistryServer
from samples import config, fields
from typed_samples import reading

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.restore.plan import Request, RestoreRefused
from matos_dagster.core.restore.registry import target_registry
from matos_dagster.core.restore.run import restore
from matos_dagster.core.schemas import typed, wire
from matos_dagster.core.schemas.sources import RegistrySource
from matos_dagster.core.swift import layout
from matos_dagster.jobs.restore import restore_job

PASSWORD = f"dr-{uuid.uuid4().hex}"  # the target registry's: must show nowhere
UNKNOWN_ID = 2**31 - 2  # an id no registry hands out: its record has no archived schema
N = 14


def datum(i: int) -> dict:
    return {"sensor": f"s{i}", "value": i / 2, **({"unit": "F"} if i >= 8 else {})}


@pytest.fixture
def dr_registry(tmp_path):
    """The other cluster's registry: a fresh stand-in on a free port, with basic auth; stopped whatever happens."""
    server = RegistryServer(tmp_path / "dr-registry", port=free_port(), user="dr", password=PASSWORD)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def archived_avro_topic(kafka, store, spark, new_topic, registry_server) -> tuple[str, str, list[dict | None]]:
    """A topic of Avro values in two schema versions, and three that name no archived schema, archived
    typed: (topic, archive prefix, what each value was serialized from; None where none)."""
    topic = new_topic()
    client = SchemaRegistryClient(registry_server.client_config())
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, reading(topic)), AvroSerializer(client, reading(topic, v2=True))
    sent: list[dict | None] = [datum(i) for i in range(N)]
    values = [(v2 if i >= 8 else v1)(d, ctx) for i, d in enumerate(sent)]
    id1 = wire.split(values[0]).schema_id
    values[3], values[5], values[9], sent[3], sent[5], sent[9] = b"plain text", wire.frame(UNKNOWN_ID, b"\x02x"), \
        None, None, None, None
    # An untyped key that looks framed with an archived id: keys are not typed here, so never rewritten.
    keys = [wire.frame(id1, b"key") if i == 0 else f"k{i}".encode() for i in range(N)]
    produce(kafka, topic, [(k, v, [("h", b"x")]) for k, v in zip(keys, values)])
    cfg = config(topic, value_format="avro", object_bytes=300)  # a few objects
    archive_range(OffsetRange(topic, 0, 0, N), cfg, kafka, store, spark,
                  typing=typed.for_topic(cfg, RegistrySource(registry_server.url)))
    return topic, layout.join(store.params.prefix, cfg.prefix), sent


def occupy(client: SchemaRegistryClient, n: int) -> None:
    """Register n other schemas, so that the registry's next ids are not the archive's."""
    for i in range(n):
        other = json.dumps({"type": "record", "name": f"Other{i}", "fields": [{"name": "x", "type": "long"}]})
        client.register_schema(f"other-{i}-value", RegistrySchema(other, "AVRO"))


def test_restored_into_another_registry_each_record_names_that_registrys_id_and_decodes_there(
        kafka, swift, spark, spark_resource, new_topic, registry_server, dr_registry, monkeypatch):
    with swift.store() as store:
        topic, _, sent = archived_avro_topic(kafka, store, spark, new_topic, registry_server)
    original = read_kafka(kafka, topic, 0)
    archived_ids = sorted({wire.split(r["value"]).schema_id for r in original if not isinstance(
        wire.split(r["value"] or b""), str)} - {UNKNOWN_ID})
    dr = SchemaRegistryClient(dr_registry.client_config())
    occupy(dr, max(archived_ids))  # the target's ids for our schemas come after all of the archive's
    target = f"dr-{uuid.uuid4().hex[:8]}"  # a new topic, created by the restore

    # The job, as an operator runs it: the URL in its config, the credentials in the settings.
    monkeypatch.setenv("MATOS_TARGET_SCHEMA_REGISTRY_USERNAME", "dr")
    monkeypatch.setenv("MATOS_TARGET_SCHEMA_REGISTRY_PASSWORD", PASSWORD)
    with DagsterInstance.ephemeral() as instance:
        result = restore_job().execute_in_process(
            run_config={"ops": {"restore_records": {"config": {
                "topic": topic, "target_topic": target, "target_schema_registry_url": dr_registry.url}}}},
            resources={"kafka": kafka, "swift": swift, "spark": spark_resource}, instance=instance)
        meta = next(e for e in result.events_for_node("restore_records")
                    if e.is_successful_output).step_output_data.metadata
        logs = "\n".join(e.message for e in instance.all_logs(result.run_id) if e.message)
    assert PASSWORD not in logs and PASSWORD not in json.dumps({k: str(v) for k, v in meta.items()})

    # The archived schemas are in the target registry, under the target topic's subject, in order.
    subject = f"{target}-value"
    target_ids = [dr.get_version(subject, v).schema_id for v in dr.get_versions(subject)]
    assert [dr.get_schema(i).schema_str for i in target_ids] == [
        RegistrySource(registry_server.url).get(i).text for i in archived_ids]
    assert not set(target_ids) & set(archived_ids)
    id_map = dict(zip(archived_ids, target_ids))
    assert meta["schema_ids_target"].value == {"value": {str(a): b for a, b in id_map.items()}}

    restored = read_kafka(kafka, target, 0)
    deserialize = AvroDeserializer(dr)  # each record's writer schema: the target registry's, by its id
    ctx = SerializationContext(target, MessageField.VALUE)
    assert len(restored) == len(original) == N
    for before, after, value in zip(original, restored, sent, strict=True):
        assert (after["key"], after["headers"], after["timestamp"]) == (before["key"], before["headers"],
                                                                         before["timestamp"])
        if value is None:  # no magic byte, an id never archived, a tombstone: as archived
            assert after["value"] == before["value"]
            continue
        old, new = wire.split(before["value"]), wire.split(after["value"])
        assert new.schema_id == id_map[old.schema_id] != old.schema_id
        assert after["value"][wire.HEADER:] == before["value"][wire.HEADER:]  # the payload, byte for byte
        assert deserialize(after["value"], ctx) == value
    assert restored[0]["key"] == original[0]["key"]  # framed-looking, but an untyped key
    assert (meta["value_schema_ids_rewritten"].value, meta["value_schema_ids_no_wire_prefix"].value,
            meta["value_schema_ids_id_not_archived"].value) == (N - 3, 1, 1)


def test_without_a_target_registry_a_typed_topic_restores_byte_exact_with_its_schema_ids(
        kafka, swift, spark, new_topic, registry_server):
    with swift.store() as store:
        topic, prefix, _ = archived_avro_topic(kafka, store, spark, new_topic, registry_server)
        report = restore(Request(topic, prefix, target=f"same-{uuid.uuid4().hex[:8]}"), kafka, store, spark)
    assert report.schema_ids == {} and report.schema_id_counts() == {}
    assert fields(read_kafka(kafka, report.target, 0)) == fields(read_kafka(kafka, topic, 0))


def test_a_target_registry_that_cannot_be_reached_or_refuses_the_credentials_fails_the_restore_before_any_record(
        kafka, swift, spark, new_topic, registry_server, dr_registry, monkeypatch):
    monkeypatch.setenv("MATOS_TARGET_SCHEMA_REGISTRY_USERNAME", "dr")
    nothing_there = f"http://127.0.0.1:{free_port()}"
    cases = [(nothing_there, PASSWORD, "could not be reached"),
             (dr_registry.url, "not-the-password", "refused to register archived schema")]
    with swift.store() as store:
        topic, prefix, _ = archived_avro_topic(kafka, store, spark, new_topic, registry_server)
        for url, password, says in cases:
            monkeypatch.setenv("MATOS_TARGET_SCHEMA_REGISTRY_PASSWORD", password)
            target = f"dr-{uuid.uuid4().hex[:8]}"
            req = Request(topic, prefix, target=target, target_registry=target_registry(url, timeout=3, retries=0))
            with pytest.raises(RestoreRefused) as refused:
                restore(req, kafka, store, spark)
            message = str(refused.value)
            assert says in message and "nothing was produced" in message, message
            assert "\n" not in message and password not in message
            # Nothing changed: no target topic, no marker.
            assert target not in kafka.admin().list_topics(timeout=10).topics
            assert kafka.committed(topic, [0], req.marker_group) == {0: None}
    assert "MATOS_TARGET_SCHEMA_REGISTRY_PASSWORD" in message  # the 401's way out
    assert SchemaRegistryClient(dr_registry.client_config()).get_subjects() == []
