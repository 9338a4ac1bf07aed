"""Keys to erase, as an operator gives them, and the keyed hash by which the archive knows them.

A key is given as text (its UTF-8 bytes), `hex:<hex digits>` or `base64:<base64>`: the raw bytes
of the Kafka record key to match. The archive never stores a key: it stores
HMAC-SHA256(MATOS_ERASURE_KEY, key bytes), hex, which names the key without revealing it to
anyone who does not hold the erasure key (a plain hash of a customer id is found by hashing
every id). No message of this module repeats a key it refuses. No Dagster imports.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

SETTING = "MATOS_ERASURE_KEY"
LEAST_KEY_BYTES = 16


class BadKey(ValueError):
    """A key or keys file that cannot be read; one line saying what to change (never the key)."""


def parse_key(text: str, where: str = "--key") -> bytes:
    """The raw bytes a key names: text, `hex:...` or `base64:...`."""
    if text.startswith("hex:"):
        try:
            return bytes.fromhex(text[4:])
        except ValueError:
            raise BadKey(f"{where}: after `hex:` give an even number of hex digits (0-9, a-f)") from None
    if text.startswith("base64:"):
        try:
            return base64.b64decode(text[7:], validate=True)
        except (binascii.Error, ValueError):
            raise BadKey(f"{where}: after `base64:` give standard base64 (A-Z, a-z, 0-9, +, /, = padding)") from None
    if not text:
        raise BadKey(f"{where}: a key is empty; give its text, hex:... or base64:...")
    return text.encode()


def parse_keys_file(content: str, path: str) -> list[bytes]:
    """One key a line (blank lines skipped); refused when it holds none."""
    keys = [parse_key(line, f"{path} line {i}") for i, line in enumerate(content.splitlines(), 1) if line.strip()]
    if not keys:
        raise BadKey(f"{path} holds no key: give one key a line (text, hex:... or base64:...)")
    return keys


def erasure_key(value: str) -> bytes:
    """MATOS_ERASURE_KEY's bytes; refused (one line, not repeating it) when unset or short."""
    if not value:
        raise BadKey(f"{SETTING} is not set: forgetting needs a secret key of at least {LEAST_KEY_BYTES} bytes "
                        "(text, hex:... or base64:...), the same for every process of the archive")
    try:
        raw = parse_key(value, SETTING)
    except BadKey as e:
        raise BadKey(str(e)) from None
    if len(raw) < LEAST_KEY_BYTES:
        raise BadKey(f"{SETTING} is {len(raw)} bytes: give at least {LEAST_KEY_BYTES}")
    return raw


def keyed_hash(secret: bytes, key: bytes) -> str:
    return hmac.new(secret, key, hashlib.sha256).hexdigest()


def key_id(secret: bytes) -> str:
    """Names the erasure key (not the person's): a ledger made with another key is told apart."""
    return keyed_hash(secret, b"matos-dagster erasure key id")[:16]


@dataclass(frozen=True)
class Matcher:
    """Which records' keys have one of `hashes` (keyed by `secret`). The secret is in no repr."""

    secret: bytes = field(repr=False)
    hashes: frozenset[str]

    def mask(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """True where a record's key is one of the hashes (nulls never are). Each distinct key is
        hashed once: an object's keys repeat."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        distinct = pc.unique(keys.drop_null())
        hit = [k for k in distinct.to_pylist() if keyed_hash(self.secret, k) in self.hashes]
        if not hit:
            return pa.array([False] * len(keys), pa.bool_())
        return pc.fill_null(pc.is_in(keys, value_set=pa.array(hit, keys.type)), False)
