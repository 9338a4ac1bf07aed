"""The settings a table and its readers need (core/iceberg/access.py): S3 keys and endpoint, the catalog. No servers."""

from __future__ import annotations

import pytest

from matos_dagster.core.iceberg.access import S3, catalog_properties, s3_for
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.swift.store import SwiftParams


class FakeStore:  # what s3_for reads of a Store
    def __init__(self, **params):
        self.params = SwiftParams(auth_url="http://swift.example:8080/auth/v1.0", container="c", **params)
        self.url = "https://swift.example:8443/v1/AUTH_test"
        self.container = "c"


def test_with_tempauth_the_s3_keys_are_the_swift_user_and_key_and_the_endpoint_swifts_host(monkeypatch):
    for name in ("MATOS_S3_ENDPOINT", "MATOS_S3_ACCESS_KEY", "MATOS_S3_SECRET_KEY", "MATOS_S3_REGION"):
        monkeypatch.delenv(name, raising=False)
    s3 = s3_for(FakeStore(user="test:tester", key="testing"))
    assert s3 == S3("https://swift.example:8443", "test:tester", "testing", "us-east-1")
    assert "ENDPOINT 'swift.example:8443'" in s3.duckdb_secret() and "USE_SSL true" in s3.duckdb_secret()


def test_with_keystone_and_no_ec2_credentials_the_error_names_the_settings(monkeypatch):
    monkeypatch.delenv("MATOS_S3_ACCESS_KEY", raising=False)
    with pytest.raises(TableError, match="MATOS_S3_ACCESS_KEY and MATOS_S3_SECRET_KEY .*ec2 credentials"):
        s3_for(FakeStore(auth_version="3", user="u", key="p"))
    monkeypatch.setenv("MATOS_S3_ACCESS_KEY", "ak")
    monkeypatch.setenv("MATOS_S3_SECRET_KEY", "it's")
    monkeypatch.setenv("MATOS_S3_ENDPOINT", "http://s3.example:80/")
    s3 = s3_for(FakeStore(auth_version="3", user="u", key="p"))
    assert (s3.endpoint, s3.access_key, s3.secret_key) == ("http://s3.example:80", "ak", "it's")
    assert "SECRET 'it''s'" in s3.duckdb_secret()  # quoted as SQL


def test_the_catalog_is_an_embedded_sqlite_one_by_default_and_any_other_by_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("MATOS_DEVSTACK_DIR", str(tmp_path))
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", "")
    assert catalog_properties() == {"type": "sql", "uri": f"sqlite:///{tmp_path}/iceberg/catalog.db"}
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", "type=rest; uri=https://cat.example/api;credential=a:b=c")
    assert catalog_properties() == {"type": "rest", "uri": "https://cat.example/api", "credential": "a:b=c"}
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", "type=rest;https://cat.example")
    with pytest.raises(TableError, match="MATOS_ICEBERG_CATALOG: 'https://cat.example' is not key=value"):
        catalog_properties()


def test_the_archive_assets_table_metadata_before_the_first_commit_and_when_the_catalog_is_unreachable(
        monkeypatch, tmp_path):
    from dagster import MetadataValue

    from matos_dagster.assets.archive import _table_state, table_metadata
    from matos_dagster.core.topics import TopicConfig

    store, topic, warned = FakeStore(user="test:tester", key="testing"), TopicConfig(name="demo", group="g"), []
    for name in ("MATOS_S3_ENDPOINT", "MATOS_S3_ACCESS_KEY", "MATOS_S3_SECRET_KEY", "MATOS_ICEBERG_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "false")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", "type=rest;uri=http://127.0.0.1:9")
    assert _table_state(store, topic, 0, warned.append) is None and not warned  # off: the catalog is not opened

    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    meta = table_metadata(_table_state(store, topic, 0, warned.append))
    assert meta == {"iceberg_table": MetadataValue.text("c.demo"), "iceberg_records": MetadataValue.int(0),
                    "iceberg_files": MetadataValue.int(0)}  # no snapshot id, no watermark yet

    # The range is archived whatever the catalog does: the run warns, naming the setting, and goes on.
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", "type=rest;uri=http://127.0.0.1:9")
    assert _table_state(store, topic, 0, warned.append) is None
    assert len(warned) == 1 and "demo: the Iceberg table's state could not be read" in warned[0]
    assert "MATOS_ICEBERG_CATALOG" in warned[0]
