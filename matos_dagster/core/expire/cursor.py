"""Expiry's cursor per partition: what a run must look at, so its cost does not grow with the archive's age.

    <prefix>/_expiry/topic=<topic>/partition=<p>.json
    {"version": 1, "topic": "orders", "partition": 0, "scanned_to": 51200, "stamped_before": <ms>,
     "kept": [[<start>, <end>, <min timestamp or null>], ...]}

`scanned_to`: every entry below it was looked at by an earlier run. `kept`: the ranges below it that
still hold records, each with its oldest record's timestamp. A run looks at the kept ranges whose
oldest record is now due (stamped before the cutoff) and at the entries from `scanned_to` on (archived
since): the ranges in the retention window and what came since, whatever the archive's age. Every
offset below `scanned_to` outside the kept ranges is expired, lost or was never there. No Dagster
imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store

VERSION = 1


@dataclass
class Cursor:
    scanned_to: int = 0
    kept: dict[int, tuple[int, int | None]] = field(default_factory=dict)  # start -> (end, oldest timestamp)
    stamped_before: int | None = None

    def due(self, cutoff_ms: int) -> list[tuple[int, int]]:
        """The kept ranges holding a record stamped before `cutoff_ms` (by their oldest record)."""
        return [(s, e) for s, (e, ts) in sorted(self.kept.items()) if ts is not None and ts < cutoff_ms]

    def forget_within(self, start: int, end: int) -> None:
        for s in [s for s in self.kept if start <= s < end]:
            del self.kept[s]

    @property
    def expired_to(self) -> int:
        """Every record below this offset is expired (or was never archived)."""
        return min(self.kept, default=self.scanned_to)


def read(store: Store, prefix: str, topic: str, partition: int) -> Cursor:
    doc = store.get_json(layout.expiry_cursor_name(prefix, topic, partition))
    if doc is None:
        return Cursor()
    return Cursor(int(doc["scanned_to"]), {int(s): (int(e), ts) for s, e, ts in doc["kept"]}, doc.get("stamped_before"))


def write(store: Store, prefix: str, topic: str, partition: int, c: Cursor) -> None:
    store.put_json(layout.expiry_cursor_name(prefix, topic, partition), {
        "version": VERSION, "topic": topic, "partition": partition, "scanned_to": c.scanned_to,
        "stamped_before": c.stamped_before, "expired_to": c.expired_to,
        "kept": [[s, e, ts] for s, (e, ts) in sorted(c.kept.items())]})
