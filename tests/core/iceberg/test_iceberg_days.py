"""A day of the Iceberg table is read from the files that hold that day's records, and no others:
each data file's timestamp bounds are in the table's metadata (the archive's objects are its
files), so DuckDB and pyiceberg skip the files of other days without opening them.

Ranges are written by hand into Swift (typed_samples.py), stamped on three days, one of them
crossing midnight; the table is kept by the product's `Tables.sync`, as the archive runs keep it.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from typed_samples import T0, put_range

from matos_dagster.core.days import windows
from matos_dagster.core.iceberg.queries import duckdb_connection, table_files, window_filter
from matos_dagster.core.iceberg.table import Tables

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
        files = {lo: path for path, (lo, _, _, _) in table_files(table).items()}
        assert sorted(files) == [0, 10, 20, 45]

        def duckdb_day(day: str) -> tuple[int, set[int]]:
            """The day's record count by DuckDB, and the files it read (those it did not skip)."""
            con = duckdb_connection(tables.s3)
            try:
                con.execute("CALL enable_logging('Iceberg')")
                count = con.execute(f"SELECT count(*) FROM iceberg_scan('{table.metadata_location}') "
                                    f"WHERE {window_filter(day)}").fetchone()[0]
                # The iceberg extension logs each data file its filter skips, by path.
                skipped = " ".join(m for (m,) in con.execute(
                    "SELECT message FROM duckdb_logs() WHERE type = 'Iceberg'").fetchall())
            finally:
                con.close()
            return count, {lo for lo, path in files.items() if path not in skipped}

        def pyiceberg_day(day: str) -> set[int]:
            from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

            start, end = windows.parse(day, DAY)
            where = And(GreaterThanOrEqual("timestamp", _iso(start)), LessThan("timestamp", _iso(end)))
            scanned = {task.file.file_path for task in table.scan(row_filter=where).plan_files()}
            return {lo for lo, path in files.items() if path in scanned}

        assert duckdb_day("2026-01-01") == (20, {0, 10})
        assert duckdb_day("2026-01-02") == (20, {20})  # the file crossing midnight, alone
        assert duckdb_day("2026-01-03") == (20, {20, 45})
        assert duckdb_day("2026-01-04") == (0, set())
        assert [pyiceberg_day(d) for d in ("2026-01-01", "2026-01-02", "2026-01-03")] == [{0, 10}, {20}, {20, 45}]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()
