"""How the archive's Iceberg tables are reached: the S3 settings of Swift's S3 API (the tables' own
I/O and their readers'), the catalog's settings, and the switch that keeps tables at all
(MATOS_ICEBERG_TABLES). Nothing here opens the catalog or reaches Swift. No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from matos_dagster.core import settings
from matos_dagster.core.iceberg.plan import TableError
from matos_dagster.core.swift.store import Store


@dataclass(frozen=True)
class S3:
    """What a reader needs to reach the archive through Swift's S3 API (s3api middleware)."""

    endpoint: str  # http(s)://host:port
    access_key: str
    secret_key: str = field(repr=False)
    region: str = "us-east-1"

    def pyiceberg(self) -> dict[str, str]:
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": self.access_key,
                "s3.secret-access-key": self.secret_key, "s3.region": self.region,
                "s3.force-virtual-addressing": "false"}

    def duckdb_secret(self) -> str:
        u = urlsplit(self.endpoint)
        q = lambda s: "'" + s.replace("'", "''") + "'"  # noqa: E731 - SQL string literal
        return (f"CREATE OR REPLACE SECRET matos_s3 (TYPE s3, KEY_ID {q(self.access_key)}, SECRET {q(self.secret_key)}, "
                f"REGION {q(self.region)}, ENDPOINT {q(u.netloc)}, URL_STYLE 'path', "
                f"USE_SSL {'true' if u.scheme == 'https' else 'false'})")


def s3_for(store: Store) -> S3:
    """The S3 settings (MATOS_S3_*), with what the Swift settings give for those left empty.

    Empty endpoint: the host of Swift's storage URL (the proxy serves the S3 API when s3api is in
    its pipeline). Empty keys: with tempauth (v1), its user and key are S3 keys; with Keystone
    they must be EC2 credentials (`openstack ec2 credentials create`, s3token in the proxy).
    """
    endpoint = settings.get("MATOS_S3_ENDPOINT")
    if not endpoint:
        u = urlsplit(store.url)
        endpoint = f"{u.scheme}://{u.netloc}"
    access, secret = settings.get("MATOS_S3_ACCESS_KEY"), settings.get("MATOS_S3_SECRET_KEY")
    p = store.params
    if not access and p.auth_version == "1":
        access, secret = p.user, p.key
    if not access or not secret:
        raise TableError("no S3 keys for Swift's S3 API: set MATOS_S3_ACCESS_KEY and MATOS_S3_SECRET_KEY "
                         "(with Keystone: EC2 credentials, `openstack ec2 credentials create`)")
    return S3(endpoint.rstrip("/"), access, secret, settings.get("MATOS_S3_REGION"))


def enabled() -> bool:
    return settings.flag("MATOS_ICEBERG_TABLES")


def catalog_properties() -> dict[str, str]:
    """MATOS_ICEBERG_CATALOG (`key=value;...`, any pyiceberg catalog), or the embedded sqlite one."""
    raw = settings.get("MATOS_ICEBERG_CATALOG").strip()
    if not raw:
        if not settings.development():  # never a catalog inside the installed package's folder
            raise TableError("MATOS_ICEBERG_CATALOG is not set: set it to your catalog's properties "
                             "(`type=rest;uri=https://...`, or `type=sql;uri=sqlite:////path/catalog.db`)")
        folder = Path(settings.get("MATOS_DEVSTACK_DIR")) / "iceberg"
        folder.mkdir(parents=True, exist_ok=True)
        return {"type": "sql", "uri": f"sqlite:///{folder / 'catalog.db'}"}
    props = {}
    for part in filter(None, (p.strip() for p in raw.split(";"))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise TableError(f"MATOS_ICEBERG_CATALOG: {part!r} is not key=value (e.g. type=rest;uri=https://...)")
        props[key.strip()] = value.strip()
    return props
