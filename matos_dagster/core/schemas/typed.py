"""Typed columns in the archive's objects, beside the raw bytes: what a topic's keys and values
are (`Typing`), and one object's typed columns as its chunks are sealed (`ObjectTypes`).

A typed object's Arrow schema is `records.schema.SCHEMA` followed by, for each typed side
(key first, then value):

    <side>_schema_id   int32     the schema id the record named (Confluent wire format); null
                                 where none (a null value, no magic byte, a schema file's topic)
    <side>_data        the decoded value: a struct for records; null where the record is null
                                 or did not decode
    <side>_error       string    null, or why the record did not decode

One schema per object, so one type per side: the first chunk of the object in which a record of
the side decodes fixes its reader schema (`Side.reader_schema_id`: the newest id that chunk's
records name) and so its type, and the object's later chunks are read with that same reader (an
Avro record of a newer version is resolved to it, its new fields dropped from the typed column,
never from the raw bytes). The next object starts afresh, so it may take a newer schema. Chunks
before that first decodable record (all null or bad) are held until the type is known, then
written with null data of it; an object with no decodable record of a side at all has no
`<side>_data` column (no type to give it: readers and the Iceberg table read it as null, as they
read an untyped object's). Schemaless JSON has no reader schema: the first chunk's inferred type is the
object's, and a later record that does not fit it is an error of its own ("does not fit ...").

No Dagster imports. `Typing` is plain and frozen: it pickles to the Spark tasks with the slice
job (a registry's password inside it is never in its repr).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from matos_dagster.core import settings
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.schemas.decode import SCHEMA_TYPES, Decoded, Side, decode
from matos_dagster.core.schemas.errors import UndecodableRecord, UnknownSchema
from matos_dagster.core.schemas.sources import FileSource, RegistrySource, to_document
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
        parts[side] = Side(fmt, strict=topic.decode_strict)
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
    """One object's typed columns: `add` each sealed chunk (of SCHEMA), write what it returns
    (chunks of `schema`, maybe none yet, maybe held ones too); `finish` at the object's end;
    `stats` for its manifest entry."""

    def __init__(self, typing: Typing, topic: str, partition: int):
        # Decoding makes chunk-sized buffers in Python (numpy, pyarrow, a value per record): with
        # glibc's mmap threshold free to rise, a worker kept them, and the objects' buffers, from
        # object to object (spark/malloc.py). Fixed, as the Python reader fixes it (the typed bench:
        # a task's peak over object_bytes).
        malloc.fix_mmap_threshold()
        self.typing = typing
        self._where = f"{topic}/{partition}"
        self._types: dict[str, pa.DataType] = {}
        self._readers: dict[str, int | None] = {}
        self._held: list[tuple[pa.RecordBatch, dict[str, Decoded]]] = []
        self._counts = {name: {"decoded": 0, "failed": 0, "nulls": 0} for name, _, _ in typing.sides}
        self._ids: dict[str, set[int]] = {name: set() for name, _, _ in typing.sides}
        self.schema: pa.Schema | None = None

    def add(self, chunk: pa.RecordBatch) -> list[pa.RecordBatch]:
        offsets = None
        parts = {}
        for name, side, source in self.typing.sides:
            if name in self._types:
                side = Side(side.format, side.strict, self._readers[name])
            if side.strict and offsets is None:
                offsets = chunk.column("offset").to_pylist()
            try:
                d = decode(chunk.column(name), side, source, offsets)
            except UndecodableRecord as e:
                raise self._undecodable(name, e.offset, e.reason) from None
            if name not in self._types and d.data.type != pa.null():
                self._types[name], self._readers[name] = d.data.type, d.reader_schema_id
            parts[name] = d
        self._held.append((chunk, parts))
        return self._release() if len(self._types) == len(self._counts) else []

    def finish(self) -> list[pa.RecordBatch]:
        """The chunks still held: a side with no decodable record in the whole object has no data column."""
        for name in self._counts:
            self._types.setdefault(name, None)
            self._readers.setdefault(name, None)
        return self._release()

    def stats(self) -> dict:
        """The object's manifest entry `typed`: per side its format, reader schema id, schema ids seen, counts."""
        return {name: {"format": side.format, "reader_schema_id": self._readers.get(name),
                       "schema_ids": sorted(self._ids[name]), **self._counts[name]}
                for name, side, _ in self.typing.sides}

    def _release(self) -> list[pa.RecordBatch]:
        if self.schema is None:
            self.schema = object_schema(self._types, self.typing, self._readers)
        held, self._held = self._held, []
        return [self._typed(chunk, parts) for chunk, parts in held]

    def _typed(self, chunk: pa.RecordBatch, parts: dict[str, Decoded]) -> pa.RecordBatch:
        columns = list(chunk.columns)
        for name, side, _ in self.typing.sides:
            d = parts[name]
            if self._types[name] is None:  # nothing of the side decoded in the whole object
                data, errors, moved = None, d.errors, 0
            else:
                data, errors, moved = self._conform(d, self._types[name], chunk, name, side.strict)
            counts = self._counts[name]
            counts["decoded"] += d.decoded - moved
            counts["failed"] += d.failed + moved
            counts["nulls"] += d.nulls
            self._ids[name].update(i for i in pc.unique(d.schema_ids).to_pylist() if i is not None)
            columns += [d.schema_ids, errors] if data is None else [d.schema_ids, data, errors]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _conform(self, d: Decoded, want: pa.DataType, chunk: pa.RecordBatch, name: str,
                 strict: bool) -> tuple[pa.Array, pa.Array, int]:
        """The chunk's data as the object's type: (data, errors, records that did not fit it).

        The same reader gives the same type; only schemaless JSON (a type inferred per chunk) or
        Protobuf records of another message can differ. A record that does not fit is an error."""
        if d.data.type == want:
            return d.data, d.errors, 0
        if d.data.type == pa.null():
            # Built as decode builds a null record, not by pa.nulls: a struct's non-nullable fields
            # then hold placeholders under the null, which Parquet requires (pa.nulls leaves them null).
            return pa.array([None] * len(d.data), want), d.errors, 0
        try:
            return d.data.cast(want), d.errors, 0
        except (pa.ArrowException, ValueError, TypeError):
            pass
        values, errors, moved = d.data.to_pylist(), d.errors.to_pylist(), 0
        for i, v in enumerate(values):
            if v is None:
                continue
            try:
                pa.array([v], want)
            except (pa.ArrowException, ValueError, TypeError, OverflowError):
                values[i], moved = None, moved + 1
                errors[i] = f"does not fit this object's type {want} (fixed by its first records)"[:300]
                if strict:
                    raise self._undecodable(name, chunk.column("offset")[i].as_py(), errors[i]) from None
        return pa.array(values, want), pa.array(errors, pa.string()), moved

    def _undecodable(self, side: str, offset: int | None, reason: str) -> Undecodable:
        return Undecodable(f"record {self._where}@{offset}: its {side} does not decode ({reason}) and the topic "
                           f"has decode_strict: true; nothing is committed (fix the record's producer, or set "
                           f"decode_strict: false to archive it with null typed columns)")


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
