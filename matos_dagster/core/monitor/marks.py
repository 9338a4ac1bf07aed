"""The monitor's mark: what its evaluations know of each partition's archive, kept in the archive.

    <prefix>/topic=<topic>/_monitor/partition=<p>.json
    {"topic": "orders", "partition": 3, "known": [first, sound_to, ranges, offsets, acknowledged],
     "written_at": "2026-11-24T05:00:00Z"}

The check's own metadata hands `monitor.Known` from one evaluation to the next; this copy in
Swift serves an instance that has none (a new or wiped DAGSTER_HOME, or its old evaluations
removed), so that its first evaluation lists from `sound_to` instead of reading the whole
history. It is a claim, not a proof: `monitor.start_from` checks it cheaply before using it.
Beside the verifier's audit marks (`_audit/`): a `_` folder, skipped by Hive-style readers, and
no `partition=` folder. No Dagster imports.
"""

from __future__ import annotations

import json
import time

from matos_dagster.core.monitor.report import Known
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store

mark_name = layout.monitor_mark_name


def read_mark(store: Store, prefix: str, topic: str, partition: int) -> Known | None:
    """The partition's mark, or None when there is none or it is unusable (then the monitor reads
    the partition whole once, and writes the mark anew)."""
    raw = store.get(mark_name(prefix, topic, partition))
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        if doc["topic"] != topic or doc["partition"] != partition:
            return None  # copied from elsewhere: not about this partition
        known = Known.from_json(doc["known"])
    except (ValueError, KeyError, TypeError):
        return None
    if known is None or not 0 <= known.first < known.sound_to:
        return None
    return known


def write_mark(store: Store, prefix: str, topic: str, partition: int, known: Known) -> None:
    store.put_json(mark_name(prefix, topic, partition), {
        "topic": topic, "partition": partition, "known": known.to_json(),
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    })
