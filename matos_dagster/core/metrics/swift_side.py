"""The exporter's reading of Swift: the records erased per partition and each topic's compaction backlog.

Swift is read at most once a minute (`every_s`; and at once for a partition Kafka's side newly
found), what it said kept in between, so a scrape every 15 s costs Swift nothing most of the
time; the backlog is computed by Kafka's side at every scrape, with the committed offsets it has
just read and the cursors of Swift's last read.
A read lists the erasure records (one listing of `_erasure/records/`, few objects) and fetches
only those it has not seen (a record is written once, when its erasure is done: kept by name);
and, per topic, reads its incarnations and each partition's compaction cursor (one small object
per partition). No Dagster imports.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from matos_dagster.core.metrics.samples import Samples
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

TP = tuple[str, int]
EVERY_S = 60.0


def erased_by_partition(records: Sequence[dict]) -> dict[TP, int]:
    """Records erased per (topic, partition) over erasure records, every incarnation of a topic under its name."""
    out: dict[TP, int] = {}
    for record in records:
        for label, parts in (record.get("topics") or {}).items():
            topic = label.split("/incarnation=")[0]
            for p, v in parts.items():
                out[(topic, int(p))] = out.get((topic, int(p)), 0) + int(v.get("records_erased") or 0)
    return out


def backlog(committed: int | None, cursor_from: int | None) -> int:
    """Offsets below the committed one from the compaction cursor (0 before any cursor: from offset 0)."""
    if committed is None:
        return 0
    return max(0, committed - (cursor_from or 0))


class SwiftSide:
    def __init__(self, open: Callable[[], Store], archive: str, topics: Callable[[], Sequence[TopicConfig]],
                 committed: Callable[[], dict[TP, int | None]], every_s: float = EVERY_S):
        """`topics`, `committed`: those the Kafka side found last (the partitions, and their committed
        offsets for `backlogs`, which Kafka's side calls at every scrape: the backlog follows the
        archive between two reads of Swift)."""
        self.open, self._store = open, None
        self.archive, self.topics, self.committed = archive, topics, committed
        self.every_s = every_s
        self.records: dict[str, dict] = {}  # erasure record name -> its document (written once)
        self.erased: dict[TP, int] = {}
        self.cursors: dict[TP, int | None] = {}  # partition -> its compaction cursor's `from`
        self.read_at = float("-inf")

    def read(self) -> Samples:
        committed = self.committed()
        if set(committed) - set(self.cursors) or time.monotonic() - self.read_at >= self.every_s:
            try:
                self._read_swift(committed)
            except Exception:
                self.close()  # a new connection next time
                raise
        out = Samples()
        for (topic, p), c in committed.items():
            out.set("matos_erased_records", (self.archive, topic, p), self.erased.get((topic, p), 0))
        return out

    def backlogs(self, committed: dict[TP, int | None]) -> Samples:
        """Each topic's compaction backlog with the committed offsets Kafka's side has just read (the
        cursors of Swift's last read): only of topics whose every partition's cursor was read."""
        per_topic: dict[str, list[int | None]] = {}
        for (topic, p), c in committed.items():
            per_topic.setdefault(topic, []).append(
                backlog(c, self.cursors[(topic, p)]) if (topic, p) in self.cursors else None)
        out = Samples()
        for topic, ns in per_topic.items():
            if None not in ns:
                out.set("matos_compaction_backlog_offsets", (self.archive, topic), sum(ns))
        return out

    def _read_swift(self, committed: dict[TP, int | None]) -> None:
        if self._store is None:
            self._store = self.open()
        store = self._store
        base = store.params.prefix
        names = [o["name"] for o in store.list(layout.join(layout.erasure_dir(base), "records") + "/")
                 if o.get("name", "").endswith(".json")]
        for name in names:
            if name not in self.records:
                self.records[name] = store.get_json(name) or {}
        cursors: dict[TP, int | None] = dict.fromkeys(committed)
        for t in self.topics():
            mine = layout.join(base, t.prefix)
            prefix = incarnations.current(store, mine, t.name).prefix(mine)
            for topic, p in committed:
                if topic == t.name:
                    cursor = store.get_json(layout.compaction_cursor_name(prefix, topic, p)) or {}
                    cursors[(topic, p)] = cursor.get("from")
        self.erased = erased_by_partition([self.records[n] for n in names])
        self.cursors, self.read_at = cursors, time.monotonic()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
