"""A typed topic as users have it, on the real Kafka, Swift and Spark: a schema that evolves inside
one object, its versions coming back, and records no decoder can take.

Records are written by confluent-kafka's own serializers against the Schema Registry stand-in (bad
ones by hand, as a broken producer writes them), archived by `archive_range` with the Iceberg
table kept, then compacted. Every record keeps every field its writer set, in the objects,
`read_table`, compaction's output and the Iceberg table (DuckDB's answer), and no record fails a
range: each bad one is archived raw with its reason, the others typed.
"""

from __future__ import annotations

import io
import json
import struct
import uuid

import pyarrow.parquet as pq
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from helpers import produce

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.compact.run import compact_topic
from matos_dagster.core.iceberg.queries import duckdb_connection
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import read_table
from matos_dagster.core.schemas import typed
from matos_dagster.core.schemas.sources import RegistrySource
from matos_dagster.core.schemas.wire import frame
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig

pytestmark = pytest.mark.timeout(300)

V1 = {"type": "record", "name": "Event", "namespace": "evolution", "fields": [
    {"name": "id", "type": "long"}, {"name": "payload", "type": "string"}, {"name": "region", "type": "string"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "channel", "type": ["null", "string"], "default": None}]}  # added
V3 = {**V2, "fields": [f for f in V2["fields"] if f["name"] != "region"]}  # removed (it had no default)
PAYLOAD = 2000  # bytes of a record's payload: the first 4 MiB chunk of the second object is v1 alone


def table_fields(tables: Tables, topic: str) -> list[str]:
    """The fields of the topic's Iceberg table's `value_data`."""
    return [f.name for f in tables.table(topic).schema().find_field("value_data").field_type.fields]


@pytest.fixture
def tables_on(monkeypatch, tmp_path):
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")


def config(topic: str, **kw) -> TopicConfig:
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", compact_min_age_s=0.0, **kw)


def test_an_evolving_topic_keeps_every_field_its_writer_set_in_objects_readers_compaction_and_the_table(
        kafka, swift, spark, new_topic, registry_server, tables_on):
    topic = new_topic()
    client = SchemaRegistryClient(registry_server.client_config())
    ctx = SerializationContext(topic, MessageField.VALUE)
    write = {v: AvroSerializer(client, json.dumps(s)) for v, s in ((1, V1), (2, V2), (3, V3))}

    def record(v: int, i: int) -> bytes:
        fields = {"id": i, "payload": f"{i:08d}".ljust(PAYLOAD, "."), "region": f"r{i % 3}", "channel": f"c{i % 5}"}
        return write[v]({k: x for k, x in fields.items() if k in {f["name"] for f in (V1, V2, V3)[v - 1]["fields"]}},
                        ctx)

    # [0, 20): v1 alone, an object of its own. [20, ...): v1 past the first 4 MiB chunk, then v2, v3 and v1 again.
    versions = [1] * 20 + [1] * 2200 + [2] * 100 + [3] * 100 + [1] * 100
    values = [record(v, i) for i, v in enumerate(versions)]
    produce(kafka, topic, [(None, v, []) for v in values], 0)
    cfg = config(topic, value_format="avro")
    typing = typed.for_topic(cfg, RegistrySource(registry_server.url))
    read = AvroDeserializer(client)  # no reader schema: each record as its writer wrote it
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        tables = Tables(store)
        first = archive_range(OffsetRange(topic, 0, 0, 20), cfg, kafka, store, spark, typing=typing)
        assert table_fields(tables, topic) == ["id", "payload", "region"]
        second = archive_range(OffsetRange(topic, 0, 20, len(values)), cfg, kafka, store, spark, typing=typing)
        (obj,) = second.manifest["objects"]  # every version in one object
        assert obj["typed"]["value"]["decoded"] == len(values) - 20

        def expected(offset: int) -> dict:
            v = read(values[offset], ctx)
            return {"id": v["id"], "payload": v["payload"], "channel": v.get("channel"), "region": v.get("region")}

        def check(rows: list[dict], where: str, first: int = 0) -> None:
            assert [r["offset"] for r in rows] == list(range(first, len(values))), where
            for r in rows:
                assert r["value_error"] is None and r["value_data"] == expected(r["offset"]), (where, r["offset"])

        # The first object has v1's fields; the second every version's, v3's first, `region` (only
        # older versions have it) last.
        alone = pq.read_table(io.BytesIO(store.get(first.manifest["objects"][0]["name"])))
        assert [r["value_data"] for r in alone.to_pylist()] == [
            {k: x for k, x in expected(i).items() if k != "channel"} for i in range(20)]
        data = pq.read_table(io.BytesIO(store.get(obj["name"])))
        assert data.schema.field("value_data").type.names == ["id", "payload", "channel", "region"]
        check(data.to_pylist(), "the object", first=20)
        check(read_table(store, prefix, topic).to_pylist(), "read_table")

        # The table gained `channel` (and kept `region`); DuckDB reads every field of every record.
        assert table_fields(tables, topic) == ["id", "payload", "region", "channel"]

        def duckdb_rows() -> list[dict]:
            con = duckdb_connection(tables.s3)
            try:
                got = con.execute(f"SELECT \"offset\", value_data, value_error FROM iceberg_scan("
                                  f"'{tables.table(topic).metadata_location}') ORDER BY 1").fetch_arrow_table()
            finally:
                con.close()
            return [{**r, "value_data": {k: r["value_data"][k] for k in ("id", "payload", "channel", "region")}}
                    for r in got.to_pylist()]
        check(duckdb_rows(), "the Iceberg table")

        # Compaction merges both ranges into one object holding every field of every record.
        merged_bytes = second.manifest["record_bytes"] + 1  # both ranges reach it, one does not
        done = compact_topic(config(topic, value_format="avro", compact_bytes=merged_bytes),
                             kafka.committed(topic, [0], cfg.group), store, spark)
        assert done.partitions[0].groups == [(0, len(values))]
        doc = store.get_json(layout.manifest_name(prefix, OffsetRange(topic, 0, 0, len(values))))
        (merged,) = doc["objects"]
        check(pq.read_table(io.BytesIO(store.get(merged["name"]))).to_pylist(), "compaction's object")
        check(duckdb_rows(), "the Iceberg table after compaction")


