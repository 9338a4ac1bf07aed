"""Reading a topic's Iceberg table: its watermarks, its data files with their offset bounds, and the
engines over it: DuckDB, its extensions loaded offline from their wheels, and Spark, one task a data
file through Swift's S3 API. The table's files are the archive's own objects. No Dagster imports.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from matos_dagster.core.iceberg import plan as iceberg_plan
from matos_dagster.core.iceberg.access import S3
from matos_dagster.core.iceberg.plan import TableError


def marks_of(t) -> dict[int, int]:
    snap = t.current_snapshot()
    return iceberg_plan.watermarks(snap.summary.additional_properties if snap else None)


def table_files(t, partition: int | None = None, start: int | None = None, end: int | None = None) -> dict:
    """{path: (first offset, last offset, records, DataFile)} of the table's files (in one partition and
    sharing an offset with [start, end), if given: Iceberg's own metrics prune the rest)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThanOrEqual, LessThan

    if t.current_snapshot() is None:
        return {}
    where = AlwaysTrue()
    if partition is not None:
        where = And(EqualTo("partition", partition), GreaterThanOrEqual("offset", start), LessThan("offset", end))
    field_id = t.schema().find_field("offset").field_id
    ftype = t.schema().find_field("offset").field_type
    out = {}
    for task in t.scan(row_filter=where).plan_files():
        f = task.file
        lo = from_bytes(ftype, f.lower_bounds[field_id])
        hi = from_bytes(ftype, f.upper_bounds[field_id])
        out[f.file_path] = (lo, hi, f.record_count, f)
    return out


def window_filter(window_key: str) -> str:
    """The SQL condition of a day or an hour of event time, in UTC, on the table's `timestamp`.

    The bounds of `timestamp` per data file let DuckDB and Spark skip the files of other windows
    without opening them: `SELECT ... FROM iceberg_scan('...') WHERE <this>`.

    Args:
        window_key: A day (`2026-11-24`) or an hour (`2026-11-24-13:00`).
    """
    from matos_dagster.core.days import windows

    length = windows.DAY_MS if len(window_key) == len("2026-11-24") else windows.HOUR_MS
    start, end = windows.parse(window_key, length)
    return f"timestamp >= {_sql_time(start)} AND timestamp < {_sql_time(end)}"


def _sql_time(ms: int) -> str:
    from datetime import datetime, timezone

    return f"TIMESTAMPTZ '{datetime.fromtimestamp(ms / 1000, timezone.utc).strftime('%Y-%m-%d %H:%M:%S')}+00'"


def duckdb_connection(s3: S3 | None = None):
    """A DuckDB connection that reads the archive's Iceberg table over Swift's S3 API.

    Its extensions (httpfs, avro, iceberg) are loaded from the `duckdb-ext-*` wheels, with
    downloads off: nothing is fetched at run time. Then
    `con.sql(f"SELECT ... FROM iceberg_scan('{table.metadata_location}')")`.

    Args:
        s3: The S3 settings of Swift's S3 API (`Tables(store).s3`, from the MATOS_S3_* settings),
            made a DuckDB secret of the connection; None: none (give your own `CREATE SECRET`).
    """
    import duckdb
    import duckdb_ext  # noqa: F401 - the wheels' package: its folder holds `extensions/`

    folder = Path(next(iter(duckdb_ext.__path__))) / "extensions"
    con = duckdb.connect(config={"extension_directory": str(folder), "autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    for name in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD {name}")
    if s3 is not None:
        con.execute(s3.duckdb_secret())
    return con


def spark_frame(spark, table):
    """Spark over the table: a DataFrame of exactly the records of the table's current snapshot.

    There is no Iceberg Spark runtime for this project's Spark (4.3), so Spark reads the table's
    own data files, as pyiceberg's scan plans them for the current snapshot (the archived objects,
    each once), through Swift's S3 API: one task a file, each reading it with pyarrow over the
    `s3.*` properties the table was loaded with (nothing added to Spark's classpath).
    Use it as a view: `spark_frame(spark, table).createOrReplaceTempView("demo")`, then Spark SQL.
    A typed topic's table has its typed columns after the raw ones, as its schema has them (a file
    without one, or with an older struct, reads null there): `SELECT value_data.customer.id ...`.

    Args:
        spark: A `SparkSession`, classic or Spark Connect; its executors import matos_dagster.
        table: The topic's pyiceberg table, loaded with the S3 settings (`Tables(store).table(topic)`).
    """
    from matos_dagster.core.reader import SPARK_DDL, SPARK_SCHEMA
    from matos_dagster.core.records.unify import typed_fields
    from matos_dagster.core.spark.frames import frame_types
    from matos_dagster.core.spark.tasks import item_frame

    props = table.io.properties
    try:
        s3 = S3(props["s3.endpoint"].rstrip("/"), props["s3.access-key-id"], props["s3.secret-access-key"],
                props.get("s3.region") or "us-east-1")
    except KeyError as e:
        raise TableError(f"the table was loaded without {e.args[0]}: load it through Tables (the S3 settings "
                         "MATOS_S3_*), or with the s3.* properties of Swift's S3 API") from None
    files = []
    for task in table.scan().plan_files():
        if task.delete_files:  # the product never writes delete files: a table someone else changed
            raise TableError(f"{task.file.file_path} has delete files in the table: it is not the product's; "
                             "rebuild it (the iceberg_table job, rebuild: true)")
        files.append(task.file.file_path)
    typed = typed_fields(table.schema().as_arrow())
    if not typed:
        if not files:
            return spark.createDataFrame([], SPARK_DDL)
        return item_frame(spark, [(s3, f) for f in sorted(files)], _file_batches, SPARK_DDL)
    struct, arrow = frame_types(SPARK_SCHEMA, typed)
    if not files:
        return spark.createDataFrame([], struct)
    return item_frame(spark, [(s3, f, arrow) for f in sorted(files)], _file_batches, struct)


def _file_batches(item):
    """Runs on an executor: one data file of the table, read over the S3 API, typed as SPARK_DDL
    (and a typed table's columns, in the item: the file's own cast to them, those it lacks null)."""
    import pyarrow.parquet as pq
    from pyarrow import fs

    from matos_dagster.core.reader import SPARK_SCHEMA
    from matos_dagster.core.records.unify import conform

    s3, path, *typed = item
    u = urlsplit(s3.endpoint)
    s3fs = fs.S3FileSystem(access_key=s3.access_key, secret_key=s3.secret_key, region=s3.region,
                           endpoint_override=u.netloc, scheme=u.scheme, force_virtual_addressing=False)
    table = pq.read_table(path.removeprefix("s3://"), filesystem=s3fs)
    if typed:
        yield from conform(table, typed[0]).to_batches()
    else:
        yield from table.select(SPARK_SCHEMA.names).cast(SPARK_SCHEMA).to_batches()

