"""Fidelity of typed columns: whatever the schema, an archived typed value is the value Confluent's
own deserializer reads from the record's bytes, exactly.

For each schema language a random schema is drawn (tests/typed_strategies.py), with a batch of
random values of it; confluent-kafka's own serializer (AvroSerializer, ProtobufSerializer,
JSONSerializer) writes them to the real Kafka against the Schema Registry stand-in, and
`archive_range` archives the range on the real Kafka, Swift and Spark twice, once per slice
reader (the native one, and the Python one: MATOS_NATIVE_READER=false in the Spark workers'
environment), into two prefixes. Each archive is read back, and for every record:

- the raw bytes are the produced ones, and `<side>_schema_id` the id the serializer framed;
- `<side>_error` is null, and `<side>_data` is what confluent-kafka's deserializer decodes
  from those bytes, mapped as the documentation says (core/schemas/arrow_types.py), compared
  exactly: a decimal with its scale, a timestamp to its unit, a float to its bits;
- the column's Arrow type is the one the mapping gives the schema, nullability included.

`read_table` reads both archives; `read_dataframe` (Spark executors) reads the native one of
Avro and JSON Schema topics and gives the same values, after Spark's documented widening
(core/spark/frames.py). Versions of a random Avro record (a field added, another removed) written
in blocks v1, v2, v3, v1 into one object are each read as their writer wrote them, in the union
of the versions' types; two random record types on one topic (RecordNameStrategy) each in the
member of their name.

Random schemas, one a hypothesis example and one topic each: Avro values are records of any
nesting (unions with null and of several branches, enums, fixed, decimals of bytes and fixed,
date, time-millis/micros, timestamp-millis/micros, local timestamps, uuid, arrays, maps, named
types used twice) and Avro keys any type at all (a bare "bytes" or a map as well as a record);
Protobuf files of nested messages (records of a nested message too), oneofs, proto3
`optional`, repeated fields, maps, open enums, Timestamp, Duration and wrappers; JSON Schemas
of nested objects, arrays, nullable types, `$ref`s and untyped nodes kept as JSON text.
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import contextmanager

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from helpers import missing, produce
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typed_strategies import (
    BARE_BYTES,
    DECIMALS,
    TEMPORAL,
    Typed,
    as_spark,
    avro_schemas,
    canon,
    json_schemas,
    proto_files,
    proto_message,
    proto_pool,
)

from matos_dagster.core.archive import native
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import read_dataframe, read_table
from matos_dagster.core.schemas import typed
from matos_dagster.core.schemas.sources import RegistrySource
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig

READERS = ("native", "python")
RECORDS = 24  # a topic's records: each example's values, and a null value every seventh
EXAMPLES = {"avro": 2, "protobuf": 3, "json_schema": 3, "versions": 2}  # Avro: 2 for each kind of key
pytestmark = pytest.mark.timeout(300)


def examples(fmt: str):
    """Few examples (each one a topic and three Spark jobs), whatever the hypothesis profile."""
    # No shrinking: each example costs seconds of Kafka, Swift and Spark; the first failing one
    # is reported as drawn, with its schema.
    return settings(max_examples=EXAMPLES[fmt], deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.large_base_example])


@contextmanager
def slice_reader(spark, reader: str):
    """The slice reader the Spark tasks use: MATOS_NATIVE_READER in the workers' environment
    (SparkContext.environment goes with every Python task, and workers are pooled by it) and here."""
    flag = "true" if reader == "native" else "false"
    env = spark.sparkContext.environment
    before = env.get("MATOS_NATIVE_READER"), os.environ.get("MATOS_NATIVE_READER")
    env["MATOS_NATIVE_READER"] = os.environ["MATOS_NATIVE_READER"] = flag
    try:
        if reader == "native" and (why := native.why_not()) is not None:
            missing(f"the native reader is not built here ({why}): apt-get install librdkafka-dev gcc, "
                    "then make install")
        yield
    finally:
        for where, old in ((env, before[0]), (os.environ, before[1])):
            if old is None:
                where.pop("MATOS_NATIVE_READER", None)
            else:
                where["MATOS_NATIVE_READER"] = old


def archive_twice(kafka, store, spark, registry, topic: str, sizes: list[int], one_object: bool = False,
                  **formats) -> dict[str, pa.Table]:
    """The topic's records archived once per slice reader (prefix = the reader's name), in objects
    of about a third of them each (each object is typed on its own; `one_object`: all in one), and
    read back."""
    tables = {}
    object_bytes = sum(sizes) + 1 if one_object else max(*sizes, sum(sizes) // 3)
    for reader in READERS:
        cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", prefix=reader, object_bytes=object_bytes,
                          max_record_bytes=object_bytes, **formats)
        with slice_reader(spark, reader):
            done = archive_range(OffsetRange(topic, 0, 0, len(sizes)), cfg, kafka, store, spark,
                                 typing=typed.for_topic(cfg, RegistrySource(registry.url)))
        assert done.reader == reader  # the Spark tasks really read with it
        tables[reader] = read_table(store, layout.join(store.params.prefix, reader), topic)
    return tables


def check(table: pa.Table, side: str, produced: list[bytes | None], t: Typed, decode, spark_table=None) -> None:
    """Every record's typed columns are the deserializer's value of its bytes, exactly."""
    assert table.column(side).to_pylist() == produced  # the raw bytes, unchanged
    field = table.schema.field(f"{side}_data")
    arrow = t.arrow if any(b is not None for b in produced) else pa.null()  # no record: no type
    assert field.type == arrow, f"{side}_data is {field.type}, the schema maps to {arrow}"
    ids = [None if b is None else int.from_bytes(b[1:5], "big") for b in produced]
    assert table.column(f"{side}_schema_id").to_pylist() == ids
    errors = {o: e for o, e in enumerate(table.column(f"{side}_error").to_pylist()) if e is not None}
    assert not errors, f"{side}s that did not decode, by offset: {errors}"
    want = [None if b is None else t.expect(decode(b)) for b in produced]
    got = table.column(f"{side}_data").to_pylist()
    for offset, (g, w) in enumerate(zip(got, want, strict=True)):
        assert canon(g) == canon(w), (f"offset {offset}: {side}_data {g!r} is not {w!r}, the deserializer's "
                                      f"(schema {json.dumps(t.schema)[:2000]})")
    if spark_table is not None:
        spark_got = spark_table.column(f"{side}_data").to_pylist()
        for offset, (g, w) in enumerate(zip(spark_got, want, strict=True)):
            assert canon(g) == canon(as_spark(t.arrow, w)), f"offset {offset}: Spark read {g!r}, not {w!r}"


def with_nulls(values: list) -> list:
    """Every seventh value a Kafka null (a tombstone): null data, and no error."""
    return [None if i % 7 == 3 else v for i, v in enumerate(values)]


def client(registry) -> SchemaRegistryClient:
    return SchemaRegistryClient(registry.client_config())


def read_back(kafka, swift, spark, registry, topic, keys, values, spark_read: bool, one_object: bool = False,
              **formats):
    produce(kafka, topic, [(k, v, []) for k, v in zip(keys, values, strict=True)], 0)
    with swift.store() as store:
        sizes = [len(k or b"") + len(v or b"") for k, v in zip(keys, values)]
        tables = archive_twice(kafka, store, spark, registry, topic, sizes, one_object, **formats)
        frame = None
        if spark_read:
            frame = read_dataframe(spark, store.params, layout.join(store.params.prefix, "native"), topic).toArrow()
            frame = frame.sort_by("offset")
    return tables, frame


# --------------------------------------------------------------------------- Avro


@pytest.mark.parametrize("key", ["bytes", "any"])
@examples("avro")
@given(data=st.data())
def test_any_avro_value_and_key_archived_is_what_avro_deserializer_reads(kafka, swift, spark, new_topic,
                                                                         registry_server, key, data):
    """An Avro record of any schema written by AvroSerializer is archived, by either slice reader,
    as the value AvroDeserializer reads from its bytes: decimals to their scale, dates, times and
    timestamps to their unit, union members, enum symbols, fixed bytes, map entries in order. So is
    its key, of a bare "bytes" schema (which Confluent's serializers frame as it is, not
    Avro-encoded) or of any Avro type. read_table and read_dataframe agree.

    With the bare bytes key the value always has a decimal, so it is read record by record
    (fastavro); with any key it may have none, and is then read a column at a time
    (avro_columns.py): both ways are held to the deserializer's values."""
    value_t = data.draw(avro_schemas(always=(DECIMALS, TEMPORAL) if key == "bytes" else (TEMPORAL,)), "value schema")
    key_t = BARE_BYTES if key == "bytes" else data.draw(avro_schemas(top="any"), "key schema")
    values = with_nulls(data.draw(st.lists(value_t.values, min_size=RECORDS, max_size=RECORDS), "values"))
    keys = data.draw(st.lists(key_t.values, min_size=RECORDS, max_size=RECORDS), "keys")
    topic, registry = new_topic(), client(registry_server)
    write_value = AvroSerializer(registry, json.dumps(value_t.schema))
    write_key = AvroSerializer(registry, json.dumps(key_t.schema))
    value_ctx, key_ctx = SerializationContext(topic, MessageField.VALUE), SerializationContext(topic, MessageField.KEY)
    produced_values = [write_value(v, value_ctx) for v in values]
    produced_keys = [write_key(k, key_ctx) for k in keys]

    tables, frame = read_back(kafka, swift, spark, registry_server, topic, produced_keys, produced_values, True,
                              key_format="avro", value_format="avro")

    read = AvroDeserializer(registry, return_record_name=True)  # union records tagged with their name

    def read_key(b: bytes):
        # AvroSerializer frames an empty bare "bytes" value as the 5-byte header alone, which its
        # deserializer refuses (it wants more than 5 bytes); Java's reads it as empty bytes.
        return b"" if key_t.schema == "bytes" and len(b) == 5 else read(b, key_ctx)
    for reader, table in tables.items():
        check(table, "value", produced_values, value_t, lambda b: read(b, value_ctx),
              frame if reader == "native" else None)
        check(table, "key", produced_keys, key_t, read_key, frame if reader == "native" else None)


