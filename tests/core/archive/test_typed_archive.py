"""Typed columns beside the raw bytes: a topic's Avro values archived as data, not only bytes.

A typed topic's objects hold every column of an untyped one, byte for byte the records Kafka
has, then `value_schema_id`, `value_data` and `value_error`: what each record decodes to, or
why it does not. The manifest counts both, the schemas the records name are archived beside
them, and the registry's absence fails the run instead of marking records bad. On the real
Kafka, Swift and Spark, with the project's Schema Registry stand-in; the topics file's
refusals and the per-object reader schema without servers.
"""

from __future__ import annotations

import io
import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from helpers import manifests, produce, read_archive, read_kafka
from matos_dev.stack.process import free_port
from samples import config
from typed_samples import reading

from matos_dagster.core.archive.range_run import Undecodable, archive_range
from matos_dagster.core.archive.slice_task import SliceJob
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.objects import write_object
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.schemas import typed, wire
from matos_dagster.core.schemas.decode import Side, decode
from matos_dagster.core.schemas.errors import RegistryUnavailable
from matos_dagster.core.schemas.sources import ArchivedSource, RegistrySource, to_document
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.manifest import Manifest
from matos_dagster.core.topics import TopicsFileError, load, parse

UNKNOWN_ID = 2**31 - 2  # an id the stand-in never hands out


def table(data: bytes) -> pa.Table:
    return pq.read_table(io.BytesIO(data))


# --------------------------------------------------------------------------- on the real stack


def test_avro_values_are_archived_as_typed_columns_beside_their_unchanged_bytes(
        kafka, swift, spark, new_topic, registry_server):
    topic = new_topic()
    client = SchemaRegistryClient(registry_server.client_config())
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1, v2 = AvroSerializer(client, reading(topic)), AvroSerializer(client, reading(topic, v2=True))
    values = ([v1({"sensor": f"s{i}", "value": i / 2}, ctx) for i in range(6)]
              + [b"plain text", wire.frame(UNKNOWN_ID, b"\x02x")]  # no magic byte; an id no registry has
              + [v2({"sensor": f"s{i}", "value": i / 2, "unit": "F"}, ctx) for i in range(6, 12)]
              + [b"\x00\x00"])  # a header cut short
    produce(kafka, topic, [(f"k{i}".encode(), v, [("h", b"x")]) for i, v in enumerate(values)])
    id1, id2 = wire.split(values[0]).schema_id, wire.split(values[-2]).schema_id
    cfg = config(topic, value_format="avro", object_bytes=100, max_record_bytes=60)  # objects of ~4 records
    typing = typed.for_topic(cfg, RegistrySource(registry_server.url))
    with swift.store() as store:
        done = archive_range(OffsetRange(topic, 0, 0, 15), cfg, kafka, store, spark, typing=typing)
        m = done.manifest
        assert len(m["objects"]) >= 3

        # The raw bytes are Kafka's, every record, as for an untyped topic.
        assert read_archive(store, m) == read_kafka(kafka, topic, 0)

        reasons = {6: "no magic byte", 7: f"unknown schema id {UNKNOWN_ID}", 14: "too short: 2 of the header's 5 bytes"}
        for o in m["objects"]:
            t = table(store.get(o["name"]))
            # SCHEMA, then the three typed columns of the value (no data column where nothing decoded).
            assert pa.schema(list(t.schema)[:len(SCHEMA)]).equals(SCHEMA)
            decoded = o["typed"]["value"]["decoded"]
            assert t.schema.names[len(SCHEMA):] == (["value_schema_id", "value_data", "value_error"] if decoded
                                                    else ["value_schema_id", "value_error"])
            assert (t.schema.field("value_schema_id").type, t.schema.field("value_error").type) == (pa.int32(),
                                                                                                     pa.string())
            # Each record is read with its writer's schema (AvroDeserializer without a reader schema): it
            # keeps every field its writer set; the object's type holds its versions' fields, null where
            # a record's writer has none. The reader schema id named is the newest of them.
            reader = o["typed"]["value"]["reader_schema_id"]
            good = [wire.split(v).schema_id for v in values[o["first_offset"]:o["last_offset"] + 1]
                    if not isinstance(wire.split(v), str) and wire.split(v).schema_id != UNKNOWN_ID]
            assert reader == (max(good) if good else None)
            meta = {b"format": b"avro", **({b"reader_schema_id": str(reader).encode()} if reader else {})}
            assert t.schema.field("value_data" if decoded else "value_error").metadata == meta
            deserialize = AvroDeserializer(client)
            fields = t.schema.field("value_data").type.names if decoded else []
            for row in t.to_pylist():
                if row["offset"] in reasons:
                    assert row.get("value_data") is None and row["value_error"] == reasons[row["offset"]]
                else:
                    assert row["value_error"] is None
                    assert row["value_schema_id"] == (id1 if row["offset"] < 6 else id2)
                    assert row["value_data"] == {f: deserialize(row["value"], ctx).get(f) for f in fields}

        # The manifest counts them, per object and in all; it reads back as the typed manifest.
        assert m["typed"] == {"value": {"format": "avro", "schema_ids": sorted([id1, id2, UNKNOWN_ID]),
                                        "decoded": 12, "failed": 3, "nulls": 0}}
        assert sum(o["typed"]["value"]["failed"] for o in m["objects"]) == 3
        assert Manifest.from_json(store.get_json(done.manifest_name)).to_json() == m

        # The schemas are archived beside the records: the archive decodes without the registry.
        prefix = layout.join(store.params.prefix, cfg.prefix)
        for sid in (id1, id2):
            assert store.get_json(layout.schema_name(prefix, topic, sid)) == to_document(
                RegistrySource(registry_server.url).get(sid))
        assert store.head(layout.schema_name(prefix, topic, UNKNOWN_ID)) is None
        readers = [o["typed"]["value"]["reader_schema_id"] for o in m["objects"]]
        assert readers[0] == id1 and id2 in readers  # a v1 object first, then objects of v2
        newer = table(store.get(m["objects"][readers.index(id2)]["name"]))
        offline = decode(newer.column("value"), Side("avro"), ArchivedSource(store, prefix, topic))
        assert offline.data.to_pylist() == newer.column("value_data").to_pylist()

        # The same records untyped: objects of SCHEMA, the typed objects' first columns byte for byte.
        untyped = archive_range(OffsetRange(topic, 0, 0, 15), config(topic, object_bytes=100, max_record_bytes=60,
                                                                      prefix="untyped"), kafka, store, spark)
        assert "typed" not in untyped.manifest and "typed" not in untyped.manifest["objects"][0]
        for plain, o in zip(untyped.manifest["objects"], m["objects"], strict=True):
            data = store.get(plain["name"])
            assert table(data).schema.remove_metadata().equals(SCHEMA)
            raw = table(store.get(o["name"])).select(SCHEMA.names).cast(SCHEMA)
            assert data == write_object(raw.combine_chunks().to_batches(), "parquet")[0]