def test_no_record_stops_a_partition_each_bad_one_is_archived_raw_with_its_reason(
        kafka, swift, spark, new_topic, registry_server, tables_on):
    """Schemaless JSON with a lone surrogate, nesting 100,000 deep, an integer past int64, and fields
    null or [] in a whole first range; a JSON Schema number of 401 digits; an Avro union's double
    branch: every range is archived, its Iceberg table kept, each bad record raw with its reason."""
    client = SchemaRegistryClient(registry_server.client_config())
    bad_json = [b'{"n": 1, "s": "\\ud800"}', b"[" * 100_000 + b"]" * 100_000, b'{"n": 18446744073709551616}']
    plain = [json.dumps({"n": i, "s": f"s{i}", "x": None, "y": []}).encode() for i in range(6)]
    later = [json.dumps({"n": i, "s": f"s{i}", "x": i * 1.5, "y": [i]}).encode() for i in range(6)]
    json_topic = new_topic()
    produce(kafka, json_topic, [(None, v, []) for v in plain + later[:3] + bad_json + later[3:]], 0)

    schema_topic = new_topic()
    ctx = SerializationContext(schema_topic, MessageField.VALUE)
    write = JSONSerializer(json.dumps({"type": "object", "properties": {"n": {"type": "number"}}}), client)
    produce(kafka, schema_topic, [(None, write({"n": 0.5}, ctx), []), (None, write({"n": 10**400}, ctx), [])], 0)

    avro_topic = new_topic()
    floats = {"type": "record", "name": "F", "fields": [{"name": "f", "type": ["null", "float", "double"]}]}
    sid = client.register_schema(f"{avro_topic}-value", Schema(json.dumps(floats), "AVRO"))
    doubles = [frame(sid, b"\x04" + struct.pack("<d", x)) for x in (0.1, 1e300)]  # the union's branch 2: double
    produce(kafka, avro_topic, [(None, v, []) for v in doubles], 0)

    registry = RegistrySource(registry_server.url)
    with swift.store() as store:
        def archived(topic: str, start: int, end: int, fmt: str) -> list[dict]:
            cfg = config(topic, value_format=fmt)
            done = archive_range(OffsetRange(topic, 0, start, end), cfg, kafka, store, spark,
                                 typing=typed.for_topic(cfg, registry))
            return [r for o in done.manifest["objects"] for r in pq.read_table(io.BytesIO(store.get(o["name"]))).to_pylist()]

        first = archived(json_topic, 0, 6, "json")  # x and y are null or [] throughout: no type for them yet
        assert [r["value_data"] for r in first] == [{"n": i, "s": f"s{i}"} for i in range(6)]
        rows = archived(json_topic, 6, 15, "json")
        reasons = [r["value_error"] for r in rows]
        assert reasons[3].startswith("not representable in Arrow: UnicodeEncodeError")
        assert reasons[4] == "corrupt payload: JSON nested deeper than 64 levels"
        assert reasons[5].startswith("not representable in Arrow: OverflowError")
        assert reasons[:3] + reasons[6:] == [None] * 6 and [r["value"] for r in rows[3:6]] == bad_json
        assert rows[0]["value_data"] == {"n": 0, "s": "s0", "x": 0.0, "y": [0]}
        assert table_fields(Tables(store), json_topic) == ["n", "s", "x", "y"]  # the table took both ranges

        number = archived(schema_topic, 0, 2, "json_schema")
        assert number[0]["value_data"] == {"n": 0.5} and number[1]["value_data"] is None
        assert number[1]["value_error"].startswith("not representable as struct<n: double>: OverflowError")

        got = archived(avro_topic, 0, 2, "avro")
        assert [r["value_data"]["f"] for r in got] == [{"member0": None, "member1": 0.1},
                                                       {"member0": None, "member1": 1e300}]
