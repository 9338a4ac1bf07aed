"""A topic's erasure ledger: the keyed hashes its writers must leave out, and below which offsets.

    <prefix>/_erasure/topic=<topic>/ledger.json
    {"topic": "orders", "requests": {"<request id>": {"key_id": "...", "hashes": [...],
                                                       "log_ends": {"0": 5120, "1": 4980}}}}

Kafka keeps an erased record until its own retention, and every writer of the archive can read it
again: a range archived again (an object that does not match its manifest, a re-run), a slice
task. Each writer reads the ledger and leaves out, and counts as erased, a record whose key's hash
is in a request and whose offset is below that request's log end of its partition. A record of
the key produced after the request (at or above the log end) is archived as any other. The entry
is written before any object is rewritten, so from then on nothing brings the records back.
No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.erase import keys as erase_keys
from matos_dagster.core.erase.request import Request
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store


class LedgerError(ValueError):
    """The ledger cannot be applied (no erasure key, or another one): one line."""


def read(store: Store, prefix: str, topic: str) -> dict:
    return store.get_json(layout.erasure_ledger_name(prefix, topic)) or {"topic": topic, "requests": {}}


def add(store: Store, prefix: str, topic: str, req: Request) -> None:
    """The request's entry in the topic's ledger (once: a re-run finds it there)."""
    doc = read(store, prefix, topic)
    if req.id in doc["requests"]:
        return
    doc["requests"][req.id] = {"key_id": req.key_id, "hashes": list(req.hashes),
                               "log_ends": {str(p): e for p, e in sorted(req.topics[topic].items())}}
    store.put_json(layout.erasure_ledger_name(prefix, topic), doc)


@dataclass(frozen=True)
class Leave:
    """What a writer of one partition leaves out: per keyed hash, the offset below which its records go.

    Carried to Spark tasks: keyed hashes and offsets only, and the erasure key (in no repr)."""

    secret: bytes = field(repr=False)
    below: dict[str, int]  # keyed hash -> the greatest log end of the requests naming it

    def mask(self, keys: pa.Array | pa.ChunkedArray, offsets: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """True for the records to leave out."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        out = np.zeros(len(keys), dtype=bool)
        if not self.below or not len(keys):
            return out
        offs = np.asarray(pc.fill_null(offsets, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        limit = np.full(len(keys), -1, dtype=np.int64)
        for k in pc.unique(keys.drop_null()).to_pylist():
            end = self.below.get(erase_keys.keyed_hash(self.secret, k))
            if end is not None:
                hit = pc.fill_null(pc.equal(keys, pa.scalar(k, keys.type)), False).to_numpy(zero_copy_only=False)
                limit[hit] = end
        return offs < limit

    def hit(self, key: bytes | None, offset: int) -> bool:
        """One record (the Python slice reader's loop): whether to leave it out."""
        if key is None:
            return False
        end = self.below.get(erase_keys.keyed_hash(self.secret, key))
        return end is not None and offset < end


def leave(doc: dict, partition: int, start: int, secret_setting: str) -> Leave | None:
    """What writers of `partition` from offset `start` on leave out; None when the ledger says nothing there.

    `secret_setting`: MATOS_ERASURE_KEY's value; refused when the ledger applies and it is unset or
    not the key the ledger's hashes were made with (the records would come back unseen)."""
    below: dict[str, int] = {}
    ids = set()
    for entry in doc.get("requests", {}).values():
        end = entry["log_ends"].get(str(partition))
        if end is None or end <= start:
            continue
        ids.add(entry["key_id"])
        for h in entry["hashes"]:
            below[h] = max(below.get(h, 0), end)
    if not below:
        return None
    try:
        secret = erase_keys.erasure_key(secret_setting)
    except erase_keys.BadKey as e:
        raise LedgerError(f"{doc.get('topic')}/{partition}: the erasure ledger applies to offsets from {start} "
                          f"on, and {e}") from None
    if ids != {erase_keys.key_id(secret)}:
        raise LedgerError(f"{doc.get('topic')}/{partition}: the erasure ledger's hashes were made with another "
                          f"{erase_keys.SETTING} (key id {', '.join(sorted(ids))}): set the key they were made with "
                          "(docs/operations/forgetting.md, rotating the key)")
    return Leave(secret, below)
