"""The settings a table and its readers need (iceberg.py): S3 keys and endpoint, the catalog. No servers."""

from __future__ import annotations

import pytest

from matos_dagster.iceberg import S3, catalog_properties, s3_for
from matos_dagster.iceberg_plan import TableError
from matos_dagster.store import SwiftParams


class FakeStore:  # what s3_for reads of a Store
    def __init__(self, **params):
        self.params = SwiftParams(auth_url="http://swift.example:8080/auth/v1.0", container="c", **params)
        self.url = "https://swift.example:8443/v1/AUTH_test"


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
