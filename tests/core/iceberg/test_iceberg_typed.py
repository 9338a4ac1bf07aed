"""A typed topic's Iceberg table: its schema evolves with the objects' typed columns, and DuckDB
and Spark query their fields in place.

Ranges are written by hand into Swift (typed_samples.py): an untyped range, then V1 ranges, then
V2 (a field added at the top of the value, one inside `customer`). The table is kept by the
product's `Tables.sync`, one commit a range, as the archive runs keep it.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from typed_samples import expected, object_entry, put_range, raw_rows, typed

from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.iceberg.queries import duckdb_connection, spark_frame, table_files
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import encode
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.swift import layout, manifest

TOPIC = "orders"


@pytest.fixture
def tables_on(monkeypatch, tmp_path):
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    return monkeypatch


def values(lo: int, hi: int) -> list:
    return raw_rows(TOPIC, 0, lo, hi)["value"].to_pylist()


def test_a_typed_topics_table_evolves_with_its_objects_and_answers_queries_of_their_fields(swift, spark, tables_on):
    with swift.store() as store:
        store.check()
        tables = Tables(store)
        put_range(store, "kafka", TOPIC, 0, 0, 10, 0)  # archived before the topic was typed
        tables.sync("kafka", TOPIC, 0)
        assert tables.table(TOPIC).schema().as_arrow().names == SCHEMA.names  # untyped: as ever

        put_range(store, "kafka", TOPIC, 0, 10, 20, 1)
        tables.sync("kafka", TOPIC, 0)
        value = tables.table(TOPIC).schema().find_field("value_data").field_type
        assert [f.name for f in value.fields] == ["customer", "amount"]

        put_range(store, "kafka", TOPIC, 0, 20, 40, 2)  # V2 adds `note`, and `customer.email`
        steps = tables.sync("kafka", TOPIC, 0)
        table = tables.table(TOPIC)
        assert [s.ranges for s in steps] == [[(20, 40)]]
        assert table.schema().as_arrow().names == SCHEMA.names + ["value_schema_id", "value_data", "value_error"]
        value = table.schema().find_field("value_data").field_type
        assert [f.name for f in value.fields] == ["customer", "amount", "note"]
        assert [f.name for f in table.schema().find_field("value_data.customer").field_type.fields] == \
            ["id", "name", "email"]
        assert tables.check("kafka", TOPIC).ok

        con = duckdb_connection(tables.s3)
        try:
            where = f"iceberg_scan('{table.metadata_location}')"
            got = con.execute(f"SELECT \"offset\", value_data.customer.id, value_data.customer.email, value_data.note, "
                              f"value_error FROM {where} ORDER BY \"offset\"").fetchall()
            scanned = [r[0] for r in con.execute(f"SELECT file_path FROM iceberg_metadata('{table.metadata_location}') "
                                                 "ORDER BY file_path").fetchall()]
            # A filter on a field inside the value, over files that all have the column (the offsets' metrics
            # prune the untyped one). DuckDB 1.4.4 pushes a filter on a struct's field into every file and fails
            # on a file without the struct (duckdb/duckdb#21676, fixed later): `(...) IS TRUE` is not pushed.
            found = con.execute(f"SELECT \"offset\" FROM {where} WHERE \"offset\" >= 10 AND "
                                "value_data.customer.email = 'c33@example.com'").fetchall()
            anywhere = con.execute(f"SELECT \"offset\" FROM {where} WHERE (value_data.customer.id = 13) IS TRUE "
                                   "OR (value_data.note = 'n33') IS TRUE ORDER BY 1").fetchall()
        finally:
            con.close()
        print("files scanned:", *scanned, sep="\n  ")
        assert sorted(scanned) == sorted(table_files(table))
        want = []
        for o, v in zip(range(40), values(0, 40)):
            e = expected(o, 1 if o < 20 else 2, v) if o >= 10 else dict.fromkeys(["value_data", "value_error"])
            d = e["value_data"]
            want.append((o, d and d["customer"]["id"], d and d["customer"]["email"], d and d["note"], e["value_error"]))
        assert got == want
        assert found == [(33,)] and anywhere == [(13,), (33,)]

        # Spark over the table: the same fields, in place.
        rows = spark_frame(spark, table).selectExpr(
            "offset", "value_data.customer.id AS id", "value_data.note AS note").orderBy("offset").collect()
        assert [(r["offset"], r["id"], r["note"]) for r in rows] == [(o, i, n) for o, i, _, n, _ in want]


def put_typed_object(store, table: pa.Table, r: OffsetRange, decoded: int) -> None:
    """One object of range `r`, its manifest entry counting `decoded` values (the rest failed or null)."""
    data = encode(table, "parquet", table.schema)
    name = layout.object_name(layout.range_dir("kafka", r), r.start, "parquet")
    store.put(name, data)
    nulls = raw_rows(TOPIC, 0, r.start, r.end)["value"].null_count
    entry = {**object_entry(name, data, raw_rows(TOPIC, 0, r.start, r.end)), "typed": {"value": {
        "format": "avro", "reader_schema_id": None, "schema_ids": [], "decoded": decoded,
        "failed": r.end - r.start - nulls - decoded, "nulls": nulls}}}
    store.put_json(layout.manifest_name("kafka", r), manifest.build(r, "parquet", [entry], {"value": "avro"}))


def test_an_object_none_of_whose_values_decoded_has_no_data_column_and_the_table_reads_it_null(swift, tables_on):
    """No record of the object's values decoded, so there is no type to give `value_data`: the archive
    writes the object without that column (core/schemas/typed.py), the table adds it all the same and
    reads its values' data as null, its errors as written, beside a typed object's fields."""
    nothing = typed(raw_rows(TOPIC, 0, 0, 5), 1).drop_columns(["value_data"])
    with swift.store() as store:
        store.check()
        tables = Tables(store)
        put_typed_object(store, nothing, OffsetRange(TOPIC, 0, 0, 5), 0)
        put_range(store, "kafka", TOPIC, 0, 5, 10, 1)
        tables.sync("kafka", TOPIC, 0)
        table = tables.table(TOPIC)
        assert tables.check("kafka", TOPIC).ok
        rows = table.scan().to_arrow().sort_by("offset").to_pylist()
    assert [r["value_data"] for r in rows[:5]] == [None] * 5
    assert [r["value_error"] for r in rows[:5]] == [expected(o, 1, v)["value_error"]
                                                   for o, v in zip(range(5), values(0, 5))]
    assert [r["value_data"] for r in rows[5:]] == [expected(o, 1, v, unified=1)["value_data"]
                                                  for o, v in zip(range(5, 10), values(5, 10))]


def test_a_field_of_arrows_null_type_is_refused_by_the_table_with_the_reason(swift, tables_on):
    """A field typed null inside the value (an Avro field of type "null"): an Iceberg table of format
    version 2 has no such type. The table says so; the archive holds the object all the same."""
    table = typed(raw_rows(TOPIC, 0, 0, 5), 1)
    data = table["value_data"].combine_chunks()
    with_null = pa.StructArray.from_arrays([*data.flatten(), pa.nulls(5)], names=["customer", "amount", "nothing"],
                                           mask=data.is_null())
    table = table.set_column(table.schema.get_field_index("value_data"), "value_data", with_null)
    with swift.store() as store:
        store.check()
        put_typed_object(store, table, OffsetRange(TOPIC, 0, 0, 5), 4)
        with pytest.raises(TableError, match="value_data.*null type"):
            Tables(store).sync("kafka", TOPIC, 0)


def test_a_commit_reads_the_footers_only_when_a_manifest_of_it_is_typed():
    from matos_dagster.core.iceberg.plan import catch_up
    from matos_dagster.core.swift.archived import RANGE, Entry
    from matos_dagster.core.swift.manifest import Manifest

    def doc(lo: int, version: int) -> Manifest:
        r, table = OffsetRange(TOPIC, 0, lo, lo + 5), raw_rows(TOPIC, 0, lo, lo + 5)
        entry = object_entry(f"o{lo}", b"x", typed(table, version) if version else table)
        return Manifest.from_json(manifest.build(r, "parquet", [entry], {"value": "avro"} if version else None))

    untyped, v1 = (Entry(0, 5, RANGE), doc(0, 0)), (Entry(5, 10, RANGE), doc(5, 1))
    assert not catch_up(0, 0, [untyped]).typed
    assert catch_up(0, 0, [untyped, v1]).typed and catch_up(0, 5, [v1]).typed
