"""The audit mark: how far each partition's archive has been audited and found sound.

    <prefix>/topic=<topic>/_audit/partition=<p>.json
    {"topic": "orders", "partition": 3, "offset": 120000, "audited_at": "2026-11-23T21:00:00Z",
     "sample": 0, "entries": 412}

Every entry below `offset` was checked (manifest, objects, md5, records; and compared with
Kafka when `sample` says so) and found sound and contiguous, up to the committed offset.
The default audit starts there, so its Swift listings do not grow with the history. The
mark is kept in the archive itself, beside the data it vouches for (a `_` folder, which
Hive-style readers skip, and which is no `partition=` folder). No Dagster imports.
"""

from __future__ import annotations

import json
import time

from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store

mark_name = layout.audit_mark_name


def read_mark(store: Store, prefix: str, topic: str, partition: int) -> tuple[int | None, str | None]:
    """(the marked offset or None, a note when a mark exists but cannot be used)."""
    name = mark_name(prefix, topic, partition)
    raw = store.get(name)
    if raw is None:
        return None, None
    try:
        doc = json.loads(raw)
        offset = doc["offset"]
        if doc["topic"] != topic or doc["partition"] != partition or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"it names {doc['topic']}/{doc['partition']} offset {offset!r}")
    except (ValueError, KeyError, TypeError) as e:
        return None, (f"{topic}/{partition}: audit mark {name} is unusable ({e}); audited from the first entry, "
                      "and the mark is written anew")
    return offset, None


def write_mark(store: Store, prefix: str, topic: str, partition: int, offset: int, sample: int | None,
               entries: int) -> None:
    store.put_json(mark_name(prefix, topic, partition), {
        "topic": topic, "partition": partition, "offset": offset,
        "audited_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "sample": -1 if sample is None else sample, "entries": entries,
    })
