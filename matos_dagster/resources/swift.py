"""OpenStack Swift, through python-swiftclient: auth v1 (tempauth) or Keystone v3."""

from __future__ import annotations

import warnings

from dagster import ConfigurableResource
from pydantic import Field

from matos_dagster.store import Store, SwiftParams


class SwiftResource(ConfigurableResource):
    """A Swift container the archive is written to."""

    auth_version: str = Field(
        default="1", description="`1` for tempauth/swauth, `3` for Keystone v3 (MATOS_SWIFT_AUTH_VERSION)."
    )
    auth_url: str = Field(description="Auth endpoint (v1) or Keystone URL (v3) (MATOS_SWIFT_AUTH_URL).")
    user: str = Field(default="", description="v1 user, `account:user` (MATOS_SWIFT_USER).")
    key: str = Field(default="", repr=False, description="v1 key or Keystone v3 password (MATOS_SWIFT_KEY).")
    user_id: str = Field(default="", description="Keystone v3 user id (MATOS_SWIFT_USER_ID).")
    project_id: str = Field(default="", description="Keystone v3 project id (MATOS_SWIFT_PROJECT_ID).")
    region: str = Field(default="", description="Keystone v3 region (MATOS_SWIFT_REGION).")
    domain: str = Field(default="", description="Keystone v3 user domain name (MATOS_SWIFT_DOMAIN).")
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
        return f"SwiftResource(auth_url={self.auth_url!r}, user={self.user!r}, key=***, container={self.container!r})"

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
        return SwiftParams(
            auth_url=self.auth_url,
            container=self.container,
            auth_version=self.auth_version,
            user=self.user,
            key=self.key,
            user_id=self.user_id,
            project_id=self.project_id,
            region=self.region,
            domain=self.domain,
            prefix=self.prefix.strip("/"),
            verify_tls=verify == "true",
            ca_file=self.ca_file,
            retries=self.retries,
            timeout_s=self.timeout_s,
        )

    def store(self) -> Store:
        """A connection to the container, checked: it exists (created private) and we may use it."""
        store = Store(self.params())
        store.check()
        return store
