"""A key given as its decoded value: the raw bytes it has in Kafka, for a topic whose keys are registry-encoded.

Keys are matched on their raw bytes (keys.py). A producer that serializes its keys through a
Confluent schema registry writes `0, schema id (4 bytes), payload`, so one customer id has as many
raw forms as the key subject has schema versions. Given the decoded value (as JSON), this module
writes each of them, as Confluent's serializers do, for every version of the topic's key subject
`<topic>-key` (their default TopicNameStrategy), deleted versions too (records written with them
are still in the archive):

- Avro: the value's Avro binary encoding with that version's schema (a field the version lacks is
  left out, a field it has with a default and the value lacks takes the default);
- JSON Schema: the value as compact JSON (`{"id":42}`, what Confluent's Java and Python serializers
  write) and with Python's default separators (`{"id": 42}`), its keys in the order given;
- Protobuf: the value (Protobuf's JSON mapping) as the first message of that version's file, its
  fields in field-number order, framed with the message index of that message.

Another subject name strategy, a key of another message of a .proto file, or another JSON spelling:
give the raw bytes (`hex:...`). No Dagster imports; no message here repeats the value.
"""

from __future__ import annotations

import io
import json
from typing import Any

from matos_dagster.core.erase.keys import BadKey
from matos_dagster.core.schemas import wire
from matos_dagster.core.schemas.sources import AVRO, JSON, PROTOBUF, RegistrySource

# A topic's key_format -> the registry's schema type.
FORMATS = {"avro": AVRO, "json_schema": JSON, "protobuf": PROTOBUF}


def subject(topic: str) -> str:
    return f"{topic}-key"


def encodings(value_json: str, topic, registry: RegistrySource | None, where: str = "--key-value") -> list[bytes]:
    """Every raw form of the key whose decoded value is `value_json` in `topic` (a TopicConfig)."""
    kind = FORMATS.get(topic.key_format)
    if kind is None or topic.key_schema_file:
        raise BadKey(f"{where}: topic {topic.name!r} has key_format {topic.key_format}"
                     f"{' with a key_schema_file' if topic.key_schema_file else ''}, not registry-encoded Avro, "
                     "Protobuf or JSON Schema keys: give the key's raw bytes with --key (text, hex:... or base64:...)")
    if registry is None:
        raise BadKey(f"{where}: MATOS_SCHEMA_REGISTRY_URL is not set: the keys' schemas come from the registry")
    try:
        value = json.loads(value_json)
    except ValueError:
        raise BadKey(f"{where}: give the decoded key as JSON (42, \"customer-42\", {{\"id\": 42}})") from None
    client = registry.client()
    try:
        versions = client.get_versions(subject(topic.name), deleted=True)
        ids = sorted({client.get_version(subject(topic.name), v, deleted=True).schema_id for v in versions})
    except Exception as e:  # noqa: BLE001 - the registry's answer, in one line
        raise BadKey(f"{where}: the schema registry has no versions of subject {subject(topic.name)!r} for the keys of "
                     f"{topic.name!r} ({type(e).__name__}); give the key's raw bytes with --key hex:...") from None
    out: list[bytes] = []
    for schema_id in ids:
        schema = registry.get(schema_id, kind)
        encode = {AVRO: _avro, PROTOBUF: _protobuf}.get(schema.schema_type, lambda v, _: _json(v))
        for payload in encode(value, schema):
            framed = wire.frame(schema_id, payload, [0] if schema.schema_type == PROTOBUF else None)
            if framed not in out:
                out.append(framed)
    if not out:
        raise BadKey(f"{where}: the value is not a key of any version of subject {subject(topic.name)!r} "
                     f"({len(ids)} version(s)): check its fields and types")
    return out


def _avro(value: Any, schema) -> list[bytes]:
    import fastavro

    named: dict[str, Any] = {}
    for ref in _references(schema):
        fastavro.parse_schema(json.loads(ref.text), named_schemas=named)
    parsed = fastavro.parse_schema(json.loads(schema.text), named_schemas=named)
    if parsed == "bytes" and isinstance(value, str):  # Confluent writes a bare "bytes" key as it is
        return [value.encode()]
    buf = io.BytesIO()
    try:
        fastavro.schemaless_writer(buf, parsed, value)
    except Exception:  # noqa: BLE001 - not a value of this version: it has no form in it
        return []
    return [buf.getvalue()]


def _protobuf(value: Any, schema) -> list[bytes]:
    from google.protobuf import json_format, message_factory

    from matos_dagster.core.schemas.protobuf import file_of, message_at

    try:
        message = message_factory.GetMessageClass(message_at(file_of(schema), (0,)))()
        json_format.ParseDict(value, message)
    except Exception:  # noqa: BLE001 - not a value of this version: it has no form in it
        return []
    return [message.SerializeToString(deterministic=True)]


def _references(schema) -> list:
    out = []
    for ref in schema.references:
        out += _references(ref.schema) + [ref.schema]
    return out


def _json(value: Any) -> list[bytes]:
    return [json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode(), json.dumps(value).encode()]
