"""The typed bench's records: nested events of about 1 KiB, as Avro in the Confluent wire format or as JSON.

One event has 20 fields (3 at the top, 17 in four nested records and a list, a map and a
text): ids, a timestamp, an enum, a nullable string, numbers, a boolean, a list and a map, and
texts of words. Producing a million of them through fastavro's writer, a record at a time, would
take minutes; an Avro record is the concatenation of its fields' encodings, so each field's
encoding is made once for pools of values of coprime sizes, and a record is its counter's
fields joined (`Events.avro`): no two records of a run are alike (event_id and created_at
count), and a pool's period is longer than a Parquet page, so the archive's zstd sees text as
compressible as such text is, not a repeat. The JSON values are the same events as JSON text
(`Events.json`), made the same way. `tests/dev/bench/test_bench_typed.py` reads them back with
fastavro and json.
"""

from __future__ import annotations

import json
import random
import struct

import pyarrow as pa

from matos_dagster.core.schemas import wire
from matos_dev.bench.stack import produce_records

# The events' Avro schema: 20 leaf fields, 3 nested records and a list and a map.
SCHEMA = {
    "type": "record", "name": "Event", "namespace": "bench.typed", "fields": [
        {"name": "event_id", "type": "long"},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind",
                                  "symbols": ["VIEW", "CLICK", "ADD_TO_CART", "PURCHASE", "LEAVE"]}},
        {"name": "user", "type": {"type": "record", "name": "User", "fields": [
            {"name": "user_id", "type": "string"}, {"name": "name", "type": "string"},
            {"name": "email", "type": "string"}, {"name": "age", "type": "int"},
            {"name": "premium", "type": "boolean"}]}},
        {"name": "page", "type": {"type": "record", "name": "Page", "fields": [
            {"name": "url", "type": "string"}, {"name": "referrer", "type": ["null", "string"], "default": None},
            {"name": "title", "type": "string"}]}},
        {"name": "device", "type": {"type": "record", "name": "Device", "fields": [
            {"name": "user_agent", "type": "string"}, {"name": "ip", "type": "string"},
            {"name": "os", "type": "string"}]}},
        {"name": "location", "type": {"type": "record", "name": "Location", "fields": [
            {"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}, {"name": "city", "type": "string"}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {"name": "message", "type": "string"},
    ]}
LEAF_FIELDS = 20
# Pool sizes: coprime, so the parts of record i repeat together only after their product.
POOLS = {"user": 4099, "page": 2053, "device": 1021, "location": 509, "tags": 257, "attributes": 127,
         "message_a": 8191, "message_b": 6007}
KINDS = SCHEMA["fields"][2]["type"]["symbols"]
EPOCH_MS = 1_767_225_600_000  # created_at of event 0 (2026-01-01), one more millisecond per event
OSES = ["android 15", "ios 18.2", "windows 11", "macos 15.1", "linux"]
CITIES = ["Paris", "Lyon", "Nantes", "Lille", "Marseille", "Bordeaux", "Toulouse", "Strasbourg", "Rennes", "Nice"]
ATTRIBUTE_KEYS = ("campaign", "channel", "lang")
AVRO_MESSAGE_CHARS = 610  # the two halves of a message: Avro events of about 1 KiB
JSON_MESSAGE_CHARS = 335  # JSON spends its bytes on field names: JSON events of about 1 KiB too


def zigzag(n: int) -> bytes:
    """Avro's long: zigzag, then a varint (as the wire format's message indexes are written)."""
    return wire.zigzag_varint(n)


def _string(s: str) -> bytes:
    b = s.encode()
    return zigzag(len(b)) + b


def _words(rng: random.Random, vocabulary: list[str], chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(vocabulary)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


class Events:
    """The pools of field values (seeded: the same events every run) and a record per counter."""

    def __init__(self, seed: int = 7):
        rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(5000)]
        self.users = [{"user_id": f"u-{rng.getrandbits(48):012x}", "name": f"{rng.choice(vocab).title()} "
                       f"{rng.choice(vocab).title()}", "email": f"{rng.choice(vocab)}.{rng.choice(vocab)}@example.org",
                       "age": rng.randint(16, 90), "premium": rng.random() < 0.2} for _ in range(POOLS["user"])]
        self.pages = [{"url": f"https://shop.example.org/{rng.choice(vocab)}/{rng.choice(vocab)}/"
                       f"{rng.getrandbits(32):08x}?q={rng.choice(vocab)}+{rng.choice(vocab)}",
                       "referrer": None if rng.random() < 0.3 else f"https://{rng.choice(vocab)}.example.com/"
                       f"{rng.choice(vocab)}", "title": _words(rng, vocab, rng.randint(20, 60)).title()}
                      for _ in range(POOLS["page"])]
        self.devices = [{"user_agent": f"Mozilla/5.0 ({rng.choice(OSES)}) AppleWebKit/537.36 (KHTML, like Gecko) "
                         f"Chrome/{rng.randint(100, 140)}.0.{rng.randint(1000, 9999)}.{rng.randint(10, 99)} "
                         f"Safari/537.36", "ip": ".".join(str(rng.randint(1, 254)) for _ in range(4)),
                         "os": rng.choice(OSES)} for _ in range(POOLS["device"])]
        self.locations = [{"lat": round(rng.uniform(42, 51), 6), "lon": round(rng.uniform(-4, 8), 6),
                           "city": rng.choice(CITIES)} for _ in range(POOLS["location"])]
        self.tags = [[rng.choice(vocab) for _ in range(rng.randint(1, 5))] for _ in range(POOLS["tags"])]
        # The same keys in every map: schemaless JSON infers a struct of them, the same for every chunk.
        self.attributes = [{k: rng.choice(vocab) for k in ATTRIBUTE_KEYS} for _ in range(POOLS["attributes"])]
        self.messages = {fmt: ([_words(rng, vocab, chars // 2) for _ in range(POOLS["message_a"])],
                               [_words(rng, vocab, chars - chars // 2 - 1) for _ in range(POOLS["message_b"])])
                         for fmt, chars in (("avro", AVRO_MESSAGE_CHARS), ("json", JSON_MESSAGE_CHARS))}
        self._avro = self._encode_avro()
        self._json = self._encode_json()

    def event(self, i: int, fmt: str = "avro") -> dict:
        """Event i as a dict (created_at in milliseconds), as `avro(i)` and `json(i)` encode it."""
        a, b = self.messages[fmt]
        return {"event_id": i, "created_at": EPOCH_MS + i, "kind": KINDS[i % len(KINDS)],
                "user": self.users[i % POOLS["user"]], "page": self.pages[i % POOLS["page"]],
                "device": self.devices[i % POOLS["device"]], "location": self.locations[i % POOLS["location"]],
                "tags": self.tags[i % POOLS["tags"]], "attributes": self.attributes[i % POOLS["attributes"]],
                "message": f"{a[i % POOLS['message_a']]} {b[i % POOLS['message_b']]}"}

    def _encode_avro(self) -> dict:
        def record(fields: list[tuple[str, str]], d: dict) -> bytes:
            out = b""
            for name, kind in fields:
                v = d[name]
                if kind == "string":
                    out += _string(v)
                elif kind == "int":
                    out += zigzag(v)
                elif kind == "boolean":
                    out += b"\x01" if v else b"\x00"
                elif kind == "double":
                    out += struct.pack("<d", v)
                elif kind == "nullable":
                    out += b"\x00" if v is None else b"\x02" + _string(v)
            return out

        user = [("user_id", "string"), ("name", "string"), ("email", "string"), ("age", "int"), ("premium", "boolean")]
        a, b = self.messages["avro"]
        return {
            "kind": [zigzag(k) for k in range(len(KINDS))],
            "user": [record(user, u) for u in self.users],
            "page": [record([("url", "string"), ("referrer", "nullable"), ("title", "string")], p) for p in self.pages],
            "device": [record([("user_agent", "string"), ("ip", "string"), ("os", "string")], d) for d in self.devices],
            "location": [record([("lat", "double"), ("lon", "double"), ("city", "string")], x) for x in self.locations],
            "tags": [zigzag(len(t)) + b"".join(_string(s) for s in t) + b"\x00" for t in self.tags],
            "attributes": [zigzag(len(m)) + b"".join(_string(k) + _string(v) for k, v in m.items()) + b"\x00"
                           for m in self.attributes],
            "message": ([s.encode() for s in a], [s.encode() for s in b]),
        }

    def avro(self, i: int, schema_id: int) -> bytes:
        """Event i framed: magic byte, schema id, then the Avro binary of its fields in order."""
        e, p = self._avro, POOLS
        a, b = e["message"][0][i % p["message_a"]], e["message"][1][i % p["message_b"]]
        return b"".join((b"\x00", schema_id.to_bytes(4, "big"), zigzag(i), zigzag(EPOCH_MS + i),
                         e["kind"][i % len(KINDS)], e["user"][i % p["user"]], e["page"][i % p["page"]],
                         e["device"][i % p["device"]], e["location"][i % p["location"]], e["tags"][i % p["tags"]],
                         e["attributes"][i % p["attributes"]], zigzag(len(a) + 1 + len(b)), a, b" ", b))

    def _encode_json(self) -> dict:
        def dump(v) -> bytes:
            return json.dumps(v, separators=(",", ":")).encode()

        a, b = self.messages["json"]
        return {"kind": [dump(k) for k in KINDS], "user": [dump(u) for u in self.users],
                "page": [dump(x) for x in self.pages], "device": [dump(x) for x in self.devices],
                "location": [dump(x) for x in self.locations], "tags": [dump(x) for x in self.tags],
                "attributes": [dump(x) for x in self.attributes],
                "message": ([dump(s)[:-1] for s in a], [dump(s)[1:] for s in b])}  # "a + " " + b"

    def json(self, i: int) -> bytes:
        """Event i as compact JSON text (created_at a number of milliseconds), fields in the schema's order."""
        e, p = self._json, POOLS
        return b"".join((b'{"event_id":', str(i).encode(), b',"created_at":', str(EPOCH_MS + i).encode(),
                         b',"kind":', e["kind"][i % len(KINDS)], b',"user":', e["user"][i % p["user"]],
                         b',"page":', e["page"][i % p["page"]], b',"device":', e["device"][i % p["device"]],
                         b',"location":', e["location"][i % p["location"]], b',"tags":', e["tags"][i % p["tags"]],
                         b',"attributes":', e["attributes"][i % p["attributes"]], b',"message":',
                         e["message"][0][i % p["message_a"]], b" ", e["message"][1][i % p["message_b"]], b"}"))


def json_arrow_type(events: Events) -> pa.DataType:
    """The type the archive infers for the JSON events (json.loads, then pa.array): the sink's table has it too."""
    return pa.array([json.loads(events.json(i)) for i in range(64)]).type


def produce(kafka, topic: str, records: int, value_of, partitions: int = 4) -> dict:
    """`records` events (`value_of(i)`) with the throughput workloads' keys and header, round robin."""
    headers = [("source", b"bench")]
    sizes = []

    def events():
        for i in range(records):
            value = value_of(i)
            sizes.append(len(value))
            yield b"k%015d" % i, value, headers, i % partitions

    seconds = produce_records(kafka, topic, events())
    return {"records": records, "seconds": seconds, "value_bytes": sum(sizes) / records}


def register_schema(url: str, subject: str) -> int:
    """The events' schema registered once, as a producer's serializer would: its id."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    return SchemaRegistryClient({"url": url}).register_schema(subject, Schema(json.dumps(SCHEMA), "AVRO"))


def sink_table_schema(events: Events) -> pa.Schema:
    """The sink's table: the events' columns as the archive types them, and the record's place."""
    t = json_arrow_type(events)
    return pa.schema([*t, pa.field("kafka_partition", pa.int32()), pa.field("kafka_offset", pa.int64()),
                      pa.field("kafka_timestamp", pa.timestamp("us", "UTC"))])


def sink_config(base: dict) -> dict:
    """bench/peer.py's sink config with Kafka's JsonConverter (schemaless) instead of bytes, and only
    the InsertField transform (a schemaless value is a map: the record's place goes in as entries)."""
    cfg = {k: v for k, v in base.items() if not k.startswith("transforms.hoist.")}
    cfg.update({"value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable": "false", "transforms": "meta"})
    return cfg
