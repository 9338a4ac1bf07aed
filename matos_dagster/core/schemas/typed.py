"""Typed columns in the archive's objects, beside the raw bytes: what a topic's keys and values
are (`Typing`), and one object's typed columns as its chunks are sealed (`ObjectTypes`).

A typed object's Arrow schema is `records.schema.SCHEMA` followed by, for each typed side
(key first, then value):

    <side>_schema_id   int32     the schema id the record named (Confluent wire format); null
                                 where none (a null value, no magic byte, a schema file's topic)
    <side>_data        the decoded value: a struct for records; null where the record is null
                                 or did not decode
    <side>_error       string    null, or why the record did not decode

One schema per object, so one type per side: every record is read with the schema its writer
used (decode.py), and the object's type is the union of its records' writers' types (union.py:
the newest's fields first, then fields only older versions have, numbers widened), so a record
keeps every field its writer set, whichever versions share its object. The writers are known
from the records' wire prefixes before anything is decoded (writers.py); a writer whose type has
no union with the object's (a field whose type changed) ends the object at its first record,
and the next object starts there (`add`'s rest: records/batch.py and the slice task write it).
A chunk whose writers add to the object's type (a new version, a field schemaless JSON had not
seen) gives chunks of a new schema: the object's earlier chunks are written again in it
(`conform`: fields they lack null). A side none of whose records has decoded yet has no
`<side>_data` column (no type to give it: readers and the Iceberg table read it as null, as they
read an untyped object's); schemaless JSON's type is inferred (schemaless.py) and grows the same way.

No Dagster imports. `Typing` is plain and frozen: it pickles to the Spark tasks with the slice
job (a registry's password inside it is never in its repr).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from matos_dagster.core import settings
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.schemas.decode import SCHEMA_TYPES, Side, decode, type_of
from matos_dagster.core.schemas.errors import UndecodableRecord, UnknownSchema
from matos_dagster.core.schemas.sources import FileSource, RegistrySource, to_document
from matos_dagster.core.schemas.union import Conflict, conform
from matos_dagster.core.schemas.writers import Writers, one_line, scan
from matos_dagster.core.spark import malloc
from matos_dagster.core.swift import layout

SIDES = ("key", "value")
REGISTRY_FORMATS = tuple(SCHEMA_TYPES)  # avro, protobuf, json_schema: schemas from a registry or a file


class Undecodable(ValueError):
    """decode_strict: a record that does not decode fails its range (one line: where, and why)."""


@dataclass(frozen=True)
class Typing:
    """How a topic's keys and values are decoded into typed columns; a side of format `none` has none."""

    key: Side = Side()
    value: Side = Side()
    key_source: Any = None  # RegistrySource, FileSource, or None (json, none)
    value_source: Any = None

    @property
    def sides(self) -> list[tuple[str, Side, Any]]:
        """(name, side, source) of each typed side, key first."""
        out = [("key", self.key, self.key_source), ("value", self.value, self.value_source)]
        return [s for s in out if s[1].format != "none"]


def registry_from_settings() -> RegistrySource | None:
    """The schema registry of the MATOS_SCHEMA_REGISTRY_* settings, or None when its URL is empty."""
    url = settings.get("MATOS_SCHEMA_REGISTRY_URL").strip()
    if not url:
        return None
    user = settings.get("MATOS_SCHEMA_REGISTRY_USERNAME")
    return RegistrySource(url, username=user or None, password=settings.get("MATOS_SCHEMA_REGISTRY_PASSWORD") or None,
                          ca_file=settings.get("MATOS_SCHEMA_REGISTRY_CA_FILE") or None)


def for_topic(topic: Any, registry: RegistrySource | None = None) -> Typing | None:
    """The topic's Typing (a `TopicConfig`: key_format, value_format, *_schema_file, decode_strict),
    or None when neither side is typed. `registry`: where schemas come from for a side with no
    schema file; by default the MATOS_SCHEMA_REGISTRY_* settings'."""
    parts: dict[str, Any] = {}
    for side in SIDES:
        fmt, path = getattr(topic, f"{side}_format"), getattr(topic, f"{side}_schema_file")
        parts[side] = Side(fmt, strict=topic.decode_strict, types=getattr(topic, f"{side}_types", "one"))
        source = None
        if fmt in REGISTRY_FORMATS:
            if path:
                source = FileSource(path)
            else:
                registry = registry or registry_from_settings()
                if registry is None:
                    raise ValueError(f"topic {topic.name}: {side}_format {fmt} needs MATOS_SCHEMA_REGISTRY_URL "
                                     f"or {side}_schema_file")
                source = registry
        parts[f"{side}_source"] = source
    typing = Typing(**parts)
    return typing if typing.sides else None