def test_an_unreachable_registry_fails_the_range_and_commits_nothing(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", wire.frame(1, b"\x02x\x00"), [])] * 5)
    cfg = config(topic, value_format="avro")
    nowhere = RegistrySource(f"http://127.0.0.1:{free_port()}", timeout=2, retries=0)  # nothing listens there
    with swift.store() as store:
        with pytest.raises(RegistryUnavailable, match="could not be reached") as failed:
            archive_range(OffsetRange(topic, 0, 0, 5), cfg, kafka, store, spark, typing=typed.for_topic(cfg, nowhere))
        assert "nothing was committed" in str(failed.value)
        assert not manifests(store, topic)
    assert kafka.committed(topic, [0], cfg.group) == {0: None}


def test_with_decode_strict_a_record_that_does_not_decode_fails_the_range_naming_its_offset(
        kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(None, b'{"n": 1}', []), (None, b'{"n": 2}', []), (None, b"oops", []), (None, b"{}", [])])
    cfg = config(topic, value_format="json", decode_strict=True)
    with swift.store() as store:
        with pytest.raises(Undecodable) as failed:
            archive_range(OffsetRange(topic, 0, 0, 4), cfg, kafka, store, spark)
        message = str(failed.value)
        assert "\n" not in message
        assert message.startswith(f"record {topic}/0@2: its value does not decode (corrupt payload: not JSON:")
        assert "decode_strict" in message
        assert not manifests(store, topic)
    assert kafka.committed(topic, [0], cfg.group) == {0: None}


# --------------------------------------------------------------------------- no servers


