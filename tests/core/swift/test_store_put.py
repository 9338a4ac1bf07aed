"""Store.put's last check: the ETag Swift answers must be the md5 the upload sent.

A pure test, with a fake connection in place of swiftclient's: a real Swift cannot be made to
answer a successful PUT with another ETag (its object server hashes the body and answers 422
when that differs from the ETag sent, which tests/core/records/test_records.py shows on the real Swift), so
the branch for an answer that differs anyway (a proxy or middleware in between that changed
the bytes after the check) is reached only through a fake.
"""

from __future__ import annotations

import hashlib

import pytest

from matos_dagster.core.swift.store import Store, SwiftError, SwiftParams

DATA = b"the records of one object"
MD5 = hashlib.md5(DATA).hexdigest()


class AnsweringConnection:
    """swiftclient's Connection as Store.put uses it: put_object answers `etag`; it records what it was sent."""

    def __init__(self, etag: str | None):
        self.etag = etag
        self.sent: list[dict] = []

    def put_object(self, container, name, contents=None, content_length=None, etag=None, content_type=None):
        self.sent.append({"container": container, "name": name, "body": contents.read(), "etag": etag})
        return self.etag

    def close(self) -> None:
        pass


def store_answering(etag: str | None) -> Store:
    # Nothing is connected when a v1 Store is made (swiftclient authenticates on the first request).
    store = Store(SwiftParams(auth_url="http://127.0.0.1:9/auth/v1.0", container="c", user="a:u", key="k"))
    store._conn = AnsweringConnection(etag)
    return store


@pytest.mark.parametrize("answer", [
    pytest.param(hashlib.md5(b"other bytes").hexdigest(), id="another-md5"),
    pytest.param(f'"{hashlib.md5(b"other bytes").hexdigest()}"', id="another-md5-quoted"),
    pytest.param(MD5[:-1] + ("0" if MD5[-1] != "0" else "1"), id="one-digit-off"),
])
def test_an_upload_whose_etag_is_not_the_md5_sent_is_refused(answer):
    """Swift's ETag is the md5 of what it stored: one that differs from the md5 the upload sent
    means Swift holds other bytes than the object, so the upload fails naming both md5s."""
    store = store_answering(answer)
    with pytest.raises(SwiftError, match=f"Swift stored o.parquet with md5 {answer}, expected {MD5}"):
        store.put("o.parquet", DATA)
    # The md5 went with the PUT, for Swift to check the body against before storing it.
    assert store._conn.sent == [{"container": "c", "name": "o.parquet", "body": DATA, "etag": MD5}]


@pytest.mark.parametrize("answer", [pytest.param(MD5, id="bare"), pytest.param(f'"{MD5}"', id="quoted")])
def test_an_upload_answered_with_its_own_md5_returns_it(answer):
    """Swift may quote its ETag; the same md5, quoted or not, is a stored upload."""
    assert store_answering(answer).put("o.parquet", DATA, md5=MD5) == MD5
