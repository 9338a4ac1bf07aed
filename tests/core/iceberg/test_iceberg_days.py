"""The Iceberg table is partitioned by day of the records' timestamps: a query of one day reads
that day's files and no others. An object of one day is the table's file itself; an object that
crosses midnight goes in as one copy per day (iceberg/days.py), which the table's check counts as
that object, compaction's replacement drops and deletes, and a table made before it evolves to.

Ranges are written by hand into Swift (typed_samples.py), stamped on three days, one of them
crossing midnight; the table is kept by the product's `Tables.sync`, as the archive runs keep it.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from urllib.parse import unquote, urlsplit

import pytest
from typed_samples import T0, put_range

from matos_dagster.core.compact.run import compact_topic
from matos_dagster.core.days import windows
from matos_dagster.core.iceberg import days as iceberg_days
from matos_dagster.core.iceberg.queries import duckdb_connection, table_files, window_filter
from matos_dagster.core.iceberg.table import Tables
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig

TOPIC = "clicks"
DAY = windows.DAY_MS
D1, D2, D3 = T0, T0 + DAY, T0 + 2 * DAY  # 2026-01-01, -02, -03


@pytest.fixture
def tables_on(monkeypatch, tmp_path):
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    return monkeypatch


def stamp(offset: int) -> int:
    """[0, 20) on D1, [20, 40) on D2 until a minute before midnight, [40, 60) on D3 from midnight."""
    if offset < 20:
        return D1 + 3600_000 + offset * 1000
    if offset < 40:
        return D3 - 60_000 + (offset - 20) * 1000
    return D3 + (offset - 40) * 1000


def test_a_query_of_one_day_scans_only_the_files_holding_records_of_that_day(swift, tables_on):
    with swift.store() as store:
        store.check()
        tables = Tables(store)
        put_range(store, "kafka", TOPIC, 0, 0, 20, 0, per_object=10, stamp=stamp)   # two files, D1
        put_range(store, "kafka", TOPIC, 0, 20, 45, 0, per_object=25, stamp=stamp)  # one file, D2 and D3
        put_range(store, "kafka", TOPIC, 0, 45, 60, 0, per_object=15, stamp=stamp)  # one file, D3
        tables.sync("kafka", TOPIC, 0)
        table = tables.table(TOPIC)
        assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
            ("partition", "identity"), ("timestamp_day", "day")]
        files = {lo: path for path, (lo, _, _, _) in table_files(table).items()}
        # The object crossing midnight, [20, 45), is in the table as two copies: offsets 20-39 and 40-44.
        assert sorted(files) == [0, 10, 20, 40, 45]
        assert "/days/" in files[20] and "/days/" in files[40] and "/days/" not in files[45]
        assert tables.check("kafka", TOPIC).ok

        def duckdb_day(day: str) -> tuple[int, set[int]]:
            """The day's record count by DuckDB, and the data files it read (its HTTP requests name them)."""
            con = duckdb_connection(tables.s3)
            try:
                con.execute("CALL enable_logging('HTTP')")
                count = len(con.execute(f"SELECT * FROM iceberg_scan('{table.metadata_location}') "
                                        f"WHERE {window_filter(day)}").fetchall())
                requests = [str(m) for (m,) in con.execute(
                    "SELECT message FROM duckdb_logs() WHERE type = 'HTTP'").fetchall()]
            finally:
                con.close()
            read = {unquote(u) for m in requests for u in re.findall(r"'url': '([^']*)'", m)}
            return count, {lo for lo, path in files.items() if any(u.endswith(urlsplit(path).path) for u in read)}

        def pyiceberg_day(day: str) -> set[int]:
            from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

            start, end = windows.parse(day, DAY)
            where = And(GreaterThanOrEqual("timestamp", _iso(start)), LessThan("timestamp", _iso(end)))
            scanned = {task.file.file_path for task in table.scan(row_filter=where).plan_files()}
            return {lo for lo, path in files.items() if path in scanned}

        assert duckdb_day("2026-01-01") == (20, {0, 10})
        assert duckdb_day("2026-01-02") == (20, {20})  # the copy of the object crossing midnight, alone
        assert duckdb_day("2026-01-03") == (20, {40, 45})
        assert duckdb_day("2026-01-04") == (0, set())
        assert [pyiceberg_day(d) for d in ("2026-01-01", "2026-01-02", "2026-01-03")] == [{0, 10}, {20}, {40, 45}]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


