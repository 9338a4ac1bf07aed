"""Reading a typed topic's objects: one table across schema versions, raw columns for restore and audit.

Typed objects are built by hand (typed_samples.py): SCHEMA, then `value_schema_id`,
`value_data` (V1, or V2 with a field added at the top and one inside `customer`) and
`value_error`. The first tests need no server; the last ones read archives in Swift (and
restore one into Kafka, verify it against Kafka, read it with Spark).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from helpers import produce, read_kafka, table_rows
from samples import archive_in_ranges, awkward_rows, config, fields
from typed_samples import VALUE, bad, expected, put_range, raw_rows, retype, typed, typed_schema

from matos_dagster.core.reader import SPARK_SCHEMA, read_dataframe, read_table
from matos_dagster.core.records import unify
from matos_dagster.core.records.objects import decode, encode
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.restore.plan import Request
from matos_dagster.core.restore.run import restore
from matos_dagster.core.spark.frames import frame_types
from matos_dagster.core.swift import layout
from matos_dagster.core.verify import EVERYTHING, verify_topic

TYPED = ["value_schema_id", "value_data", "value_error"]


def typed_rows(table: pa.Table) -> list[dict]:
    return table.select(TYPED).to_pylist()


def want(lo: int, hi: int, version: int, unified: int = 2) -> list[dict]:
    values = raw_rows("t", 0, lo, hi)["value"].to_pylist()
    return [expected(o, version, v, unified) for o, v in zip(range(lo, hi), values)]


def roundtrip(table: pa.Table) -> pa.Table:
    """The table written as a Parquet object and read back by the product's decoder."""
    return decode(encode(table, "parquet", table.schema), "parquet")


# -- no server: the tables ------------------------------------------------------------------------


def test_objects_of_v1_and_v2_read_as_one_table_of_v2_with_v1s_missing_fields_null():
    v1, v2 = roundtrip(typed(raw_rows("t", 0, 0, 10), 1)), roundtrip(typed(raw_rows("t", 0, 10, 20), 2))
    assert v1.schema.equals(typed_schema(1)) and v2.schema.equals(typed_schema(2))  # decode keeps them

    table = unify.concat([v1, v2])

    assert table.schema.names == SCHEMA.names + TYPED
    assert table.schema.field("value_data").type == VALUE[2]
    assert table.schema.field("value_data").metadata[b"reader_schema_id"] == b"2"  # the newest's
    assert typed_rows(table) == want(0, 10, 1) + want(10, 20, 2)
    assert table_rows(unify.raw(table)) == table_rows(raw_rows("t", 0, 0, 20))  # the records, unchanged
    # v2 first, v1 after (the offsets decide the order): the same one type.
    assert unify.concat([v2, v1]).schema.field("value_data").type == VALUE[2]


def test_an_untyped_objects_rows_have_null_typed_columns_and_a_null_typed_side_takes_the_type():
    untyped = decode(encode(raw_rows("t", 0, 0, 5), "parquet"), "parquet")
    nothing = typed(raw_rows("t", 0, 5, 10), 1)  # a side no record of which decoded: typed null
    nothing = nothing.set_column(nothing.schema.get_field_index("value_data"), "value_data", pa.nulls(5))
    v1 = typed(raw_rows("t", 0, 10, 15), 1)

    table = unify.concat([untyped, nothing, v1])

    assert table.schema.field("value_data").type == VALUE[1]
    assert typed_rows(table)[:5] == [dict.fromkeys(TYPED)] * 5
    assert [r["value_data"] for r in typed_rows(table)[5:10]] == [None] * 5
    assert typed_rows(table)[10:] == want(10, 15, 1, unified=1)


