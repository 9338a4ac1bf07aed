"""Where schemas come from: a Confluent schema registry, the archive's own copies, or a file.

Every source answers `get(schema_id, schema_type)` with a `Schema`, or raises `UnknownSchema`
(the record names an id the source does not have: a bad record) or, for the registry only,
`RegistryUnavailable` (the registry could not be asked: not the record's fault, the run fails
and is retried). `framed` says whether the values carry the wire header: a `FileSource`'s do
not (bare Avro binary, Protobuf bytes or JSON text), and their schema id column is null.

A Protobuf schema's text is always its FileDescriptorProto, serialized and base64-encoded (the
registry's `format=serialized`, as confluent-kafka's own deserializer asks for it): Python's
protobuf has no .proto parser, so .proto text cannot be used here.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from matos_dagster.core.schemas.errors import RegistryUnavailable, SchemaError, UnknownSchema
from matos_dagster.core.swift import layout

AVRO, PROTOBUF, JSON = "AVRO", "PROTOBUF", "JSON"
TYPES = (AVRO, PROTOBUF, JSON)
DESCRIPTOR_SETS = (".desc", ".binpb", ".pb", ".protoset")  # what `protoc --descriptor_set_out` writes


@dataclass(frozen=True)
class Reference:
    """A schema another one imports (Avro named types, a .proto import), resolved."""

    name: str  # the name the importing schema uses: an Avro type name, a .proto file name
    subject: str | None
    version: int | None
    schema: "Schema"


@dataclass(frozen=True)
class Schema:
    """One schema. Hashable: compiled forms (parsed Avro, descriptor pools, Arrow types) are cached by it."""

    id: int | None  # None for a FileSource's schema
    schema_type: str  # AVRO, PROTOBUF or JSON
    text: str
    references: tuple[Reference, ...] = ()


class Source(Protocol):
    framed: bool

    def get(self, schema_id: int | None, schema_type: str) -> Schema: ...


# Per process, shared by every RegistrySource of the same registry: a Spark worker asks once
# per schema, whatever the number of tasks it runs.
_LOCK = threading.Lock()
_CLIENTS: dict[tuple, Any] = {}
_SCHEMAS: dict[tuple, Schema] = {}


@dataclass(frozen=True)
class RegistrySource:
    """A Confluent schema registry, through confluent-kafka's `SchemaRegistryClient`.

    Holds only its settings, so it pickles to Spark workers; the client and the schemas it
    answered are cached per process. A `mock://` url gives confluent-kafka's in-memory mock.
    """

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    timeout: float = 10.0
    retries: int = 3  # confluent-kafka's own retries of a request, with backoff
    framed: ClassVar[bool] = True

    def __post_init__(self):
        # A password in the URL would be in this source's repr and in every error naming the registry
        # (which Dagster keeps in a run's events): refused, saying where it goes instead.
        if "@" in self.url.partition("://")[2].split("/", 1)[0]:
            raise SchemaError("a schema registry URL holds a user and password (`user:password@`): give the URL "
                              "without them, and the user and password as the registry's username and password "
                              "settings (MATOS_SCHEMA_REGISTRY_USERNAME, MATOS_SCHEMA_REGISTRY_PASSWORD)")

    def client(self):
        key = self._key()
        with _LOCK:
            client = _CLIENTS.get(key)
            if client is None:
                from confluent_kafka.schema_registry import SchemaRegistryClient

                conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout, "max.retries": self.retries}
                if self.username is not None:
                    conf["basic.auth.user.info"] = f"{self.username}:{self.password or ''}"
                if self.ca_file:
                    conf["ssl.ca.location"] = self.ca_file
                client = _CLIENTS[key] = SchemaRegistryClient.new_client(conf)
        return client

    def get(self, schema_id: int | None, schema_type: str = AVRO) -> Schema:
        # Protobuf schemas are asked for serialized (a FileDescriptorProto), as confluent-kafka does.
        fmt = "serialized" if schema_type == PROTOBUF else None
        key = (self._key(), schema_id, fmt)
        with _LOCK:
            hit = _SCHEMAS.get(key)
        if hit is not None:
            return hit
        found = self._ask(lambda c: c.get_schema(schema_id, fmt=fmt), schema_id, f"schema {schema_id}")
        schema = Schema(schema_id, found.schema_type or AVRO, found.schema_str,
                        self._references(schema_id, found, fmt, set()))
        with _LOCK:
            _SCHEMAS[key] = schema
        return schema

    def _references(self, schema_id: int | None, found, fmt: str | None, seen: set[str]) -> tuple[Reference, ...]:
        out = []
        for ref in found.references or []:
            if ref.name in seen or (found.schema_type == PROTOBUF and _builtin_proto(ref.name)):
                continue  # well-known .proto files are in every descriptor pool already
            seen.add(ref.name)
            what = f"reference {ref.name} ({ref.subject} version {ref.version}) of schema {schema_id}"
            rs = self._ask(lambda c: c.get_version(ref.subject, ref.version, True, fmt), schema_id, what)
            inner = Schema(rs.schema_id, rs.schema.schema_type or AVRO, rs.schema.schema_str,
                           self._references(schema_id, rs.schema, fmt, seen))
            out.append(Reference(ref.name, ref.subject, ref.version, inner))
        return tuple(out)

    def _ask(self, call, schema_id: int | None, what: str):
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:  # the HTTP client confluent-kafka uses: httpx2 where installed, else httpx
            from confluent_kafka.schema_registry.common._httpx_compat import httpx
        except ImportError:
            import httpx
        HTTPError = httpx.HTTPError
        try:
            return call(self.client())
        except SchemaRegistryError as e:
            # 404 with a 404xx code is the registry saying "not found"; a 404 without one is
            # something else at that URL (a misconfiguration, not a bad record).
            if e.http_status_code == 404 and 40400 <= (e.error_code or 0) < 40500:
                raise UnknownSchema(schema_id, None if what.startswith("schema") else f"{what} not found") from None
            raise RegistryUnavailable(f"schema registry {self.url} refused {what}: {e}") from None
        except (HTTPError, OSError) as e:
            raise RegistryUnavailable(f"schema registry {self.url} could not be reached for {what}: {e}") from None

    def _key(self) -> tuple:
        return (self.url, self.username, self.password, self.ca_file, self.timeout, self.retries)


class ArchivedSource:
    """Schemas archived as JSON objects beside the topic's records (`layout.schema_name`), in the
    registry's shape: {"id", "schemaType", "schema", "references"}.

    A reference there is the registry's {"name", "subject", "version"} plus the "id" of the
    referenced schema, itself archived under that id (see `to_document`). Reads through a
    `Store` (anything with `get_json(name)`): for the driver, it does not pickle.
    """

    framed = True

    def __init__(self, store, prefix: str, topic: str):
        self.store = store
        self.prefix = prefix
        self.topic = topic
        self._cache: dict[int, Schema] = {}

    def get(self, schema_id: int | None, schema_type: str = AVRO) -> Schema:
        if schema_id not in self._cache:
            self._cache[schema_id] = self._read(schema_id, set())
        return self._cache[schema_id]

    def _read(self, schema_id: int, seen: set[int]) -> Schema:
        doc = self.store.get_json(layout.schema_name(self.prefix, self.topic, schema_id))
        if doc is None:
            raise UnknownSchema(schema_id)
        if doc.get("id") != schema_id or not isinstance(doc.get("schema"), str):
            raise SchemaError(f"archived schema {schema_id} is not a schema document of id {schema_id}")
        seen = seen | {schema_id}
        refs = []
        for ref in doc.get("references") or []:
            if not isinstance(ref.get("id"), int) or ref["id"] in seen:
                raise SchemaError(f"archived schema {schema_id}: reference {ref.get('name')} has no usable id")
            try:
                inner = self._read(ref["id"], seen)
            except UnknownSchema:
                raise UnknownSchema(schema_id, f"schema {schema_id}: its reference {ref['name']} "
                                               f"(schema {ref['id']}) is not archived") from None
            refs.append(Reference(ref["name"], ref.get("subject"), ref.get("version"), inner))
        return Schema(schema_id, doc.get("schemaType") or AVRO, doc["schema"], tuple(refs))


def to_document(schema: Schema) -> dict:
    """The archived form of `schema` (what ArchivedSource reads); its references are archived by their ids."""
    return {
        "id": schema.id,
        "schemaType": schema.schema_type,
        "schema": schema.text,
        "references": [{"name": r.name, "subject": r.subject, "version": r.version, "id": r.schema.id}
                       for r in schema.references],
    }


class FileSource:
    """One schema kept as a file, for topics without a registry: values are bare, not framed.

    `.avsc` Avro, `.json` JSON Schema, or a Protobuf descriptor set (`.desc`, `.binpb`, `.pb`,
    `.protoset`: `protoc --include_imports --descriptor_set_out=FILE x.proto`), with `message`
    the full name of the records' message (default: the first message of the set's last file,
    the one protoc was given). The file is read here, so the source pickles with its schema.
    """

    framed = False

    def __init__(self, path: str | Path, message: str | None = None):
        self.path = str(path)
        self.message = message
        self.schema = _file_schema(Path(path), message)

    def get(self, schema_id: int | None = None, schema_type: str = AVRO) -> Schema:
        return self.schema


def _file_schema(path: Path, message: str | None) -> Schema:
    suffix = path.suffix.lower()
    if suffix == ".avsc":
        return Schema(None, AVRO, path.read_text())
    if suffix == ".json":
        return Schema(None, JSON, path.read_text())
    if suffix in DESCRIPTOR_SETS:
        return _descriptor_set_schema(path.read_bytes(), message, path)
    if suffix == ".proto":
        raise SchemaError(f"{path}: .proto text cannot be read in Python; compile it to a descriptor set: "
                          f"protoc --include_imports --descriptor_set_out={path.with_suffix('.desc').name} "
                          f"{path.name}")
    raise SchemaError(f"{path}: not a schema file (.avsc, .json JSON Schema, or a Protobuf descriptor set "
                      f"{', '.join(DESCRIPTOR_SETS)})")


def _descriptor_set_schema(data: bytes, message: str | None, path: Path) -> Schema:
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    files = descriptor_pb2.FileDescriptorSet()
    try:
        files.ParseFromString(data)
    except DecodeError as e:
        raise SchemaError(f"{path}: not a Protobuf descriptor set ({e})") from None
    if not files.file:
        raise SchemaError(f"{path}: an empty descriptor set")
    main = files.file[-1]
    if message is not None:
        owners = [f for f in files.file if _defines(f, message)]
        if not owners:
            raise SchemaError(f"{path}: no message {message}")
        main = owners[0]
    refs = tuple(Reference(f.name, None, None, Schema(None, PROTOBUF, _b64(f)))
                 for f in files.file if f.name != main.name and not _builtin_proto(f.name))
    return Schema(None, PROTOBUF, _b64(main), refs)


def _defines(f, full_name: str) -> bool:
    prefix = f"{f.package}." if f.package else ""
    if not full_name.startswith(prefix):
        return False
    names, path = list(f.message_type), full_name[len(prefix):].split(".")
    for part in path:
        found = [m for m in names if m.name == part]
        if not found:
            return False
        names = list(found[0].nested_type)
    return True


def _b64(file_proto) -> str:
    return base64.standard_b64encode(file_proto.SerializeToString()).decode("ascii")


def _builtin_proto(name: str) -> bool:
    # confluent-kafka's `_is_builtin`: the files its `_init_pool` puts in every descriptor pool.
    return name.startswith(("confluent/", "google/protobuf/", "google/type/"))


def parse_json(text: str, what: str) -> Any:
    """A schema's JSON (Avro, JSON Schema), or SchemaError saying whose."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise SchemaError(f"{what} is not JSON: {e}") from None
