"""An object's key index: a Bloom filter of the keyed hashes of its records' keys, so that an
erasure reads only the objects that may hold a key (docs/operations/forgetting.md).

    objects[i]["key_index"] = {"key_id": "<which MATOS_ERASURE_KEY>", "k": 7, "bits": "<base64>"}

Where it lives: in the object's entry of its range's manifest. The erasure reads the manifest
anyway (it lists the objects and their md5), so deciding to skip an object costs no request of
its own; and the entry is rewritten together with the object it describes (an erasure's
replacement, a compaction's merge) in the one PUT that switches to it, so an index never
describes another object's records.

What it reveals: the bits are positions derived from HMAC-SHA256(MATOS_ERASURE_KEY, key), the
keyed hash the erasure ledger and requests already use, never from the key itself. Without the
erasure key nobody can test whether a key is in an object. An index made with another erasure key
(`key_id` differs, after a rotation) says nothing: its object is read.

Its size: BITS_PER_KEY bits a distinct key (about 0.05 % false positives with K_MAX probes: at
1 %, an archive of 10,000 objects would read 100 for nothing, bench/erasure.py), at most MOST_BYTES
(base64: a third more) whatever the object holds: an object of more distinct keys than that holds
gets a fuller filter (more false positives, each an object read for nothing, never a record
missed). No Dagster imports.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core.erase import keys as erase_keys

ENTRY = "key_index"
BITS_PER_KEY = 16  # about 0.05 % false positives at the best number of probes (11)
MOST_BYTES = 16 * 1024  # 131,072 bits: 0.05 % up to ~8,000 distinct keys an object; a manifest entry stays small
LEAST_BYTES = 8
K_MAX = 11


def _pairs(digests: list[bytes]) -> np.ndarray:
    """Two 64-bit numbers of each keyed hash (its first 16 bytes): the probes are h1 + i * h2."""
    if not digests:
        return np.zeros((0, 2), dtype=np.uint64)
    return np.frombuffer(b"".join(d[:16] for d in digests), dtype="<u8").reshape(-1, 2)


def _positions(pairs: np.ndarray, k: int, m: int) -> np.ndarray:
    i = np.arange(k, dtype=np.uint64)
    with np.errstate(over="ignore"):  # wrapping is part of the hash
        return (pairs[:, :1] + i[None, :] * (pairs[:, 1:] | np.uint64(1))) % np.uint64(m)


def build(key_id: str, pairs: np.ndarray) -> dict:
    """The index of the distinct keyed hashes `pairs` (from `_pairs`)."""
    pairs = np.unique(pairs, axis=0) if len(pairs) else pairs
    n = max(1, len(pairs))
    nbytes = min(MOST_BYTES, max(LEAST_BYTES, math.ceil(n * BITS_PER_KEY / 8)))
    m = nbytes * 8
    k = max(1, min(K_MAX, round(m / n * math.log(2))))
    bits = np.zeros(m, dtype=np.uint8)
    if len(pairs):
        bits[_positions(pairs, k, m).ravel().astype(np.int64)] = 1
    return {"key_id": key_id, "k": k, "bits": base64.b64encode(np.packbits(bits, bitorder="little").tobytes()).decode()}


def may_hold(index: dict | None, key_id: str, hashes: frozenset[str] | set[str]) -> bool:
    """Whether an object whose entry has `index` may hold a key of keyed hashes `hashes` (hex).

    True, so the object is read, when it has no index or one made with another erasure key: only
    an index of this erasure key can say that a key is absent."""
    if not index or index.get("key_id") != key_id:
        return True
    try:
        raw = np.frombuffer(base64.b64decode(index["bits"], validate=True), dtype=np.uint8)
        k = int(index["k"])
    except (KeyError, TypeError, ValueError):
        return True  # not an index this code wrote: it proves nothing
    m = len(raw) * 8
    if not m or k < 1:
        return True
    bits = np.unpackbits(raw, bitorder="little")
    pairs = _pairs([bytes.fromhex(h) for h in hashes])
    return bool(len(pairs)) and bool(bits[_positions(pairs, k, m).astype(np.int64)].all(axis=1).any())


@dataclass(frozen=True)
class Indexer:
    """Makes the key indexes of one erasure key; carried to Spark tasks (the key in no repr)."""

    secret: bytes = field(repr=False)
    key_id: str

    def digests(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The keyed hashes' pairs of the distinct non-null `keys` (each hashed once: keys repeat)."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        distinct = pc.unique(keys.drop_null()).to_pylist()
        return _pairs([hmac.digest(self.secret, k, hashlib.sha256) for k in distinct])

    def of(self, keys: pa.Array | pa.ChunkedArray) -> dict:
        """The index of an object whose records have `keys`."""
        return build(self.key_id, self.digests(keys))

    def gather(self) -> "Gathered":
        return Gathered(self)


class Gathered:
    """An object's index gathered chunk by chunk as its records are written (the slice task's Batch)."""

    def __init__(self, indexer: Indexer):
        self._indexer = indexer
        self._pairs: list[np.ndarray] = []

    def add(self, keys: pa.Array | pa.ChunkedArray) -> None:
        self._pairs.append(self._indexer.digests(keys))

    def index(self) -> dict:
        pairs = np.concatenate(self._pairs) if self._pairs else _pairs([])
        return build(self._indexer.key_id, pairs)


def indexer(secret_setting: str) -> Indexer | None:
    """The indexer of MATOS_ERASURE_KEY's value; None when it is unset (objects then get no index,
    and an erasure reads them). A value that is set but not a key is refused as the ledger refuses it."""
    if not secret_setting:
        return None
    secret = erase_keys.erasure_key(secret_setting)
    return Indexer(secret, erase_keys.key_id(secret))


def indexer_or_none(secret_setting: str, say) -> Indexer | None:
    """A writer's indexer: None, said through `say`, when MATOS_ERASURE_KEY is set but not a key
    (the objects get no index, so an erasure reads them; the erasure itself refuses that key)."""
    try:
        return indexer(secret_setting)
    except erase_keys.BadKey as e:
        say(f"objects written without a key index: {e}")
        return None
