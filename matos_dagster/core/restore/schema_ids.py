"""Schema ids in the wire prefix: which ids the restored records name, and their rewrite.

Restored as archived, a typed topic's records keep the schema ids of the registry they were
produced with (the Confluent wire format: magic byte 0, the id in 4 big-endian bytes, the
payload). Restored into a cluster whose registry numbers schemas otherwise, the restore may
register the archived schemas there (registry.py) and rewrite each record's id to the one the
target registry gave: an `IdMap`, per typed side (key, value), archived id -> target id.

`used` reads, from the manifests alone, the ids the selected records name; `rewrite` changes a
key's or value's 4 id bytes and nothing else. A record is rewritten only if it starts with the
wire prefix of a mapped id; a null one, one without the prefix (no magic byte, cut short) and
one naming an id that has no archived schema are produced as archived, and counted.
In an object whose manifest entry lists the ids its records named (every typed object's does),
only those ids are mapped: a topic typed with a schema file holds bare values, which may start
with a 0 byte by chance, and lists none. Pure: no I/O, no Dagster.
"""

from __future__ import annotations

import struct
from typing import Iterable, Mapping

from matos_dagster.core.schemas import wire
from matos_dagster.core.schemas.sources import AVRO, JSON, PROTOBUF

SIDES = ("key", "value")
# What became of one key or value: its id rewritten, mapped to the same id, or left as archived.
REWRITTEN, SAME, NO_PREFIX, UNARCHIVED = "rewritten", "same id", "no wire prefix", "id not archived"
OUTCOMES = (REWRITTEN, SAME, NO_PREFIX, UNARCHIVED)

# A typed side's format in the topics file -> the registry's schema type (as decode.SCHEMA_TYPES,
# without importing the decoders into the restore's Spark workers).
SCHEMA_TYPES = {"avro": AVRO, "protobuf": PROTOBUF, "json_schema": JSON}

IdMap = Mapping[str, Mapping[int, int]]  # side -> archived schema id -> the target registry's id


def subject(topic: str, side: str) -> str:
    """The subject a record of `topic` names its schema under: Confluent's TopicNameStrategy."""
    return f"{topic}-{side}"


def used(objects: Iterable[dict]) -> dict[str, dict[int, str]]:
    """Per typed side, the schema ids the objects' records name, with their schema type
    (AVRO, PROTOBUF, JSON); from the manifest entries (`typed`), sides of schemaless JSON aside."""
    out: dict[str, dict[int, str]] = {}
    for o in objects:
        for side, t in (o.get("typed") or {}).items():
            kind = SCHEMA_TYPES.get(t.get("format"))
            if kind is None:
                continue
            ids = out.setdefault(side, {})
            for i in t.get("schema_ids") or ():
                if isinstance(i, int):
                    ids.setdefault(i, kind)
    return {side: dict(sorted(ids.items())) for side, ids in sorted(out.items())}


def for_object(ids: IdMap, o: dict) -> dict[str, dict[int, int]]:
    """The part of `ids` that applies to the records of the object `o` (a manifest entry): per
    side, the ids its `typed` entry lists, all of them where it has none for that side."""
    typed = o.get("typed") or {}
    out = {}
    for side, mapping in ids.items():
        listed = typed.get(side, {}).get("schema_ids") if side in typed else None
        out[side] = dict(mapping) if listed is None else {i: mapping[i] for i in listed if i in mapping}
    return out


def rewrite(data: bytes | None, ids: Mapping[int, int]) -> tuple[bytes | None, str | None]:
    """`data` with the id of its wire prefix replaced by `ids`' target id, and what was done:
    REWRITTEN, SAME (mapped to the id it had: the same bytes), NO_PREFIX or UNARCHIVED (the
    same bytes); (None, None) for a null key or value. The payload after the 5 bytes is kept
    as it is (a Protobuf record's message indexes too)."""
    if data is None:
        return None, None
    framed = wire.split(data)
    if isinstance(framed, str):
        return data, NO_PREFIX
    new = ids.get(framed.schema_id)
    if new is None:
        return data, UNARCHIVED
    if new == framed.schema_id:
        return data, SAME
    return bytes(data[:1]) + struct.pack(">I", new) + bytes(data[wire.HEADER:]), REWRITTEN


def rewrite_all(values: list[bytes | None], ids: Mapping[int, int], counts: dict[str, int]) -> list[bytes | None]:
    """`rewrite` of each of `values`, in order, adding each outcome to `counts`."""
    out = []
    for v in values:
        new, outcome = rewrite(v, ids)
        if outcome is not None:
            counts[outcome] = counts.get(outcome, 0) + 1
        out.append(new)
    return out


def add_counts(total: dict[str, dict[str, int]], more: Mapping[str, Mapping[str, int]]) -> None:
    """Per side and outcome, `more`'s counts added to `total`."""
    for side, counts in more.items():
        mine = total.setdefault(side, {})
        for outcome, n in counts.items():
            mine[outcome] = mine.get(outcome, 0) + n


def show(ids: IdMap) -> str:
    """`value: 3 -> 7, 4 -> 8; key: 5 -> 5`, for the run's log."""
    return "; ".join(f"{side}: " + (", ".join(f"{a} -> {b}" for a, b in sorted(m.items())) or "none")
                     for side, m in ids.items())
