"""After an erasure, the topic's Iceberg table and its days: no file, copy by day or snapshot of the
table holds an erased record; `read_table`, `read_window`, pyiceberg and DuckDB over the table
return none; the days that held them are counted again (their data version changes); a record of
the key produced after the request is archived, and in the table, as any other.

One topic on the real stack (Kafka, Swift, Spark, the Iceberg table in a sqlite catalog), archived
with the product's archive_range (which keeps the table), its days evaluated as the days sensor
does (core/days/evaluate.py), the erasure carried out by core/erase/run.py.
"""

from __future__ import annotations

import uuid

import pytest
from helpers import table_rows
from typed_samples import T0

from matos_dagster.core import reader
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.days import evaluate, windows
from matos_dagster.core.days.completeness import Rules
from matos_dagster.core.days.read import read_window
from matos_dagster.core.erase import keys, request
from matos_dagster.core.erase.rewrite import ErasureError
from matos_dagster.core.erase.run import carry_out
from matos_dagster.core.erase.table import forget_in_table
from matos_dagster.core.iceberg.queries import duckdb_connection
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig

SECRET = "an erasure key for the tests, 32b"
KEY = b"alice-7f3a"  # at every offset = 2 (mod 5)
DAY = windows.DAY_MS
D1, D2 = "2026-01-01", "2026-01-02"


def stamp(offset: int) -> int:
    """[0, 15) in the last seconds of D1, [15, 30) in the first of D2: range [10, 30) crosses midnight."""
    return T0 + DAY - 15_000 + offset * 1000


def load(kafka, topic: str, first: int, n: int) -> None:
    p = kafka.producer()
    for i in range(first, first + n):
        p.produce(topic, key=KEY if i % 5 == 2 else f"k{i}".encode(), value=f"value {i}".encode(),
                  timestamp=stamp(i), partition=0)
    assert p.flush(30) == 0


def days_of(store, prefix: str, topic: str, end: int, requested: str = "") -> list[evaluate.Window]:
    """An evaluation of the topic's days as the days sensor makes it, at the end of D2 (every partition
    idle at once): the windows written and not yet requested (`requested`: the cursor, as the sensor's)."""
    return evaluate.evaluate(store, prefix, topic, Rules(DAY, idle_ms=0), {0: end}, T0 + 2 * DAY, {0: 0},
                             requested=requested)


def keys_in_table(tables: Tables, topic: str) -> dict[str, list[bytes]]:
    """The table's keys by pyiceberg (current snapshot and every older one kept) and by DuckDB."""
    t = tables.table(topic, create=False)
    out = {"pyiceberg": t.scan().to_arrow()["key"].to_pylist()}
    for s in t.snapshots():
        out[f"snapshot {s.snapshot_id}"] = t.scan(snapshot_id=s.snapshot_id).to_arrow()["key"].to_pylist()
    con = duckdb_connection(tables.s3)
    try:
        out["duckdb"] = [bytes(k) for (k,) in con.execute(f"SELECT key FROM iceberg_scan('{t.metadata_location}')").fetchall()]
    finally:
        con.close()
    return out


def table_copies(store, tables: Tables, topic: str) -> list[str]:
    return [o["name"] for o in store.list(layout.join(tables.root, topic, "days") + "/")]