# --------------------------------------------------------------------------- Avro: versions, record types

VERSIONS = (1, 2, 3, 1)  # the order the topic's records come in, a block each: back to v1 at the end


@examples("versions")
@given(data=st.data())
def test_avro_versions_interleaved_in_one_object_each_record_keeps_every_field_its_writer_set(
        kafka, swift, spark, new_topic, registry_server, data):
    """Versions of a random record schema written in blocks v1, v2, v3, v1 into ONE object: v2 adds a
    field, v3 removes another. Every record is archived, by either reader, as AvroDeserializer reads
    it with its writer's schema: the fields its writer set, null for the others; the object's type
    is the union of the versions' (v3's fields first, then the one only older versions have, a field
    some version lacks nullable)."""
    t = data.draw(avro_schemas(), "the fullest version")
    names = [n for n, _ in t.fields]
    # v1 lacks the last field (a date, time or timestamp: it defines no named type a later field uses),
    # v3 the one before it (nothing after it but that last field could use a name it defines).
    kept = {1: names[:-1], 2: names, 3: names[:-2] + names[-1:]}
    schemas = {v: {**t.schema, "fields": [f for f in t.schema["fields"] if f["name"] in kept[v]]} for v in kept}
    full = data.draw(st.lists(t.values, min_size=RECORDS, max_size=RECORDS), "values")
    block = RECORDS // len(VERSIONS)
    versions = [VERSIONS[min(i // block, len(VERSIONS) - 1)] for i in range(RECORDS)]
    topic, registry = new_topic(), client(registry_server)
    ctx = SerializationContext(topic, MessageField.VALUE)
    write = {v: AvroSerializer(registry, json.dumps(schemas[v])) for v in kept}
    produced = with_nulls([write[v]({n: x[n] for n in kept[v]}, ctx) for v, x in zip(versions, full)])

    tables, _ = read_back(kafka, swift, spark, registry_server, topic, [None] * RECORDS, produced, False,
                          one_object=True, value_format="avro")

    fields = dict(t.fields)
    order = kept[3] + [names[-2]]  # the newest version's fields, then the one only older ones have
    union = pa.struct([pa.field(n, fields[n].arrow, nullable=fields[n].nullable or n in (names[-1], names[-2]))
                       for n in order])
    read = AvroDeserializer(registry, return_record_name=True)  # no reader schema: each writer's own
    for table in tables.values():
        assert table.schema.field("value_data").type == union
        assert table.column("value").to_pylist() == produced
        assert table.column("value_error").null_count == RECORDS
        for offset, (b, got) in enumerate(zip(produced, table.column("value_data").to_pylist())):
            if b is None:
                assert got is None
                continue
            v = read(b, ctx)
            want = {n: None if n not in v or v[n] is None else fields[n].expect(v[n]) for n in order}
            assert canon(got) == canon(want), f"offset {offset} (v{versions[offset]}): {got!r} is not {want!r}"


@examples("avro")
@given(data=st.data())
def test_several_avro_record_types_on_one_topic_are_each_typed_in_a_member_of_their_name(
        kafka, swift, spark, new_topic, registry_server, data):
    """Two random record types on one topic (RecordNameStrategy: a subject per record name), their
    records alternating: with `value_types: by_record_name` every record is typed, in the member of
    its record's name, exactly as AvroDeserializer reads it; the other member null."""
    from confluent_kafka.schema_registry import record_subject_name_strategy

    types = {name: data.draw(avro_schemas(always=(TEMPORAL,)), name) for name in ("Placed", "Refunded")}
    for name, t in types.items():
        t.schema["name"] = name
    topic, registry = new_topic(), client(registry_server)
    ctx = SerializationContext(topic, MessageField.VALUE)
    conf = {"subject.name.strategy": record_subject_name_strategy}
    write = {n: AvroSerializer(registry, json.dumps(t.schema), conf=conf) for n, t in types.items()}
    drawn = {n: data.draw(st.lists(t.values, min_size=RECORDS // 2, max_size=RECORDS // 2), n) for n, t in types.items()}
    which = ["Placed" if i % 3 else "Refunded" for i in range(RECORDS)]
    produced = with_nulls([write[n](drawn[n][i // 2], ctx) for i, n in enumerate(which)])

    tables, _ = read_back(kafka, swift, spark, registry_server, topic, [None] * RECORDS, produced, False,
                          one_object=True, value_format="avro", value_types="by_record_name")

    read = AvroDeserializer(registry, return_record_name=True)
    for table in tables.values():
        members = table.schema.field("value_data").type
        present = sorted({n for n, b in zip(which, produced) if b is not None})
        assert [(f.name, f.type, f.nullable) for f in members] == [(n, types[n].arrow, True) for n in present]
        assert table.column("value_error").null_count == RECORDS
        for offset, (b, got) in enumerate(zip(produced, table.column("value_data").to_pylist())):
            want = None if b is None else {n: types[n].expect(read(b, ctx)) if n == which[offset] else None
                                           for n in present}
            assert canon(got) == canon(want), f"offset {offset}: {got!r} is not {want!r}"


# --------------------------------------------------------------------------- Protobuf


@examples("protobuf")
@given(data=st.data())
def test_any_protobuf_message_archived_is_what_protobuf_deserializer_reads(kafka, swift, spark, new_topic,
                                                                           registry_server, data):
    """A Protobuf message of any file (nested messages, oneofs, proto3 optional, repeated fields,
    maps, open enums, Timestamp, Duration, wrappers; the records' message maybe a nested one)
    written by ProtobufSerializer is archived, by either slice reader, as the message
    ProtobufDeserializer reads from its bytes: unset fields with presence null, enums by name (an
    unknown number as its text), Timestamps to the nanosecond, unsigned integers unsigned."""
    file, name = data.draw(proto_files(), "file")
    desc = proto_pool(file).FindMessageTypeByName(name)
    arrow, messages, expect = proto_message(desc)
    t = Typed(str(file), messages, arrow, True, expect)
    values = with_nulls(data.draw(st.lists(messages, min_size=RECORDS, max_size=RECORDS), "messages"))
    topic, registry = new_topic(), client(registry_server)
    cls = type(values[0] if values[0] is not None else values[1])
    ctx = SerializationContext(topic, MessageField.VALUE)
    write = ProtobufSerializer(cls, registry, {"use.deprecated.format": False})
    produced = [write(v, ctx) for v in values]

    # Not read with Spark: a Timestamp's nanoseconds do not fit Spark's microseconds, and
    # read_dataframe's cast to them refuses to lose them (the Spark task fails).
    tables, _ = read_back(kafka, swift, spark, registry_server, topic, [None] * len(produced), produced, False,
                          value_format="protobuf")

    read = ProtobufDeserializer(cls, {"use.deprecated.format": False}, registry)
    for table in tables.values():
        check(table, "value", produced, t, lambda b: read(b, ctx))


# --------------------------------------------------------------------------- JSON Schema


@examples("json_schema")
@given(data=st.data())
def test_any_json_document_archived_is_what_json_deserializer_reads(kafka, swift, spark, new_topic,
                                                                    registry_server, data):
    """A JSON document valid for any JSON Schema (nested objects, arrays, nullable types, $refs,
    properties absent or unnamed, untyped nodes) written by JSONSerializer is archived, by either
    slice reader, as JSONDeserializer reads it: absent properties null, integers as int64, numbers
    as float64, untyped nodes as their JSON text. read_table and read_dataframe agree."""
    t = data.draw(json_schemas(), "schema")
    values = with_nulls(data.draw(st.lists(t.values, min_size=RECORDS, max_size=RECORDS), "documents"))
    topic, registry = new_topic(), client(registry_server)
    ctx = SerializationContext(topic, MessageField.VALUE)
    write = JSONSerializer(json.dumps(t.schema), registry)
    produced = [write(v, ctx) for v in values]

    tables, frame = read_back(kafka, swift, spark, registry_server, topic, [None] * len(produced), produced, True,
                              value_format="json_schema")

    read = JSONDeserializer(None, schema_registry_client=registry)  # the writer's schema, from the registry
    for reader, table in tables.items():
        check(table, "value", produced, t, lambda b: read(b, ctx), frame if reader == "native" else None)