def test_an_objects_type_holds_every_field_of_every_version_in_it_whichever_chunk_brings_it():
    source = RegistrySource(f"mock://typed-{uuid.uuid4().hex[:8]}")  # confluent-kafka's in-memory registry
    ctx = SerializationContext("t", MessageField.VALUE)
    v1, v2 = AvroSerializer(source.client(), reading("t")), AvroSerializer(source.client(), reading("t", v2=True))
    records = [v1({"sensor": "a", "value": 1.0}, ctx), v2({"sensor": "b", "value": 2.0, "unit": "F"}, ctx),
               v1({"sensor": "c", "value": 3.0}, ctx)]
    typing = typed.Typing(value=Side("avro"), value_source=source)

    def object_of(values, chunk_bytes):
        batch = Batch("t", 0, chunk_bytes=chunk_bytes, fmt="parquet", typing=typing)
        for i, v in enumerate(values):
            batch.add(i, 1, 1000 + i, None, v, [], len(v))
        return table(batch.writer("parquet").finish()), batch.typed()["value"]

    # A chunk a record or one chunk: the same object. The v2 record's `unit` is there, the v1
    # records' is null (their writer never set it), whichever chunk the v2 record came in.
    want = [{"sensor": "a", "value": 1.0, "unit": None}, {"sensor": "b", "value": 2.0, "unit": "F"},
            {"sensor": "c", "value": 3.0, "unit": None}]
    one_by_one, counts = object_of(records, chunk_bytes=1)
    assert counts["reader_schema_id"] == 2 and counts["schema_ids"] == [1, 2] and counts["decoded"] == 3
    assert one_by_one.column("value_data").to_pylist() == want
    at_once, _ = object_of(records, chunk_bytes=10**6)
    assert at_once.equals(one_by_one) and at_once.schema.equals(one_by_one.schema, check_metadata=True)
    # Chunks of bad records only come first: written with no data column, then again with it.
    t, counts = object_of([b"bad", b"worse", *records], chunk_bytes=1)
    assert t.column("value_error").to_pylist() == ["no magic byte", "no magic byte", None, None, None]
    assert t.column("value_data").to_pylist() == [None, None, *want]
    assert counts["reader_schema_id"] == 2 and (counts["decoded"], counts["failed"]) == (3, 2)
    # No record decodes in the whole object: no type to give the data, so no data column (an Iceberg
    # table has no null type); the errors are there, and the error column says the side's format.
    t, counts = object_of([b"bad", b"worse"], chunk_bytes=1)
    assert t.column_names[-2:] == ["value_schema_id", "value_error"] and "value_data" not in t.column_names
    assert t.column("value_error").to_pylist() == ["no magic byte", "no magic byte"]
    assert t.schema.field("value_error").metadata == {b"format": b"avro"}
    assert (counts["decoded"], counts["failed"], counts["reader_schema_id"]) == (0, 2, None)


def test_a_version_whose_field_changed_its_type_ends_the_object_before_its_first_record():
    source = RegistrySource(f"mock://typed-{uuid.uuid4().hex[:8]}")
    ctx = SerializationContext("t", MessageField.VALUE)
    changed = json.loads(reading("t"))
    changed["fields"][1]["type"] = "string"  # `value`: a double, then a string
    v1, v3 = AvroSerializer(source.client(), reading("t")), AvroSerializer(source.client(), json.dumps(changed))
    records = [v1({"sensor": "a", "value": 1.0}, ctx), v3({"sensor": "b", "value": "high"}, ctx),
               v1({"sensor": "c", "value": 3.0}, ctx)]
    batch = Batch("t", 0, fmt="parquet", typing=typed.Typing(value=Side("avro"), value_source=source))
    for i, v in enumerate(records):
        batch.add(i, 1, 1000 + i, None, v, [], len(v))
    batch.seal()
    rest = batch.overflow
    assert rest is not None and rest.column("offset").to_pylist() == [1, 2]  # the next object's
    assert batch.stats()["records"] == 1 and batch.nbytes == len(records[0])
    assert table(batch.writer("parquet").finish()).column("value_data").to_pylist() == [{"sensor": "a", "value": 1.0}]


def test_a_registry_password_is_in_no_repr():
    source = RegistrySource("https://registry.example", username="key", password="s3cr3t-value")
    typing = typed.Typing(value=Side("avro"), value_source=source)
    job = SliceJob(OffsetRange("t", 0, 0, 1), "d", {}, "g", None, typing=typing)
    assert "s3cr3t-value" not in repr(typing) and "s3cr3t-value" not in repr(job)


AVSC = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]})