def object_schema(types: dict[str, pa.DataType], typing: Typing, readers: dict[str, int | None]) -> pa.Schema:
    """SCHEMA, then each typed side's three columns; `<side>_data` says its format and reader schema id."""
    fields = list(SCHEMA)
    for name, side, _ in typing.sides:
        meta = {"format": side.format}
        if readers.get(name) is not None:
            meta["reader_schema_id"] = str(readers[name])
        fields.append(pa.field(f"{name}_schema_id", pa.int32()))
        if types[name] is not None:  # None: no record of the side decoded in the object
            fields.append(pa.field(f"{name}_data", types[name], metadata=meta))
        # With no data column, the error column says the side's format (a compaction's count needs it).
        fields.append(pa.field(f"{name}_error", pa.string(), metadata=None if types[name] is not None else meta))
    return pa.schema(fields)


class ObjectTypes:
    """One object's typed columns: `add` each sealed chunk (of SCHEMA), write what it returns (of
    `schema`; when that changed, the object's earlier chunks `conform`ed to it first), and start a
    new object with the rest it returns, if any; `stats` for its manifest entry."""

    def __init__(self, typing: Typing, topic: str, partition: int):
        # Decoding makes chunk-sized buffers in Python (numpy, pyarrow, a value per record): with
        # glibc's mmap threshold free to rise, a worker kept them, and the objects' buffers, from
        # object to object (spark/malloc.py). Fixed, as the Python reader fixes it (the typed bench:
        # a task's peak over object_bytes).
        malloc.fix_mmap_threshold()
        self.typing = typing
        self._where = f"{topic}/{partition}"
        self._sides = {name: _SideTypes(name, side, source) for name, side, source in typing.sides}
        self.schema: pa.Schema | None = None

    def add(self, chunk: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch | None]:
        """The chunk with its typed columns, up to the first record whose writer's type has no union
        with the object's; and the records from there on (None: there are none), the next object's."""
        found = {name: s.scan(chunk.column(name)) for name, s in self._sides.items()}
        cut = min([chunk.num_rows] + [s.cut(found[name]) for name, s in self._sides.items()])
        rest = None
        if cut < chunk.num_rows:
            chunk, rest = chunk.slice(0, cut), chunk.slice(cut)
            found = {name: None if f is None else f.head(cut) for name, f in found.items()}
        offsets = chunk.column("offset").to_pylist() if any(s.side.strict for s in self._sides.values()) else None
        columns = list(chunk.columns)
        for name, s in self._sides.items():
            try:
                d = s.decode(chunk.column(name), found[name], offsets)
            except UndecodableRecord as e:
                raise self._undecodable(name, e.offset, e.reason) from None
            columns += [d.schema_ids, d.errors] if s.type is None else [d.schema_ids, d.data, d.errors]
        self.schema = object_schema({n: s.type for n, s in self._sides.items()}, self.typing,
                                    {n: s.newest for n, s in self._sides.items()})
        return pa.RecordBatch.from_arrays(columns, schema=self.schema), rest

    def conform(self, chunk: pa.RecordBatch) -> pa.RecordBatch:
        """An earlier chunk of the object in its `schema` now: its typed data cast to the wider type
        (fields it lacks null), a data column it lacks all null."""
        columns = []
        for field in self.schema:
            if field.name in chunk.schema.names:
                columns.append(conform(chunk.column(field.name), field.type))
            else:
                columns.append(pa.array([None] * chunk.num_rows, field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def stats(self) -> dict:
        """The object's manifest entry `typed`: per side its format, reader schema id (the newest of
        its writers'), schema ids seen, counts."""
        return {name: {"format": s.side.format, "reader_schema_id": s.newest, "schema_ids": sorted(s.ids),
                       **s.counts} for name, s in self._sides.items()}

    def _undecodable(self, side: str, offset: int | None, reason: str) -> Undecodable:
        return Undecodable(f"record {self._where}@{offset}: its {side} does not decode ({reason}) and the topic "
                           f"has decode_strict: true; nothing is committed (fix the record's producer, or set "
                           f"decode_strict: false to archive it with null typed columns)")


class _SideTypes:
    """One side of one object: the writers of its records so far, and the type they share."""

    def __init__(self, name: str, side: Side, source: Any):
        self.name, self.side, self.source = name, side, source
        self.writers: dict[tuple, Any] = {}  # by key
        self.refused: dict[tuple, str] = {}  # writers of another record whose type has no union with the object's
        self.type: pa.DataType | None = None
        self.newest: int | None = None
        self.ids: set[int] = set()
        self.counts = {"decoded": 0, "failed": 0, "nulls": 0}

    def scan(self, values: pa.Array) -> Writers | None:
        return scan(values, self.side.format, self.source) if self.side.format in REGISTRY_FORMATS else None

    def cut(self, found: Writers | None) -> int:
        """The first record whose writer's type has no union with the object's (len: none).

        A version of a record the object has (a field whose type changed) ends the object; another
        record whose type has none (a topic of several record types typed as one) does not: its
        records are errors here, saying to type them by record name."""
        if found is None:
            return 2**62  # schemaless JSON: a record that does not fit is an error of its own
        joined = dict(self.writers)
        for row, code in found.present():
            w = found.found[code]
            if w.key in joined or w.key in self.refused:
                continue
            try:
                type_of([*joined.values(), w], self.side.types)
            except Conflict as e:
                if any(o.name == w.name for o in joined.values()):
                    return row
                self.refused[w.key] = one_line(
                    f"record {w.name} (schema {w.schema_id}) has no type in common with this object's other records "
                    f"({e}): a topic of several record types needs {self.name}_types: by_record_name")
                continue
            joined[w.key] = w
        return len(found)

    def decode(self, values: pa.Array, found: Writers | None, offsets: list | None):
        if found is not None:
            for _, code in found.present():
                if found.found[code].key in self.refused:
                    found = found.refused(code, self.refused[found.found[code].key])
            # A schema file's writer types the side even before a record has a value.
            usable = found.found if not self.source.framed else [found.found[c] for _, c in found.present()]
            for w in usable:
                self.writers.setdefault(w.key, w)
            self.type = type_of(list(self.writers.values()), self.side.types)
            ids = [k[0] for k in self.writers if k[0] is not None]
            self.newest = max(ids) if ids else None
        d = decode(values, self.side, self.source, offsets, found, self.type)
        if self.side.format == "json" and d.data.type != pa.null():
            self.type = d.data.type
        self.counts["decoded"] += d.decoded
        self.counts["failed"] += d.failed
        self.counts["nulls"] += d.nulls
        if found is not None:
            self.ids.update(np.unique(found.ids[found.ids >= 0]).tolist())
        return d


def archive_schemas(store: Any, prefix: str, topic: str, typing: Typing, ids: dict[str, set[int]]) -> list[int]:
    """Write every schema `ids` names (per side), and the schemas they reference, to
    `layout.schema_name` (as `sources.to_document`), unless already there; the ids written.

    So the archive decodes without the registry (`ArchivedSource`). An id the source does not
    know (a bad record's) is skipped; an unreachable registry raises RegistryUnavailable."""
    written: list[int] = []
    seen: set[int] = set()
    for name, side, source in typing.sides:
        if isinstance(source, RegistrySource):
            for sid in sorted(ids.get(name, ())):
                _archive_schema(store, prefix, topic, source, SCHEMA_TYPES[side.format], sid, seen, written)
    return written


def _archive_schema(store: Any, prefix: str, topic: str, source: RegistrySource, kind: str, sid: int,
                    seen: set[int], written: list[int]) -> None:
    if sid in seen:
        return
    seen.add(sid)
    target = layout.schema_name(prefix, topic, sid)
    if store.head(target) is not None:
        return  # archived, with the schemas it references, by an earlier range
    try:
        schema = source.get(sid, kind)
    except UnknownSchema:
        return
    # Its references first: a schema's document is there only once every schema it names is.
    for ref in schema.references:
        if ref.schema.id is not None:
            _archive_schema(store, prefix, topic, source, kind, ref.schema.id, seen, written)
    store.put_json(target, to_document(schema))
    written.append(sid)