def test_tables_of_one_schema_are_concatenated_as_they_always_were():
    tables = [decode(encode(raw_rows("t", 0, a, a + 5), "parquet"), "parquet") for a in (0, 5, 10)]
    assert all(t.schema.equals(SCHEMA) for t in tables)
    assert unify.concat(tables).equals(pa.concat_tables(tables))
    assert unify.concat(tables).schema.equals(SCHEMA, check_metadata=True)
    assert unify.raw(tables[0]) is tables[0]  # nothing to select
    v1 = typed(raw_rows("t", 0, 0, 5), 1)
    assert unify.raw(v1).equals(raw_rows("t", 0, 0, 5))


def test_a_field_a_version_lacks_is_nullable_in_the_unified_type():
    strict = pa.struct([pa.field("id", pa.int64(), nullable=False)])
    grown = pa.struct([pa.field("id", pa.int64(), nullable=False), pa.field("email", pa.string(), nullable=False)])
    a = pa.table({"value_data": pa.array([{"id": 1}], strict)})
    b = pa.table({"value_data": pa.array([{"id": 2, "email": "x"}], grown)})
    table = unify.concat([a, b])
    t = table.schema.field("value_data").type
    assert not t.field("id").nullable and t.field("email").nullable
    assert table.to_pylist() == [{"value_data": {"id": 1, "email": None}}, {"value_data": {"id": 2, "email": "x"}}]


def test_types_that_cannot_be_one_are_refused_naming_the_column():
    a = pa.table({"value_data": pa.array([{"id": 1}], pa.struct([pa.field("id", pa.int64())]))})
    b = pa.table({"value_data": pa.array([{"id": "x"}], pa.struct([pa.field("id", pa.string())]))})
    with pytest.raises(unify.TypesDiffer, match="orders/0.*value_data"):
        unify.concat([a, b], "orders/0")


def test_an_objects_schema_reads_from_its_footer_alone():
    data = encode(typed(raw_rows("t", 0, 0, 50), 2), "parquet", typed_schema(2))
    tail = data[-unify.footer_bytes(data[-8:]):]
    assert len(tail) < len(data)
    assert unify.footer_schema(tail).equals(typed_schema(2))
    assert unify.footer_schema(data).equals(typed_schema(2))  # more bytes than the footer: as well
    with pytest.raises(ValueError, match="not a Parquet object"):
        unify.footer_bytes(b"not parquet")


def test_an_objects_schema_in_swift_costs_one_get_of_its_end_or_two_for_a_long_footer(monkeypatch):
    from matos_dagster.core.swift import footers

    data = encode(typed(raw_rows("t", 0, 0, 50), 2), "parquet", typed_schema(2))

    class Tail:  # what Store.get_tail answers, and what it was asked
        container = "c"
        asked: list[int] = []

        def get_tail(self, name, nbytes):
            self.asked.append(nbytes)
            return (data[-nbytes:], len(data)) if name == "there" else None

    store = Tail()
    assert footers.object_schema(store, "there").equals(typed_schema(2)) and len(store.asked) == 1
    monkeypatch.setattr(footers, "FOOTER_TAIL", 100)  # shorter than this footer: a second GET for the rest
    assert footers.object_schema(store, "there").equals(typed_schema(2))
    assert store.asked[1:] == [100, unify.footer_bytes(data)]
    with pytest.raises(FileNotFoundError, match="gone"):
        footers.object_schema(store, "gone")


def test_a_spark_frame_of_typed_rows_keeps_the_raw_columns_as_they_are_and_adds_the_typed_ones():
    schema = unify.concat([typed(raw_rows("t", 0, 0, 5), 1), typed(raw_rows("t", 0, 5, 10), 2)]).schema
    struct, arrow = frame_types(SPARK_SCHEMA, unify.typed_fields(schema))
    assert arrow.names == SCHEMA.names + TYPED
    assert pa.schema(list(arrow)[:len(SCHEMA)]).equals(SPARK_SCHEMA)
    assert struct.simpleString() == (
        "struct<topic:string,partition:int,offset:bigint,timestamp:timestamp,timestamp_type:string,key:binary,"
        "value:binary,headers:array<struct<key:string,value:binary>>,value_schema_id:int,value_data:struct<"
        "customer:struct<id:bigint,name:string,email:string>,amount:double,note:string>,value_error:string>")
    assert all(f.nullable for f in struct.fields)


