"""Typed objects built by hand, for the readers' tests: no registry, nothing of the archive's typing code.

A typed object is SCHEMA's columns, then `value_schema_id`, `value_data` and `value_error`
(core/schemas/typed.py). Two versions of the value's type: V2 adds a top-level field (`note`)
and a nested one (`customer.email`) to V1. Each record's data is a function of its offset, so a
test knows what every row must hold; a null value has null data, and every fifth offset "did
not decode" (null data, an error), as a bad record would.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import decode, encode
from matos_dagster.core.records.schema import HEADERS, SCHEMA
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.archived import PartitionArchive

CUSTOMER_V1 = pa.struct([pa.field("id", pa.int64()), pa.field("name", pa.string())])
CUSTOMER_V2 = pa.struct([pa.field("id", pa.int64()), pa.field("name", pa.string()), pa.field("email", pa.string())])
VALUE = {
    1: pa.struct([pa.field("customer", CUSTOMER_V1), pa.field("amount", pa.float64())]),
    2: pa.struct([pa.field("customer", CUSTOMER_V2), pa.field("amount", pa.float64()), pa.field("note", pa.string())]),
}
ERROR = "no magic byte"
T0 = 1_767_225_600_000  # 2026-01-01, ms


def typed_schema(version: int) -> pa.Schema:
    return pa.schema([*SCHEMA, pa.field("value_schema_id", pa.int32()),
                      pa.field("value_data", VALUE[version],
                               metadata={"format": "avro", "reader_schema_id": str(version)}),
                      pa.field("value_error", pa.string())])


def bad(offset: int) -> bool:
    return offset % 5 == 4


def data(offset: int, version: int) -> dict:
    """What record `offset` decodes to with schema `version`."""
    out = {"customer": {"id": offset, "name": f"c{offset}"}, "amount": offset * 1.5}
    if version == 2:
        out["customer"]["email"] = f"c{offset}@example.com"
        out["note"] = f"n{offset}"
    return out


def expected(offset: int, version: int, value: bytes | None, unified: int = 2) -> dict:
    """The typed columns of record `offset`, as read in version `unified` (V1's rows: V2's fields null)."""
    if value is None:
        return {"value_schema_id": None, "value_data": None, "value_error": None}
    if bad(offset):
        return {"value_schema_id": None, "value_data": None, "value_error": ERROR}
    d = data(offset, version)
    if unified == 2 and version == 1:
        d = {**d, "customer": {**d["customer"], "email": None}, "note": None}
    return {"value_schema_id": version, "value_data": d, "value_error": None}


def typed(raw: pa.Table, version: int) -> pa.Table:
    """The raw rows (SCHEMA) with the typed columns of `version` after them."""
    offsets, values = raw["offset"].to_pylist(), raw["value"].to_pylist()
    cols = [expected(o, version, v, unified=version) for o, v in zip(offsets, values)]
    schema = typed_schema(version)
    return pa.Table.from_arrays(
        [*raw.select(SCHEMA.names).columns, pa.array([c["value_schema_id"] for c in cols], pa.int32()),
         pa.array([c["value_data"] for c in cols], VALUE[version]),
         pa.array([c["value_error"] for c in cols], pa.string())],
        schema=schema)


def raw_rows(topic: str, partition: int, lo: int, hi: int, stamp=None) -> pa.Table:
    """Records [lo, hi) made up: every offset one, a null value every seventh, headers on odd ones;
    offset o stamped `stamp(o)` (ms), by default a second after the one before it from T0."""
    n = hi - lo
    stamp = stamp or (lambda o: T0 + o * 1000)
    return pa.table({
        "topic": [topic] * n, "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(range(lo, hi), pa.int64()),
        "timestamp": pa.array([stamp(o) for o in range(lo, hi)], pa.timestamp("ms", tz="UTC")),
        "timestamp_type": ["CreateTime"] * n,
        "key": pa.array([f"k{o}".encode() for o in range(lo, hi)], pa.binary()),
        "value": pa.array([None if o % 7 == 3 else f"v{o}".encode() for o in range(lo, hi)], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"\x00\xff"}] if o % 2 else [] for o in range(lo, hi)], HEADERS),
    }, schema=SCHEMA)


def object_entry(name: str, data_: bytes, table: pa.Table) -> dict:
    """The manifest entry of an object holding `table`; `typed` counts when it has typed columns."""
    stamps = [s for s in table["timestamp"].cast(pa.int64()).to_pylist() if s is not None]
    sizes = [len(k or b"") + len(v or b"") + sum(len(h["key"].encode()) + len(h["value"] or b"") for h in hs)
             for k, v, hs in zip(*(table[c].to_pylist() for c in ("key", "value", "headers")))]
    out = {"name": name, "records": table.num_rows, "bytes": len(data_), "md5": hashlib.md5(data_).hexdigest(),
           "first_offset": table["offset"][0].as_py(), "last_offset": table["offset"][-1].as_py(),
           "min_timestamp": min(stamps, default=None), "max_timestamp": max(stamps, default=None),
           "record_bytes": sum(sizes), "largest_record_bytes": max(sizes)}
    if "value_data" in table.column_names:
        version = int(table.schema.field("value_data").metadata[b"reader_schema_id"])
        nulls, failed = table["value"].null_count, table.num_rows - table["value_error"].null_count
        out["typed"] = {"value": {"format": "avro", "reader_schema_id": version, "schema_ids": [version],
                                  "decoded": table.num_rows - nulls - failed, "failed": failed, "nulls": nulls}}
    return out


def put_range(store, prefix: str, topic: str, partition: int, lo: int, hi: int, version: int,
              per_object: int = 10, stamp=None) -> dict:
    """Range [lo, hi) of made-up records (stamped as raw_rows says), typed as `version` (0: untyped),
    `per_object` records an object."""
    r = OffsetRange(topic, partition, lo, hi)
    d = layout.range_dir(prefix, r)
    objects = []
    for first in range(lo, hi, per_object):
        table = raw_rows(topic, partition, first, min(first + per_object, hi), stamp)
        objects.append(_put(store, d, table, version))
    doc = manifest.build(r, "parquet", objects, {"value": "avro"} if version else None)
    store.put_json(layout.manifest_name(prefix, r), doc)
    return doc


def retype(store, prefix: str, topic: str, partition: int, versions: dict[int, int]) -> None:
    """Rewrite the archived ranges starting at the keys of `versions` as typed objects of their version."""
    archive = PartitionArchive(store, prefix, topic, partition)
    for e in archive.all():
        if e.start not in versions:
            continue
        doc = archive.read(e)
        r = OffsetRange(topic, partition, e.start, e.end)
        objects = [_put(store, layout.range_dir(prefix, r), decode(store.get(o["name"]), doc["format"]),
                        versions[e.start]) for o in doc["objects"]]
        store.put_json(layout.manifest_name(prefix, r), manifest.build(r, "parquet", objects, {"value": "avro"}))


def _put(store, directory: str, table: pa.Table, version: int) -> dict:
    if version:
        table = typed(table, version)
        data_ = encode(table, "parquet", table.schema)
    else:
        data_ = encode(table, "parquet")
    name = layout.object_name(directory, table["offset"][0].as_py(), "parquet")
    store.put(name, data_)
    return object_entry(name, data_, table)


def reading(topic: str, v2: bool = False) -> str:
    """A test's own Avro schema (ids are global in the session's stand-in); v2 adds a field with a default."""
    fields = [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}]
    if v2:
        fields.append({"name": "unit", "type": "string", "default": "C"})
    return json.dumps({"type": "record", "name": "Reading", "namespace": f"t.{topic.replace('-', '_')}",
                       "fields": fields})
