"""The range's manifest: written last, it is what makes a range archived.

    {"version": 1, "topic": "orders", "partition": 3, "start": 1000, "end": 2000,
     "format": "parquet", "records": 998, "bytes": 51234, "record_bytes": 1021952, "largest_record_bytes": 1024,
     "first_offset": 1000, "last_offset": 1999, "min_timestamp": ..., "max_timestamp": ...,
     "objects": [{"name": ".../part-00000000000000001000.parquet", "records": 998,
                  "bytes": 51234, "md5": "...", "first_offset": 1000, "last_offset": 1999,
                  "min_timestamp": ..., "max_timestamp": ..., "largest_record_bytes": 1024}]}

Timestamps are Kafka's, in milliseconds since the epoch. Nothing in it depends on when or
where it was written, so archiving a range again gives the same manifest. No Dagster imports.

A typed topic's manifest (core/schemas/typed.py) also has `typed`, per typed side: its format,
the schema ids its records named, and how many records decoded, failed and were null; and each
object the same for itself, with its reader schema id (the newest of its records' schemas):

    "typed": {"value": {"format": "avro", "schema_ids": [4, 5], "decoded": 990, "failed": 8, "nulls": 0}}
    objects[i]["typed"]: {"value": {"format": "avro", "reader_schema_id": 5, "schema_ids": [4, 5],
                                    "decoded": 990, "failed": 8, "nulls": 0}}

Absent from untyped topics' manifests, which are what they were.

Versions: 1, each Parquet object one row group; 2, a row group per 4 MiB of records
(records.ROW_GROUP_BYTES: objects are written as their records arrive), the same rows and
columns. Readers read both: Parquet readers take any row groups, and the keys are the same.
3: `hours`, what the range holds of each hour of event time (core/days/buckets.py:
`{"<hour start, ms>": [records, bytes, first_offset, last_offset, max_timestamp]}`, records
without a timestamp in none), and for a typed topic `typed` (its objects have typed columns). A
matos-dagster that reads 1 and 2 only says of a version 3 manifest that it must be upgraded.
4: `topic_id`, Kafka's id of the log the range was read from (null where the broker gives none),
and `incarnation`, the number of that log among those that carried the topic's name
(core/swift/incarnations.py); absent from older manifests, which are incarnation 1's.
Also from 4: `erased`, the offsets of the range whose records an erasure removed (core/erase/), sorted: in
Kafka, deliberately not in the archive; absent when none was. Counts, offsets, sizes, checksums,
typed counts and `hours` are those of the records left. Objects rewritten by an erasure are named
`part-<offset>.e<n>.<ext>` (layout.py). A matos-dagster that reads 1 to 3 refuses version 4.
Also from 4: `expired`, the spans `[[start, end], ...]` of offsets whose records expiry removed
because they were stamped before the topic's retention (core/expire/); absent when none was.
Also from 4: each object's `key_index` where MATOS_ERASURE_KEY was set when it was written, a
Bloom filter of its records' keyed hashes by which an erasure skips the object
(core/erase/key_index.py: `{"key_id": ..., "k": ..., "bits": "<base64>"}`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from matos_dagster.core.days import buckets
from matos_dagster.core.offsets.ranges import OffsetRange

VERSION = 4
VERSIONS = (1, 2, 3, 4)  # what readers accept
OBJECT_KEYS = ("name", "records", "bytes", "md5", "first_offset", "last_offset", "min_timestamp", "max_timestamp")


class ManifestError(ValueError):
    pass


def build(r: OffsetRange, fmt: str, objects: list[dict], typed: dict[str, str] | None = None,
          topic_id: str | None = None, incarnation: int | None = None,
          erased: list[int] | None = None) -> dict:
    """The manifest of `r`'s objects; `typed`: the typed sides' formats ({"value": "avro"}), by default
    those the objects' own `typed` entries name (none: an untyped manifest). `incarnation`: the number of
    the log read (with its Kafka `topic_id`, None if the broker gives none); None: neither key. `erased`:
    offsets whose records were left out because an erasure asked it (core/erase/)."""
    objects = sorted(objects, key=lambda o: o["first_offset"])
    if typed is None:
        typed = {side: t["format"] for o in objects for side, t in o.get("typed", {}).items()}
    for a, b in zip(objects, objects[1:]):
        if b["first_offset"] <= a["last_offset"]:
            raise ManifestError(f"objects {a['name']} and {b['name']} overlap: a slice was archived twice")
    for o in objects:
        if not (r.start <= o["first_offset"] <= o["last_offset"] < r.end):
            raise ManifestError(f"object {o['name']} holds offsets outside {r}")
    ts_min = [o["min_timestamp"] for o in objects if o["min_timestamp"] is not None]
    ts_max = [o["max_timestamp"] for o in objects if o["max_timestamp"] is not None]
    return {
        "version": VERSION,
        "topic": r.topic,
        "partition": r.partition,
        "start": r.start,
        "end": r.end,
        "format": fmt,
        "records": sum(o["records"] for o in objects),
        "bytes": sum(o["bytes"] for o in objects),
        "record_bytes": sum(o.get("record_bytes", 0) for o in objects),
        "first_offset": objects[0]["first_offset"] if objects else None,
        "last_offset": objects[-1]["last_offset"] if objects else None,
        "min_timestamp": min(ts_min) if ts_min else None,
        "max_timestamp": max(ts_max) if ts_max else None,
        # The largest record's bytes (key, value, header keys and values), by which a restore
        # checks a target's max.message.bytes before producing; absent from older manifests.
        "largest_record_bytes": max((o["largest_record_bytes"] for o in objects), default=0)
        if all("largest_record_bytes" in o for o in objects) else None,
        "objects": [{**{k: o[k] for k in OBJECT_KEYS}, **_largest(o), **_typed_of(o), **_key_index(o)}
                    for o in objects],
        **({"typed": typed_totals(typed, objects)} if typed else {}),
        **({"hours": buckets.to_json(buckets.merge(*(buckets.from_json(o["hours"]) for o in objects)))}
           if objects and all("hours" in o for o in objects) else {}),
        **({"topic_id": topic_id, "incarnation": incarnation} if incarnation is not None else {}),
        **({"erased": erased_offsets(r, erased, objects)} if erased else {}),
    }


def erased_offsets(r: OffsetRange, erased: list[int], objects: list[dict]) -> list[int]:
    """`erased`, sorted, checked to lie inside the range."""
    out = sorted(set(erased))
    if out and not (r.start <= out[0] and out[-1] < r.end):
        raise ManifestError(f"erased offsets {out[0]}..{out[-1]} are not all inside {r}")
    return out


def _typed_of(o: dict) -> dict:
    return {"typed": o["typed"]} if "typed" in o else {}


COUNTS = ("decoded", "failed", "nulls")


def typed_totals(formats: dict[str, str], objects: list[dict]) -> dict:
    """The manifest's `typed`: per side, the objects' counts summed and their schema ids merged."""
    out = {}
    for side, fmt in formats.items():
        mine = [o["typed"][side] for o in objects if side in o.get("typed", {})]
        out[side] = {"format": fmt, "schema_ids": sorted({i for t in mine for i in t["schema_ids"]}),
                     **{k: sum(t[k] for t in mine) for k in COUNTS}}
    return out


def _key_index(o: dict) -> dict:
    return {"key_index": o["key_index"]} if o.get("key_index") else {}


def _largest(o: dict) -> dict:
    return {"largest_record_bytes": o["largest_record_bytes"]} if "largest_record_bytes" in o else {}


# -- the manifest as a type: read once, checked, written back to the same JSON bytes ----------

_ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()  # a key older manifests lack


@dataclass(frozen=True)
class ObjectEntry:
    """One object a manifest lists."""

    name: str
    records: int
    bytes: int
    md5: str
    first_offset: int
    last_offset: int
    min_timestamp: int | None
    max_timestamp: int | None
    largest_record_bytes: int | None = _ABSENT
    typed: dict = _ABSENT  # a typed topic's: per side, format, reader schema id, schema ids, counts
    key_index: dict = _ABSENT  # a Bloom filter of its records' keyed hashes (core/erase/key_index.py)


@dataclass(frozen=True)
class Manifest:
    """A manifest document, typed. `from_json(doc).to_json() == doc` for every manifest this
    project writes or wrote, so `canonical_json` gives the same bytes back."""

    version: int
    topic: str
    partition: int
    start: int
    end: int
    format: str
    records: int
    bytes: int
    record_bytes: int
    first_offset: int | None
    last_offset: int | None
    min_timestamp: int | None
    max_timestamp: int | None
    objects: tuple[ObjectEntry, ...]
    largest_record_bytes: int | None = _ABSENT
    replaces: list[list[int]] = _ABSENT  # a compacted range's: the ranges it contains (core/compact/)
    typed: dict = _ABSENT  # a typed topic's: per side, format, schema ids, counts (the objects' summed)
    hours: dict = _ABSENT  # per hour of event time: records, bytes, first and last offset, max timestamp
    topic_id: str | None = _ABSENT  # Kafka's id of the log read (None: the broker gives none)
    incarnation: int = _ABSENT  # that log's number among the topic's incarnations
    erased: list[int] = _ABSENT  # version 4: offsets whose records an erasure removed (core/erase/)
    expired: list[list[int]] = _ABSENT  # version 4: spans of offsets whose records expired by age (core/expire/)

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end)

    @classmethod
    def from_json(cls, doc: Any) -> "Manifest":
        """The typed manifest; a ManifestError naming what is wrong if `doc` is not one."""
        if not isinstance(doc, dict):
            raise ManifestError(f"a manifest is a JSON object, got {type(doc).__name__}")
        objects = doc.get("objects")
        if not isinstance(objects, list):
            raise ManifestError("manifest lacks its list of objects")
        try:
            listed = tuple(ObjectEntry(**_typed(ObjectEntry, o, f"object {i}")) for i, o in enumerate(objects))
            m = cls(**{**_typed(cls, doc, "manifest", skip={"objects"}), "objects": listed})
        except TypeError as e:  # a key it lacks or one it should not have
            raise ManifestError(f"manifest is not of version {' or '.join(map(str, VERSIONS))}: {e}") from None
        if m.erased is not _ABSENT and (not isinstance(m.erased, list) or any(
                not isinstance(o, int) or isinstance(o, bool) for o in m.erased)):
            raise ManifestError(f"manifest: erased must be a list of offsets, got {m.erased!r}")
        if m.expired is not _ABSENT and (not isinstance(m.expired, list) or any(
                not isinstance(s, list) or len(s) != 2 or not all(isinstance(o, int) and not isinstance(o, bool)
                                                                  for o in s) or not s[0] < s[1] for s in m.expired)):
            raise ManifestError(f"manifest: expired must be a list of [start, end] offset spans, got {m.expired!r}")
        for where, typed in [("manifest", m.typed)] + [(f"object {i}", o.typed) for i, o in enumerate(listed)]:
            if typed is not _ABSENT:
                _check_typed(typed, where, per_object=where != "manifest")
        if m.version not in VERSIONS:
            raise ManifestError(f"manifest version {m.version} is not one this matos-dagster reads "
                                f"({', '.join(map(str, VERSIONS))}): upgrade matos-dagster to read it")
        try:
            m.range  # noqa: B018 - checks topic, partition and offsets
        except ValueError as e:
            raise ManifestError(f"manifest does not name a range: {e}") from None
        return m

    def to_json(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not _ABSENT}
        out["objects"] = [
            {f.name: getattr(o, f.name) for f in fields(o) if getattr(o, f.name) is not _ABSENT}
            for o in self.objects
        ]
        return out


_INTS = {"version", "partition", "start", "end", "records", "bytes", "record_bytes", "first_offset",
         "last_offset", "min_timestamp", "max_timestamp", "largest_record_bytes", "incarnation"}


def _typed(cls: type, doc: Any, what: str, skip: set[str] = frozenset()) -> dict:
    if not isinstance(doc, dict):
        raise ManifestError(f"{what} of the manifest is not a JSON object")
    names = {f.name for f in fields(cls)}
    unknown = set(doc) - names
    if unknown:
        raise ManifestError(f"{what} has keys no manifest has: {sorted(unknown)}")
    out = {}
    for k, v in doc.items():
        if k in skip:
            continue
        if k in _INTS and v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ManifestError(f"{what}: {k} must be an integer, got {v!r}")
        out[k] = v
    return out


def _check_typed(typed: Any, what: str, per_object: bool) -> None:
    """A `typed` entry: {side: {format, schema_ids, decoded, failed, nulls[, reader_schema_id]}}."""
    keys = {"format", "schema_ids", *COUNTS} | ({"reader_schema_id"} if per_object else set())
    if not isinstance(typed, dict) or not typed or not set(typed) <= {"key", "value"}:
        raise ManifestError(f"{what}: typed must map key and/or value to their decode counts, got {typed!r}")
    for side, t in typed.items():
        if not isinstance(t, dict) or set(t) != keys:
            raise ManifestError(f"{what}: typed.{side} must have the keys {sorted(keys)}, got {t!r}")
        ids = t["schema_ids"] if isinstance(t["schema_ids"], list) else [None]  # None: refused below
        reader = [t["reader_schema_id"]] if t.get("reader_schema_id") is not None else []
        numbers = [t[k] for k in COUNTS] + ids + reader
        if not isinstance(t["format"], str) or any(not isinstance(n, int) or isinstance(n, bool) for n in numbers):
            raise ManifestError(f"{what}: typed.{side} must hold a format and whole numbers, got {t!r}")