# -- Swift: read_table over ranges of several versions ------------------------------------------------


def test_read_table_of_untyped_v1_and_v2_ranges_is_one_table_of_v2(swift):
    topic = "orders"
    with swift.store() as store:
        store.check()
        for lo, version in ((0, 0), (20, 1), (40, 2)):
            put_range(store, "kafka", topic, 0, lo, lo + 20, version)

        table = read_table(store, "kafka", topic)

        assert table.schema.field("value_data").type == VALUE[2]
        assert typed_rows(table) == [dict.fromkeys(TYPED)] * 20 + want(20, 40, 1) + want(40, 60, 2)
        assert table_rows(unify.raw(table)) == table_rows(raw_rows(topic, 0, 0, 60))
        # A window of one version reads that version's type; of the untyped range, exactly SCHEMA.
        assert read_table(store, "kafka", topic, start=25, end=35).schema.equals(typed_schema(1))
        assert read_table(store, "kafka", topic, end=20).schema.equals(SCHEMA, check_metadata=True)
        assert read_table(store, "kafka", topic, start=15, end=45).schema.field("value_data").type == VALUE[2]


# -- Kafka, Swift, Spark: restore, audit and Spark reads of a typed archive ------------------------------


def test_a_typed_archive_restores_byte_exact_verifies_against_kafka_and_reads_in_spark(kafka, swift, spark, new_topic):
    topic = new_topic()
    produce(kafka, topic, awkward_rows(60, 1))
    cfg = config(topic, slice_records=10)
    with swift.store() as store:
        archive_in_ranges(kafka, store, spark, cfg, partitions=1, size=20)  # [0,20) [20,40) [40,60)
        prefix = layout.join(store.params.prefix, cfg.prefix)
        retype(store, prefix, topic, 0, {20: 1, 40: 2})  # [0,20) stays untyped
        original = read_kafka(kafka, topic, 0)

        table = read_table(store, prefix, topic)
        assert table.schema.field("value_data").type == VALUE[2]
        assert table_rows(unify.raw(table)) == original
        values = [r["value"] for r in original]
        assert typed_rows(table)[20:] == [expected(o, 1 if o < 40 else 2, values[o]) for o in range(20, 60)]

        # The audit compares the raw columns with Kafka's records: every one, all equal.
        report = verify_topic(kafka, store, prefix, cfg, None, since=EVERYTHING)
        assert report.ok and report.compared == 60, report.render()

        # A restore produces the raw columns: byte for byte Kafka's records.
        target = new_topic()
        done = restore(Request(topic, prefix, target=target), kafka, store, spark)
        assert done.records == 60
        assert fields(read_kafka(kafka, target, 0)) == fields(original)

        # Spark: the typed columns in place, v1's rows with v2's added fields null.
        df = read_dataframe(spark, store.params, prefix, topic, start=15, end=45)
        assert df.columns == SCHEMA.names + TYPED
        got = {r["offset"]: r for r in df.selectExpr(
            "offset", "value_data.customer.id AS id", "value_data.note AS note", "value_error").collect()}
        assert sorted(got) == list(range(15, 45))
        for o in range(15, 45):
            typed_ok = o >= 20 and values[o] is not None and not bad(o)
            assert got[o]["id"] == (o if typed_ok else None), o
            assert got[o]["note"] == (f"n{o}" if typed_ok and o >= 40 else None), o
            assert got[o]["value_error"] == ("no magic byte" if o >= 20 and values[o] is not None and bad(o) else None)
        # An untyped window reads as it always did.
        assert read_dataframe(spark, store.params, prefix, topic, end=20).columns == SCHEMA.names
