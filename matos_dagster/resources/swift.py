"""OpenStack Swift, through python-swiftclient: auth v1 (tempauth) or Keystone v3."""

from __future__ import annotations

import warnings

from dagster import ConfigurableResource
from pydantic import Field

from matos_dagster.core.swift.store import Store, SwiftParams


class SwiftResource(ConfigurableResource):
    """The OpenStack Swift container the archive is written to, and read from.

    Auth v1 (tempauth, swauth: `user` and `key`) or Keystone v3 (`auth_version="3"`: a user id, or a
    user name with its domain, and a project; or an application credential). Each field is the
    `MATOS_SWIFT_*` setting of its name; pass secrets as `EnvVar`s. A program of your own reads the
    archive through it:

    ```python
    from dagster import EnvVar
    from matos_dagster.core.reader import read_table
    from matos_dagster.resources import SwiftResource

    swift = SwiftResource(auth_url="https://swift.example/auth/v1.0", user="account:user",
                          key=EnvVar("SWIFT_KEY"), container="matos-archive")
    records = read_table(swift.params(), swift.prefix, "orders")   # the params of a connection
    with swift.store() as store:                                   # or an open container
        ...
    ```

    The first archive run creates a missing container (private). Keys, passwords and secrets
    never appear in the resource's `repr`.

    Attributes:
        auth_version: `1` (tempauth, swauth) or `3` (Keystone v3).
        auth_url: The auth endpoint (v1, e.g. `https://swift.example/auth/v1.0`) or the Keystone URL (v3).
        user: v1: `account:user`; Keystone v3: the user name (with `domain`) if there is no `user_id`.
        key: v1: the key; Keystone v3: the password.
        user_id: Keystone v3 user id.
        project_id: Keystone v3 project id.
        region: Keystone v3 region of the object-store endpoint; empty: the first one.
        domain: Keystone v3 user domain name.
        project_name: Keystone v3 project name, instead of `project_id`.
        project_domain: Keystone v3 domain of `project_name`; empty: `domain`.
        app_credential_id: Keystone v3 application credential id; set, it replaces user, password and project.
        app_credential_secret: The application credential's secret.
        interface: Keystone v3 interface of the object-store endpoint: `public`, `internal` or `admin`.
        container: The container of the archive.
        prefix: The prefix in front of every object name (`kafka`): what the reading functions call `prefix`.
        verify_tls: `true` or `false` (a string, as an `EnvVar` gives it): verify Swift's certificate;
            `false` only with a warning.
        ca_file: PEM file of the CA for Swift's certificate; empty: the system's CAs.
        retries: Retries of a failed request, with back-off, before failing.
        timeout_s: Seconds to wait for one request.
    """

    auth_version: str = Field(
        default="1", description="`1` for tempauth/swauth, `3` for Keystone v3 (MATOS_SWIFT_AUTH_VERSION)."
    )
    auth_url: str = Field(description="Auth endpoint (v1) or Keystone URL (v3) (MATOS_SWIFT_AUTH_URL).")
    user: str = Field(default="", description="v1 user, `account:user`; Keystone v3 user name (MATOS_SWIFT_USER).")
    key: str = Field(default="", repr=False, description="v1 key or Keystone v3 password (MATOS_SWIFT_KEY).")
    user_id: str = Field(default="", description="Keystone v3 user id (MATOS_SWIFT_USER_ID).")
    project_id: str = Field(default="", description="Keystone v3 project id (MATOS_SWIFT_PROJECT_ID).")
    region: str = Field(default="", description="Keystone v3 region (MATOS_SWIFT_REGION).")
    domain: str = Field(default="", description="Keystone v3 user domain name (MATOS_SWIFT_DOMAIN).")
    project_name: str = Field(default="", description="Keystone v3 project name (MATOS_SWIFT_PROJECT_NAME).")
    project_domain: str = Field(
        default="", description="Keystone v3 project domain name; empty: the user's (MATOS_SWIFT_PROJECT_DOMAIN)."
    )
    app_credential_id: str = Field(
        default="", description="Keystone v3 application credential id (MATOS_SWIFT_APP_CREDENTIAL_ID)."
    )
    app_credential_secret: str = Field(
        default="", repr=False,
        description="Keystone v3 application credential secret (MATOS_SWIFT_APP_CREDENTIAL_SECRET).",
    )
    interface: str = Field(
        default="public", description="Keystone v3: the catalog's object-store endpoint to use, `public`, "
        "`internal` or `admin` (MATOS_SWIFT_INTERFACE)."
    )
    container: str = Field(default="matos-archive", description="Container of the archive (MATOS_SWIFT_CONTAINER).")
    prefix: str = Field(default="kafka", description="Prefix in front of every object name (MATOS_SWIFT_PREFIX).")
    # A string, since Dagster's EnvVar cannot fill a bool field: `true` or `false`.
    verify_tls: str = Field(
        default="true", description="`true` or `false`: verify Swift's TLS certificate; off only explicitly "
        "(MATOS_SWIFT_VERIFY_TLS)."
    )
    ca_file: str = Field(default="", description="PEM CA file for Swift's certificate (MATOS_SWIFT_CA_FILE).")
    retries: int = Field(default=5, description="Retries of a failed request, with back-off (MATOS_SWIFT_RETRIES).")
    timeout_s: int = Field(default=60, description="Seconds to wait for one request (MATOS_SWIFT_TIMEOUT_S).")

    def __repr__(self) -> str:
        who = self.user_id or self.app_credential_id or self.user if self.auth_version == "3" else self.user
        return f"SwiftResource(auth_url={self.auth_url!r}, user={who!r}, key=***, container={self.container!r})"

    __str__ = __repr__

    def params(self) -> SwiftParams:
        """What an executor needs to open its own connection (secrets included: never log)."""
        if self.auth_version not in ("1", "3"):
            raise ValueError(f"MATOS_SWIFT_AUTH_VERSION is {self.auth_version!r}; use 1 (tempauth) or 3 (Keystone v3)")
        verify = self.verify_tls.strip().lower()
        if verify not in ("true", "false"):
            raise ValueError(f"MATOS_SWIFT_VERIFY_TLS is {self.verify_tls!r}; use true or false")
        if verify == "false" and self.auth_url.startswith("https"):
            warnings.warn(
                f"TLS verification of {self.auth_url} is OFF (MATOS_SWIFT_VERIFY_TLS=false): "
                "anyone on the path can read and alter the archive",
                stacklevel=2,
            )
        auth_url = self.auth_url
        if self.auth_version == "3":
            auth_url = self._check_v3()
        return SwiftParams(
            auth_url=auth_url,
            container=self.container,
            auth_version=self.auth_version,
            user=self.user,
            key=self.key,
            user_id=self.user_id,
            project_id=self.project_id,
            region=self.region,
            domain=self.domain,
            project_name=self.project_name,
            project_domain=self.project_domain,
            app_credential_id=self.app_credential_id,
            app_credential_secret=self.app_credential_secret,
            interface=self.interface.strip().lower() or "public",
            prefix=self.prefix.strip("/"),
            verify_tls=verify == "true",
            ca_file=self.ca_file,
            retries=self.retries,
            timeout_s=self.timeout_s,
        )

    def _check_v3(self) -> str:
        """The Keystone v3 settings make one whole credential form; the v3 auth URL."""
        url = self.auth_url.rstrip("/")
        if url.endswith("/v2.0"):
            raise ValueError(f"MATOS_SWIFT_AUTH_URL is {self.auth_url!r}, a Keystone v2.0 URL; "
                             "with MATOS_SWIFT_AUTH_VERSION=3 give the Keystone v3 URL (ending in /v3)")
        if not url.endswith("/v3"):
            url += "/v3"  # a versionless Keystone URL, as clouds often hand out
        if self.interface.strip().lower() not in ("public", "internal", "admin", ""):
            raise ValueError(f"MATOS_SWIFT_INTERFACE is {self.interface!r}; use public, internal or admin")
        if self.app_credential_id:
            if not self.app_credential_secret:
                raise ValueError("MATOS_SWIFT_APP_CREDENTIAL_ID is set but MATOS_SWIFT_APP_CREDENTIAL_SECRET is "
                                 "empty: set the secret Keystone showed when the credential was made")
            return url
        if not self.user_id and not self.user:
            raise ValueError("Keystone v3 needs a user: set MATOS_SWIFT_USER_ID, or MATOS_SWIFT_USER and "
                             "MATOS_SWIFT_DOMAIN, or an application credential (MATOS_SWIFT_APP_CREDENTIAL_ID)")
        if not self.user_id and not self.domain:
            raise ValueError(f"MATOS_SWIFT_USER is the user name {self.user!r}: set MATOS_SWIFT_DOMAIN to its "
                             "domain's name (often `Default`), or use MATOS_SWIFT_USER_ID instead")
        if not self.key:
            raise ValueError("MATOS_SWIFT_KEY (the Keystone v3 password) is empty")
        if not self.project_id and not self.project_name:
            raise ValueError("Keystone v3 needs a project: set MATOS_SWIFT_PROJECT_ID, or MATOS_SWIFT_PROJECT_NAME "
                             "and MATOS_SWIFT_PROJECT_DOMAIN")
        if not self.project_id and not (self.project_domain or self.domain):
            raise ValueError("MATOS_SWIFT_PROJECT_NAME needs the project's domain: set MATOS_SWIFT_PROJECT_DOMAIN "
                             "(or MATOS_SWIFT_DOMAIN, if it is the user's)")
        return url

    def store(self) -> Store:
        """A connection to the container, checked: it exists (created private) and we may use it."""
        store = Store(self.params())
        store.check()
        return store