@pytest.mark.parametrize("entry, registry_url, message", [
    ({"value_format": "avr"}, "http://r:8081",
     "value_format must be one of avro, protobuf, json_schema, json, none, got 'avr'"),
    ({"key_format": "json", "format": "jsonl"}, "", "key_format json needs `format: parquet`"),
    ({"value_format": "avro", "value_schema_file": "missing.avsc"}, "",
     "value_schema_file {dir}/missing.avsc does not exist"),
    ({"value_format": "avro"}, "", "value_format avro takes its schemas from a schema registry and "
                                   "MATOS_SCHEMA_REGISTRY_URL is empty: set it, or give value_schema_file"),
    ({"value_format": "json", "value_schema_file": "r.avsc"}, "", "value_schema_file is set but value_format is json"),
    ({"value_format": "json_schema", "value_schema_file": "r.avsc"}, "",
     "value_schema_file r.avsc holds a schema of type AVRO, not one for value_format json_schema"),
    ({"value_format": "avro", "decode_strict": "yes"}, "http://r:8081", "decode_strict must be true or false"),
])
def test_the_topics_file_refuses_typed_columns_it_cannot_write_in_one_line(tmp_path, entry, registry_url, message):
    (tmp_path / "r.avsc").write_text(AVSC)
    with pytest.raises(TopicsFileError) as refused:
        parse({"topics": [{"name": "t", **entry}]}, registry_url=registry_url, base=tmp_path)
    assert message.format(dir=tmp_path) in str(refused.value) and "\n" not in str(refused.value)


def test_a_schema_file_is_found_beside_the_topics_file_and_a_registry_format_needs_the_url_only(tmp_path):
    (tmp_path / "r.avsc").write_text(AVSC)
    (tmp_path / "topics.yaml").write_text("topics:\n  - {name: files, value_format: avro, value_schema_file: r.avsc}\n"
                                          "  - {name: plain}\n")
    files, plain = load(tmp_path / "topics.yaml", registry_url="")
    assert files.value_schema_file == str(tmp_path / "r.avsc") and plain.value_format == "none"
    assert typed.for_topic(plain) is None
    assert typed.for_topic(files).value_source.schema.text == AVSC  # a FileSource: values carry no wire header
    (registered,) = parse({"topics": [{"name": "t", "value_format": "avro", "decode_strict": True}]},
                          registry_url="http://r:8081")
    assert registered.decode_strict and registered.value_schema_file == ""


def test_a_typed_runs_metadata_plots_the_records_decoded_and_failed_per_side():
    from dagster import MetadataValue

    from matos_dagster.assets.archive import metadata
    from matos_dagster.core.archive.range_run import Archived

    doc = {"records": 15, "bytes": 1, "record_bytes": 1, "objects": [], "first_offset": 0, "last_offset": 14,
           "min_timestamp": None, "max_timestamp": None,
           "typed": {"value": {"format": "avro", "schema_ids": [4, 5], "decoded": 12, "failed": 3, "nulls": 0}}}
    meta = metadata(Archived(OffsetRange("t", 0, 0, 15), "m", doc, False, None, 15, 1.0), "u", now=0.0)
    assert (meta["value_decoded"], meta["value_failed"]) == (MetadataValue.int(12), MetadataValue.int(3))
    assert meta["value_schema_ids"] == MetadataValue.text("4, 5") and "key_decoded" not in meta


def test_the_manifests_typed_counts_are_optional_and_checked():
    from matos_dagster.core.swift.manifest import ManifestError, build

    counts = {"format": "json", "reader_schema_id": None, "schema_ids": [], "decoded": 2, "failed": 1, "nulls": 0}
    obj = {"name": "a", "records": 3, "bytes": 1, "md5": "x", "first_offset": 0, "last_offset": 2,
           "min_timestamp": None, "max_timestamp": None}
    r = OffsetRange("t", 0, 0, 3)
    plain, doc = build(r, "parquet", [obj]), build(r, "parquet", [{**obj, "typed": {"value": counts}}])
    assert "typed" not in plain and Manifest.from_json(plain).to_json() == plain  # untyped: as before
    # Version 3 or later: a matos-dagster from before typed columns (it reads 1 and 2) asks to be
    # upgraded, instead of misreading the objects' typed columns.
    assert doc["version"] >= 3
    assert doc["typed"] == {"value": {"format": "json", "schema_ids": [], "decoded": 2, "failed": 1, "nulls": 0}}
    assert Manifest.from_json(doc).to_json() == doc
    with pytest.raises(ManifestError, match="typed.value must have the keys"):
        Manifest.from_json({**doc, "typed": {"value": {"decoded": 2}}})
