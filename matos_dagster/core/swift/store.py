"""Swift, through python-swiftclient, as the archive uses it: on the driver and on executors.

No Dagster imports: Spark tasks build their own connection from `SwiftParams`, which
travels to executors inside the task closure (never in Spark settings, which the Spark UI
and event log show).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import ssl
from dataclasses import dataclass, field
from typing import Any, Iterator

import requests
from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3 as ks_v3
from swiftclient import Connection
from swiftclient.exceptions import ClientException

LIST_PAGE = 10_000  # Swift's default and largest container listing page


class SwiftError(RuntimeError):
    """Swift failed, with what to check."""


@dataclass(frozen=True)
class SwiftParams:
    auth_url: str
    container: str
    auth_version: str = "1"
    user: str = ""  # v1 `account:user`; v3 the user name (with `domain`) when there is no user_id
    key: str = field(default="", repr=False)  # v1 key; v3 password
    user_id: str = ""
    project_id: str = ""
    region: str = ""
    domain: str = ""  # v3 user domain name
    prefix: str = ""
    verify_tls: bool = True
    ca_file: str = ""
    retries: int = 5
    timeout_s: float = 60.0
    project_name: str = ""
    project_domain: str = ""  # v3 project domain name; empty: `domain`
    app_credential_id: str = ""
    app_credential_secret: str = field(default="", repr=False)
    interface: str = "public"  # which object-store endpoint of the catalog: public, internal, admin
    # (storage URL, token) the driver holds, so that a Spark task asks for no token of its own (Keystone:
    # seconds; tempauth: a request a slice, 1 in 5 of a quiet range's). On a 401 it authenticates itself.
    preauth: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    def connect(self) -> Connection:
        if self.auth_version == "3":
            # Through a keystoneauth session rather than swiftclient's own v3 code, which
            # passes neither the CA file nor a way to re-authenticate to application credentials.
            # The session verifies Keystone with our CA, and swiftclient invalidates it on a
            # 401 (a token that expired mid-run) to get a new token once.
            url, token = self.preauth or (None, None)
            return _KeystoneConnection(
                self,
                session=keystone_session(self),
                preauthurl=url,
                preauthtoken=token,
                os_options={"service_type": "object-store", "endpoint_type": self.interface,
                            "region_name": self.region or None},
                retries=self.retries,
                timeout=self.timeout_s,
                insecure=not self.verify_tls,
                cacert=self.ca_file or None,
            )
        url, token = self.preauth or (None, None)
        return Connection(
            authurl=self.auth_url,
            user=self.user or None,
            key=self.key,
            preauthurl=url,
            preauthtoken=token,
            auth_version=self.auth_version,
            retries=self.retries,
            timeout=self.timeout_s,
            insecure=not self.verify_tls,
            cacert=self.ca_file or None,
        )


def keystone_session(p: SwiftParams, scoped: bool = True):
    """A keystoneauth session for the v3 credentials of `p` (unscoped: the user alone, no project)."""
    if p.app_credential_id:
        auth = ks_v3.ApplicationCredential(auth_url=p.auth_url, application_credential_id=p.app_credential_id,
                                        application_credential_secret=p.app_credential_secret)
    else:
        user = {"user_id": p.user_id} if p.user_id else {"username": p.user, "user_domain_name": p.domain}
        project = {}
        if scoped:
            project = ({"project_id": p.project_id} if p.project_id else
                       {"project_name": p.project_name, "project_domain_name": p.project_domain or p.domain})
        auth = ks_v3.Password(auth_url=p.auth_url, password=p.key, **user, **project)
    verify: bool | str = (p.ca_file or True) if p.verify_tls else False
    return _RenewingSession(auth=auth, verify=verify, timeout=p.timeout_s)


class _RenewingSession(ks_session.Session):
    def invalidate(self, auth=None):
        # swiftclient re-authenticates after a 401 only if this returns True, which
        # keystoneauth does only for a token it fetched itself: not for a preauth token.
        super().invalidate(auth)
        return True


class _KeystoneConnection(Connection):
    """A swiftclient Connection whose Keystone failures are SwiftErrors naming the setting to fix."""

    def __init__(self, params: SwiftParams, **kwargs: Any):
        super().__init__(**kwargs)
        self._params = params

    def get_auth(self):
        ks = ks_exceptions
        p = self._params
        try:
            url, token = super().get_auth()
        except ks.EndpointNotFound:
            url, token = None, None
        except ks.Unauthorized as e:
            raise SwiftError(f"Keystone at {p.auth_url} refused {_refused_what(p)} ({_one_line(e)})") from None
        except ks.SSLError as e:
            raise SwiftError(
                f"could not authenticate with Keystone at {p.auth_url}: its TLS certificate could not be verified: "
                f"set MATOS_SWIFT_CA_FILE to the PEM file of the CA that signed it ({_one_line(e)})") from None
        except ks.ConnectFailure as e:
            raise SwiftError(f"Keystone could not be reached at {p.auth_url}: check MATOS_SWIFT_AUTH_URL "
                             f"({_one_line(e)})") from None
        except ks.ClientException as e:  # keystoneauth's base: any other answer
            raise SwiftError(f"Keystone at {p.auth_url} failed: {_one_line(e)}; check MATOS_SWIFT_AUTH_URL and "
                             "the MATOS_SWIFT_* Keystone settings") from None
        if not url:
            raise SwiftError(
                f"the Keystone catalog at {p.auth_url} has no object-store endpoint with interface "
                f"{p.interface!r} in region {p.region or '(any)'!r}: check MATOS_SWIFT_REGION and "
                f"MATOS_SWIFT_INTERFACE (the catalog has: {_object_store_endpoints(self.session)})")
        return url, token


def _refused_what(p: SwiftParams) -> str:
    """What Keystone refused: the credentials, or (they are good) the project they are scoped to."""
    if p.app_credential_id:
        return ("the application credential: check MATOS_SWIFT_APP_CREDENTIAL_ID and "
                "MATOS_SWIFT_APP_CREDENTIAL_SECRET (it may also have expired or been deleted)")
    who = "MATOS_SWIFT_USER_ID" if p.user_id else "MATOS_SWIFT_USER and MATOS_SWIFT_DOMAIN"
    try:  # the same user without a project: if that works, the project is what is wrong
        keystone_session(p, scoped=False).get_token()
    except Exception:  # noqa: BLE001 - any failure: the credentials themselves
        return f"the user's credentials: check {who} and MATOS_SWIFT_KEY (the password)"
    project = ("MATOS_SWIFT_PROJECT_ID" if p.project_id
               else "MATOS_SWIFT_PROJECT_NAME and MATOS_SWIFT_PROJECT_DOMAIN")
    return (f"the project: the user's password is right, but the project does not exist or the user has "
            f"no role on it: check {project}")


def _object_store_endpoints(sess) -> str:
    try:
        catalog = sess.auth.get_access(sess).service_catalog
        found = catalog.get_endpoints(service_type="object-store")
        rows = sorted({f"{e['interface']} in {e.get('region_id') or e.get('region')}"
                       for entries in found.values() for e in entries})
        return ", ".join(rows) or "no object-store endpoint at all"
    except Exception as e:  # noqa: BLE001 - only for the message
        return f"unknown: {_one_line(e)}"


class Store:
    """One container, seen through one connection (not thread-safe: one per task)."""

    def __init__(self, params: SwiftParams):
        self._params = params
        self.container = params.container
        self._conn = params.connect()
        self.listings = 0  # listing requests made: recurring work must keep this bounded

    def close(self) -> None:
        self._conn.close()

    @property
    def params(self) -> SwiftParams:
        """What a Spark task needs to open its own connection, with our current token once we have one."""
        if getattr(self._conn, "url", None) and getattr(self._conn, "token", None):
            return dataclasses.replace(self._params, preauth=(self._conn.url, self._conn.token))
        return self._params

    @property
    def url(self) -> str:
        """The account's storage URL (known once authenticated)."""
        if not self._conn.url:
            self._conn.get_auth()  # sets .url and .token
        return self._conn.url

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def container_exists(self) -> bool:
        """Authenticate and say whether the container exists (SwiftError, explained, if neither
        can be told). Creates nothing."""
        try:
            self._conn.head_container(self.container)
            return True
        except ClientException as e:
            if e.http_status != 404:
                raise self._explain(e, "read container") from None
        except Exception as e:  # connection refused, DNS, TLS: not ClientException
            raise self._explain(e, "authenticate") from None
        return False

    def container_headers(self) -> dict[str, str]:
        """The container's HEAD headers, names in lower case (SwiftError, explained, if it cannot be read)."""
        try:
            return {k.lower(): v for k, v in self._conn.head_container(self.container).items()}
        except Exception as e:
            raise self._explain(e, "read container") from None

    def check(self) -> None:
        """Authenticate and make sure the container exists; create it private if missing."""
        if self.container_exists():
            return
        try:
            # No X-Container-Read: the container stays private to the account.
            self._conn.put_container(self.container)
        except ClientException as e:
            raise self._explain(e, "create container") from None

    def put(self, name: str, data: bytes, content_type: str = "application/octet-stream",
            md5: str | None = None) -> str:
        """Upload `data`; Swift checks it against our md5 and refuses a corrupt upload.

        `md5`: the hex md5 of `data` if the caller already has it (an ObjectWriter hashes as it
        writes); a wrong one is refused by Swift like a corrupt upload.
        """
        md5 = md5 or hashlib.md5(data).hexdigest()
        # A file object, not bytes: swiftclient can rewind it to send the upload again after
        # a 401 (an expired token) or a 5xx; given bytes it gives up on the first retry.
        body = io.BytesIO(data)
        try:
            etag = self._conn.put_object(
                self.container, name, contents=body, content_length=len(data), etag=md5,
                content_type=content_type,
            )
        except ClientException as e:
            raise self._explain(e, f"write object {name}") from None
        except Exception as e:
            raise self._explain(e, f"write object {name}") from None
        finally:
            # The request keeps `body` in reference cycles, which only the cyclic GC frees: open,
            # it held the object's bytes after the upload, one more object per task in a Spark
            # worker (a W2 task's peak 4.2x object_bytes, 50 MiB more RSS after each task).
            body.close()
        if etag and etag.strip('"') != md5:
            raise SwiftError(f"Swift stored {name} with md5 {etag}, expected {md5}")
        return md5

    def put_json(self, name: str, doc: dict) -> str:
        return self.put(name, canonical_json(doc), content_type="application/json")

    def get(self, name: str) -> bytes | None:
        """The object's bytes, or None if it does not exist."""
        try:
            _, body = self._conn.get_object(self.container, name)
            return body
        except ClientException as e:
            if e.http_status == 404:
                return None
            raise self._explain(e, f"read object {name}") from None

    def get_tail(self, name: str, nbytes: int) -> tuple[bytes, int] | None:
        """The object's last `nbytes` bytes (all of it if smaller) and its size; None if it does not exist."""
        try:
            headers, body = self._conn.get_object(self.container, name, headers={"Range": f"bytes=-{nbytes}"})
        except ClientException as e:
            if e.http_status == 404:
                return None
            raise self._explain(e, f"read the end of object {name}") from None
        whole = headers.get("content-range", "").rpartition("/")[2]  # "bytes a-b/size"; absent: all of it
        return body, int(whole) if whole.isdigit() else len(body)

    def get_json(self, name: str) -> dict | None:
        body = self.get(name)
        return None if body is None else json.loads(body)

    def head(self, name: str) -> dict | None:
        """{'bytes': size, 'md5': etag} of the object, or None if it does not exist."""
        try:
            h = self._conn.head_object(self.container, name)
        except ClientException as e:
            if e.http_status == 404:
                return None
            raise self._explain(e, f"inspect object {name}") from None
        return {"bytes": int(h["content-length"]), "md5": h["etag"].strip('"')}

    def list(self, prefix: str, delimiter: str | None = None) -> Iterator[dict]:
        """Every object (or `subdir` entry, with a delimiter) under `prefix`, in name order.

        Reads the prefix's whole listing: for full audits and small folders only. Recurring
        work lists pages from a marker instead (`list_page`, through archived.py).
        """
        marker = None
        while True:
            page = self.list_page(prefix, marker=marker, delimiter=delimiter)
            yield from page
            if len(page) < LIST_PAGE:
                return
            marker = page[-1].get("name") or page[-1].get("subdir")

    def list_page(
        self,
        prefix: str,
        marker: str | None = None,
        end_marker: str | None = None,
        limit: int = 0,
        delimiter: str | None = None,
        reverse: bool = False,
    ) -> list[dict]:
        """One listing request: names under `prefix` strictly between `marker` and `end_marker`.

        Ascending, or descending with `reverse` (then `marker` is the upper bound). At most
        `limit` entries (0: the server's page size, LIST_PAGE). Counted in `listings`.
        """
        self.listings += 1
        try:
            _, items = self._conn.get_container(
                self.container, prefix=prefix, delimiter=delimiter, marker=marker or None,
                end_marker=end_marker or None, limit=limit or LIST_PAGE,
                query_string="reverse=on" if reverse else None,
            )
        except ClientException as e:
            if e.http_status == 404:
                return []
            raise self._explain(e, f"list {prefix}") from None
        except Exception as e:
            raise self._explain(e, f"list {prefix}") from None
        return items

    def delete(self, name: str) -> None:
        try:
            self._conn.delete_object(self.container, name)
        except ClientException as e:
            if e.http_status != 404:
                raise self._explain(e, f"delete object {name}") from None

    def _explain(self, e: Exception, doing: str) -> SwiftError:
        if isinstance(e, SwiftError):  # already says what to check (Keystone's answers)
            return e
        where = f"Swift at {self.params.auth_url}, container {self.container!r}"
        status = getattr(e, "http_status", None)
        if status == 401:
            hint = "the credentials were refused: check MATOS_SWIFT_USER and MATOS_SWIFT_KEY"
        elif status == 403 and self.params.auth_version == "3":
            hint = (
                f"the user may not {doing}: its Keystone token has no role that Swift lets use the project's "
                "account (an operator role, such as `member`): give the user that role on the project, or "
                "set MATOS_SWIFT_PROJECT_ID / MATOS_SWIFT_PROJECT_NAME to a project where it has one"
            )
        elif status == 403:
            hint = (
                f"the user may not {doing}: check the user's roles or ACLs on container "
                f"{self.container!r} (MATOS_SWIFT_CONTAINER)"
            )
        elif status == 422:
            hint = "it refused the bytes: they do not match their md5 (corrupted on the way; a retry sends them again)"
        elif _is_tls_error(e):
            hint = (
                "its TLS certificate could not be verified: set MATOS_SWIFT_CA_FILE to the PEM file of the CA "
                "that signed it (MATOS_SWIFT_VERIFY_TLS=false turns verification off, insecurely)"
            )
        elif status is None:
            hint = "could not be reached: check MATOS_SWIFT_AUTH_URL and that Swift runs"
        else:
            hint = f"answered HTTP {status}"
        return SwiftError(f"could not {doing} in {where}: {hint} ({_one_line(e)})")


def canonical_json(doc: dict) -> bytes:
    """Sorted keys and fixed separators: the same document always gives the same bytes."""
    return (json.dumps(doc, sort_keys=True, indent=1, separators=(",", ": ")) + "\n").encode()


def _is_tls_error(e: Exception) -> bool:
    # requests wraps ssl's errors in its own SSLError; either way the text names the check.
    return isinstance(e, (ssl.SSLError, requests.exceptions.SSLError)) or "CERTIFICATE_VERIFY_FAILED" in str(e)


def _one_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__
