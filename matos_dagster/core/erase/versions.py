"""Swift object versioning against an erasure: a rewritten or deleted object must leave no old version.

With versioning on the container (`X-Versions-Enabled: true`, or a versions or history container
named by `X-Versions-Location` / `X-History-Location`), Swift keeps each object's previous content
when it is overwritten or deleted: the erased records would stay in those old versions. An erasure
is refused, before it changes anything, until versioning is off. No Dagster imports.
"""

from __future__ import annotations

from matos_dagster.core.swift.store import Store

VERSIONING_HEADERS = ("x-versions-enabled", "x-versions-location", "x-history-location")


def versioning(headers: dict[str, str]) -> str | None:
    """What of the container's headers (names in lower case) keeps old versions; None when nothing does."""
    if headers.get("x-versions-enabled", "").strip().lower() == "true":
        return "X-Versions-Enabled: true"
    for name, shown in (("x-versions-location", "X-Versions-Location"), ("x-history-location", "X-History-Location")):
        if headers.get(name, "").strip():
            return f"{shown}: {headers[name].strip()}"
    return None


def refusal(store: Store) -> str | None:
    """One line saying why an erasure may not run on `store`'s container and what to change; None when it may."""
    kept = versioning(store.container_headers())
    if kept is None:
        return None
    return (f"container {store.container!r} keeps old versions of objects ({kept}): the erased records would stay "
            "in them; turn versioning off (e.g. `swift post -H 'X-Versions-Enabled: false' -H 'X-Remove-Versions-Location: x' "
            f"-H 'X-Remove-History-Location: x' {store.container}`) and delete the old versions the archive's "
            "objects have, then forget again (docs/operations/forgetting.md)")
