"""The table's metadata stays bounded whatever the history: old snapshots expire, old metadata files go.

Every Iceberg commit rewrites the table's metadata file, which lists every snapshot: without expiry
one archived range a commit makes that file, and so each commit, grow with the archive's history
(README "The archive as an Iceberg table", the numbers). A local pyiceberg table (sqlite catalog,
file warehouse): expiry is Iceberg metadata only, the same on Swift's S3 API.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from matos_dagster.core.iceberg import expiry
from matos_dagster.core.iceberg.access import S3
from matos_dagster.core.iceberg.plan import summary
from matos_dagster.core.iceberg.queries import marks_of
from matos_dagster.core.iceberg.table import TABLE_PROPERTIES, Tables
from matos_dagster.core.records.schema import HEADERS, SCHEMA


def batch(start: int, n: int = 5) -> pa.Table:
    return pa.table({
        "topic": ["t"] * n, "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(start, start + n), pa.int64()),
        "timestamp": pa.array([1_700_000_000_000] * n, pa.timestamp("ms", tz="UTC")),
        "timestamp_type": ["CreateTime"] * n, "key": pa.array([None] * n, pa.binary()),
        "value": pa.array([b"v"] * n), "headers": pa.array([[]] * n, HEADERS)}, schema=SCHEMA)


@pytest.fixture
def local_table(tmp_path: Path):
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    props = {**TABLE_PROPERTIES, "write.metadata.previous-versions-max": "3"}
    table = catalog.create_table(("ns", "t"), schema=SCHEMA, properties=props)
    store = SimpleNamespace(container="c", params=SimpleNamespace(prefix=""))  # only named, never reached
    return Tables(store, S3("http://127.0.0.1:1", "a", "b"), catalog), table, tmp_path


def test_snapshots_beyond_the_newest_ones_expire_in_batches_and_the_table_keeps_every_record(
        local_table, monkeypatch):
    tables, table, tmp_path = local_table
    monkeypatch.setattr(expiry, "KEEP_SNAPSHOTS", 3)
    monkeypatch.setattr(expiry, "EXPIRE_BATCH", 2)
    for i in range(4):  # fewer than KEEP + BATCH: nothing expires
        table.append(batch(i * 5), snapshot_properties=summary({0: i * 5 + 5}))
    assert tables.expire(table).expired == 0 and len(table.snapshots()) == 4
    table.append(batch(20), snapshot_properties=summary({0: 25}))
    current = table.current_snapshot().snapshot_id

    expired = sorted(table.snapshots(), key=lambda s: s.sequence_number)[:2]
    data_files = files_under(tmp_path / "wh", "data")

    assert tables.expire(table).expired == 2
    table = tables.catalog.load_table(("ns", "t"))
    assert len(table.snapshots()) == 3
    assert table.current_snapshot().snapshot_id == current
    assert marks_of(table) == {0: 25}  # the watermark is the current snapshot's: untouched
    assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == list(range(25))
    # The expired snapshots' manifest lists are deleted (their manifests too: each commit's own
    # manifest is listed by the later snapshots as well, so those stay); no data file is touched.
    metadata = files_under(tmp_path / "wh", "metadata")
    assert not {s.manifest_list.removeprefix("file://") for s in expired} & metadata
    live = {m.manifest_path.removeprefix("file://") for s in table.snapshots() for m in s.manifests(table.io)}
    assert live <= metadata
    assert files_under(tmp_path / "wh", "data") == data_files


def test_expiry_deletes_the_manifests_only_expired_snapshots_used(local_table, monkeypatch):
    """An overwrite (compaction's replacement) leaves the manifests before it to the snapshots before it:
    once those expire, their manifests go too."""
    tables, table, tmp_path = local_table
    monkeypatch.setattr(expiry, "KEEP_SNAPSHOTS", 1)
    monkeypatch.setattr(expiry, "EXPIRE_BATCH", 2)
    for i in range(2):
        table.append(batch(i * 5), snapshot_properties=summary({0: i * 5 + 5}))
    before = {m.manifest_path.removeprefix("file://") for m in table.current_snapshot().manifests(table.io)}
    table.overwrite(batch(0, 10), snapshot_properties=summary({0: 10}))  # the same records, one file
    now = {m.manifest_path.removeprefix("file://") for m in table.current_snapshot().manifests(table.io)}
    assert before - now  # the overwrite's snapshot no longer lists the appends' manifests
    snapshots = len(table.snapshots())
    assert tables.expire(table).expired == snapshots - 1  # all but the current one
    table = tables.catalog.load_table(("ns", "t"))
    metadata = files_under(tmp_path / "wh", "metadata")
    assert not (before - now) & metadata and now <= metadata
    assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == list(range(10))


def files_under(root: Path, kind: str) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file() and p.parent.name == kind}


def test_old_metadata_files_are_deleted_after_each_commit(local_table):
    tables, table, tmp_path = local_table
    for i in range(8):
        table.append(batch(i * 5), snapshot_properties=summary({0: i * 5 + 5}))
    kept = sorted(p.name for p in (tmp_path / "wh").rglob("*.metadata.json"))
    # The current one and previous-versions-max (3) before it; 9 were written (create + 8 commits).
    assert len(kept) == 4
    assert Path(table.metadata_location.removeprefix("file://")).name in kept
