"""An erasure request: what `matos forget` asks, kept in Swift until the run that carries it out ends.

    <prefix>/_erasure/requests/<id>.json
    {"id": "20261202T031500Z-1a2b3c4d", "requested_at": "2026-12-02T03:15:00Z", "reason": "ticket 4711",
     "key_id": "<which MATOS_ERASURE_KEY hashed>", "hashes": ["<HMAC-SHA256 hex>", ...],
     "topics": {"orders": {"0": <log end offset at the request>, "1": ...}}}

Keys reach a run only through this object, by its id: never in run config, tags or logs. It holds
keyed hashes, never a key. The run deletes it when done, after writing the erasure's record
(record.py). No Dagster imports.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store

_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{8}$")


class RequestError(ValueError):
    """A request that cannot be carried out: one line saying why."""


@dataclass(frozen=True)
class Request:
    id: str
    requested_at: str
    reason: str
    key_id: str
    hashes: tuple[str, ...]
    topics: dict[str, dict[int, int]]  # topic -> partition -> log end offset at the request
    # What a run of it erased so far, "<topic>/<partition>" -> offsets: a run killed part-way and
    # run again counts them (their records are gone from the objects it reads).
    progress: dict[str, list[int]] = None  # type: ignore[assignment]

    def to_json(self) -> dict:
        return {"id": self.id, "requested_at": self.requested_at, "reason": self.reason, "key_id": self.key_id,
                "hashes": list(self.hashes),
                "topics": {t: {str(p): e for p, e in sorted(ends.items())} for t, ends in sorted(self.topics.items())},
                **({"progress": self.progress} if self.progress else {})}

    @classmethod
    def from_json(cls, doc: dict) -> "Request":
        try:
            return cls(doc["id"], doc["requested_at"], doc["reason"], doc["key_id"], tuple(doc["hashes"]),
                       {t: {int(p): int(e) for p, e in ends.items()} for t, ends in doc["topics"].items()},
                       {k: list(v) for k, v in doc.get("progress", {}).items()})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise RequestError(f"the erasure request is not one ({type(e).__name__}: {e})") from None


def new_id(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def check_id(request_id: str) -> str:
    if not _ID.match(request_id or ""):
        raise RequestError(f"request id {request_id!r} is not one `matos forget` gives (like 20261202T031500Z-1a2b3c4d)")
    return request_id


def write(store: Store, prefix: str, req: Request) -> str:
    name = layout.erasure_request_name(prefix, req.id)
    store.put_json(name, req.to_json())
    return name


def read(store: Store, prefix: str, request_id: str) -> Request | None:
    """The request, or None if there is none (never made, or carried out: then its record is there)."""
    doc = store.get_json(layout.erasure_request_name(prefix, check_id(request_id)))
    return None if doc is None else Request.from_json(doc)


def delete(store: Store, prefix: str, request_id: str) -> None:
    store.delete(layout.erasure_request_name(prefix, request_id))


def make(secret: bytes, raw_keys: list[bytes], reason: str, log_ends: dict[str, dict[int, int]],
         now: datetime | None = None) -> Request:
    """A new request: the keys' keyed hashes (never the keys), each partition's log end now."""
    from matos_dagster.core.erase import keys

    now = now or datetime.now(timezone.utc)
    return Request(new_id(now), now.strftime("%Y-%m-%dT%H:%M:%SZ"), reason, keys.key_id(secret),
                   tuple(sorted({keys.keyed_hash(secret, k) for k in raw_keys})), log_ends)