def day_counts(tables: Tables, table) -> dict[str, int]:
    con = duckdb_connection(tables.s3)
    try:
        return {day: con.execute(f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}') "
                                 f"WHERE {window_filter(day)}").fetchone()[0]
                for day in ("2026-01-01", "2026-01-02", "2026-01-03")}
    finally:
        con.close()


def test_a_compaction_replaces_the_copies_by_day_and_deletes_them(swift, spark, tables_on):
    # A group is complete once the next range would stretch it over compact_span_s: [60, 61), ten days on.
    cfg = TopicConfig(name=TOPIC, group="g", compact_bytes=10**6, compact_min_age_s=0.0, compact_grace_s=0.0,
                      compact_span_s=5 * 86400.0)
    with swift.store() as store:
        store.check()
        prefix = layout.join(store.params.prefix, cfg.prefix)
        for lo, hi in ((0, 20), (20, 45), (45, 60)):
            put_range(store, prefix, TOPIC, 0, lo, hi, 0, per_object=25, stamp=stamp)
        put_range(store, prefix, TOPIC, 0, 60, 61, 0, stamp=lambda o: D3 + 10 * DAY)
        tables = Tables(store)
        tables.sync(prefix, TOPIC, 0)
        copies = [o["name"] for o in store.list(layout.join(tables.root, TOPIC, "days"))]
        assert len(copies) == 2  # [20, 45) cut in two
        assert compact_topic(cfg, {0: 61}, store, spark).partitions[0].groups == [(0, 60)]
        table = tables.table(TOPIC)
        # The merged object spans the three days: three copies, and the replaced object's are gone.
        after = [o["name"] for o in store.list(layout.join(tables.root, TOPIC, "days"))]
        assert len(after) == 3 and not set(copies) & set(after)
        assert tables.check(prefix, TOPIC).ok
        assert day_counts(tables, table) == {"2026-01-01": 20, "2026-01-02": 20, "2026-01-03": 20}


def test_a_table_made_before_days_evolves_its_spec_and_keeps_its_files(swift, tables_on, monkeypatch):
    with swift.store() as store:
        store.check()
        with monkeypatch.context() as before:  # the table as an earlier matos-dagster made it
            before.setattr(iceberg_days, "add_day_field", lambda spec: None)
            put_range(store, "kafka", TOPIC, 0, 0, 20, 0, per_object=10, stamp=stamp)
            Tables(store).sync("kafka", TOPIC, 0)
        tables = Tables(store)
        assert [f.name for f in tables.catalog.load_table(tables.identifier(TOPIC)).spec().fields] == ["partition"]
        put_range(store, "kafka", TOPIC, 0, 20, 45, 0, per_object=25, stamp=stamp)
        put_range(store, "kafka", TOPIC, 0, 45, 60, 0, per_object=15, stamp=stamp)
        tables.sync("kafka", TOPIC, 0)
        table = tables.table(TOPIC)
        assert [f.name for f in table.spec().fields] == ["partition", "timestamp_day"]
        specs = {f.file_path.rsplit("/", 1)[-1]: f.spec_id for f in (t.file for t in table.scan().plan_files())}
        now = table.spec().spec_id  # the older files keep the spec they were added with
        assert sorted(specs.values()) == [now - 1] * 2 + [now] * 3
        assert tables.check("kafka", TOPIC).ok
        assert day_counts(tables, table) == {"2026-01-01": 20, "2026-01-02": 20, "2026-01-03": 20}
