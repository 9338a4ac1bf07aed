"""The range's manifest: written last, it is what makes a range archived.

    {"version": 1, "topic": "orders", "partition": 3, "start": 1000, "end": 2000,
     "format": "parquet", "records": 998, "bytes": 51234, "record_bytes": 1021952, "largest_record_bytes": 1024,
     "first_offset": 1000, "last_offset": 1999, "min_timestamp": ..., "max_timestamp": ...,
     "objects": [{"name": ".../part-00000000000000001000.parquet", "records": 998,
                  "bytes": 51234, "md5": "...", "first_offset": 1000, "last_offset": 1999,
                  "min_timestamp": ..., "max_timestamp": ..., "largest_record_bytes": 1024}]}

Timestamps are Kafka's, in milliseconds since the epoch. Nothing in it depends on when or
where it was written, so archiving a range again gives the same manifest. No Dagster imports.
"""

from __future__ import annotations

from matos_dagster.ranges import OffsetRange

VERSION = 1
OBJECT_KEYS = ("name", "records", "bytes", "md5", "first_offset", "last_offset", "min_timestamp", "max_timestamp")


class ManifestError(ValueError):
    pass


def build(r: OffsetRange, fmt: str, objects: list[dict]) -> dict:
    objects = sorted(objects, key=lambda o: o["first_offset"])
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
        "objects": [{**{k: o[k] for k in OBJECT_KEYS}, **_largest(o)} for o in objects],
    }


def _largest(o: dict) -> dict:
    return {"largest_record_bytes": o["largest_record_bytes"]} if "largest_record_bytes" in o else {}


def range_of(doc: dict) -> OffsetRange:
    try:
        return OffsetRange(doc["topic"], int(doc["partition"]), int(doc["start"]), int(doc["end"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ManifestError(f"manifest does not name a range: {e}") from None