def test_after_an_erasure_no_table_file_copy_snapshot_or_day_holds_the_key_and_later_records_of_it_are_archived(
        kafka, swift, spark, new_topic, monkeypatch, tmp_path):
    monkeypatch.setenv(keys.SETTING, SECRET)
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    catalog = f"type=sql;uri=sqlite:///{tmp_path}/catalog.db"
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", catalog)
    cfg = TopicConfig(name=new_topic(**{"retention.ms": "-1"}), group=f"g-{uuid.uuid4().hex[:8]}")  # January stamps
    load(kafka, cfg.name, 0, 30)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        for a, b in ((0, 10), (10, 30)):
            archive_range(OffsetRange(cfg.name, 0, a, b), cfg, kafka, store, spark)
        tables = Tables(store)
        found = keys_in_table(tables, cfg.name)
        assert {k: ks.count(KEY) for k, ks in found.items() if k in ("pyiceberg", "duckdb")} == {"pyiceberg": 6, "duckdb": 6}
        assert len(table_copies(store, tables, cfg.name)) == 2  # [10, 30) crosses midnight: a copy a day
        before = {w.key: w for w in days_of(store, prefix, cfg.name, 30)}
        assert sorted(before) == [D1, D2]
        counts = {k: sum(p["records"] for p in evaluate.summary(w.doc).values()) for k, w in before.items()}
        assert counts == {D1: 15, D2: 15}
        snapshot = tables.table(cfg.name, create=False).current_snapshot().snapshot_id
        ends = {cfg.name: {0: 30}}
        req = request.make(keys.erasure_key(SECRET), [KEY], "ticket 4711", ends)
        request.write(store, store.params.prefix, req)

        # The catalog out of reach: one line, the archive erased, the table left for the re-run.
        monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/no/such/dir/catalog.db")
        with pytest.raises(ErasureError) as failed:
            carry_out(req.id, store, {cfg.name: cfg}, SECRET)
        line = str(failed.value)
        assert "\n" not in line and "MATOS_ICEBERG_CATALOG" in line and f"request {req.id}" in line
        monkeypatch.setenv("MATOS_ICEBERG_CATALOG", catalog)
        assert tables.table(cfg.name, create=False).current_snapshot().snapshot_id == snapshot  # not committed
        gone = carry_out(req.id, store, {cfg.name: cfg}, SECRET)
        assert gone.records == 6

        # No file of the table, no copy by day in Swift, no snapshot kept holds the key: not pyiceberg, not DuckDB.
        found = keys_in_table(tables, cfg.name)
        assert all(KEY not in ks and len(ks) == 24 for ks in found.values()), {k: len(v) for k, v in found.items()}
        copies = table_copies(store, tables, cfg.name)
        assert len(copies) == 2 and all(KEY not in decode(store.get(c), "parquet")["key"].to_pylist() for c in copies)
        assert tables.check(prefix, cfg.name).ok
        assert KEY not in [r["key"] for r in table_rows(reader.read_table(store, prefix, cfg.name, partitions=[0]))]
        # Again: nothing left to do, no commit.
        snapshot = tables.table(cfg.name, create=False).current_snapshot().snapshot_id
        again = forget_in_table(store, prefix, cfg, 0, gone.partitions[0].offsets)
        assert (again.ranges, again.copies_deleted, again.snapshots_expired) == ([], 0, 0)
        assert tables.table(cfg.name, create=False).current_snapshot().snapshot_id == snapshot

        # Both days held records of the key: counted again, a new data version each, journalled for their runs.
        after = {w.key: w for w in days_of(store, prefix, cfg.name, 30, evaluate.last_cursor(list(before.values()), ""))}
        assert sorted(after) == [D1, D2]
        assert {k: sum(p["records"] for p in evaluate.summary(w.doc).values()) for k, w in after.items()} == {
            D1: 12, D2: 12}
        assert all(after[k].version != before[k].version for k in (D1, D2))
        assert not list(store.list(layout.join(layout.topic_dir(prefix, cfg.name), "_event_time", "_erased") + "/"))
        for day in (D1, D2):
            rows = read_window(store, prefix, cfg.name, day)
            assert rows.num_rows == 12 and KEY not in rows["key"].to_pylist()

        # A record of the key produced after the request's log end is archived, and in the table, as any other.
        load(kafka, cfg.name, 30, 5)
        archive_range(OffsetRange(cfg.name, 0, 30, 35), cfg, kafka, store, spark)
        assert keys_in_table(tables, cfg.name)["duckdb"].count(KEY) == 1
        assert [r["offset"] for r in table_rows(reader.read_table(store, prefix, cfg.name, partitions=[0]))
                if r["key"] == KEY] == [32]
