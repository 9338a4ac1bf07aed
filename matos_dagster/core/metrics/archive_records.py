"""The exporter's reading of the archive's own records in Swift: the records erased and expired, per partition.

An erasure, once done, writes its record (`<prefix>/_erasure/records/<id>.json`, core/erase/run.py's
`record_of`); an expiry run by age writes one too (`<prefix>/_expiry/records/<id>.json`, with
`records_expired` per partition of each topic: `counted` reads both shapes). These records, not the manifests, are what is read: a listing of
each folder (a few objects: one per erasure or expiry ever done) and a GET of each record not seen
before, kept by name since a record is written once, when its work is done. The manifests' `erased`
lists would say the same only after listing and reading every manifest of every partition, which
the monitor does not do (it reads manifests of typed topics only), and they lose the count of a range
rewritten again. A record of an earlier log of the topic (`<topic>/incarnation=<n>`) counts under the
topic's name: the metrics are per topic partition, whatever the log.

Records are rare (an erasure takes minutes) and Swift is the monitor's to read: the folders are
listed at most once every `every_s`, the counts of the last listing served in between. No Dagster
imports.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Callable, Collection

from matos_dagster.core.metrics.samples import Samples
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store

TP = tuple[str, int]
EVERY_S = 60.0
# (folder under the archive's prefix, the count in each partition's entry, its metric; only where records exist?)
KINDS = (
    ("_erasure/records", "records_erased", "matos_records_erased_total", False),
    ("_expiry/records", "records_expired", "matos_records_expired_total", True),
)


def counted(records: Collection[dict], field: str) -> dict[TP, int]:
    """`field` summed per (topic, partition) over records of an erasure's shape (`record_of`):
    `{"topics": {"<topic>[/incarnation=<n>]": {"<partition>": {field: n, ...}}}}`, or an expiry's, whose
    topic holds its settings beside `"partitions": {"<partition>": {field: n, ...}}`."""
    out: dict[TP, int] = {}
    for record in records:
        for label, parts in (record.get("topics") or {}).items():
            topic = label.split("/incarnation=")[0]
            parts = parts or {}
            if isinstance(parts.get("partitions"), dict):
                parts = parts["partitions"]
            for p, entry in parts.items():
                if str(p).isdigit() and isinstance(entry, dict):
                    tp = (topic, int(p))
                    out[tp] = out.get(tp, 0) + int(entry.get(field) or 0)
    return out


class ArchiveRecords:
    def __init__(self, open_store: Callable[[], AbstractContextManager[Store]], archive: str,
                 partitions: Callable[[], Collection[TP]], every_s: float = EVERY_S):
        """`open_store`: a connection to the archive's container (opened for each reading, closed after:
        nothing is held between two); `partitions`: those of the archive's topics in Kafka now (the
        Kafka side's last reading): the erased records of each start at 0, records of other topics
        are not served."""
        self.open_store, self.archive, self.partitions, self.every_s = open_store, archive, partitions, every_s
        self.records: dict[str, dict] = {}  # record name -> its document
        self.listed: dict[str, list[str]] = {folder: [] for folder, *_ in KINDS}
        self.read_at = float("-inf")

    def read(self) -> Samples:
        if time.monotonic() - self.read_at >= self.every_s:
            with self.open_store() as store:
                listed = {}
                for folder, *_ in KINDS:
                    names = [o["name"] for o in store.list(layout.join(store.params.prefix, folder) + "/")
                             if o.get("name", "").endswith(".json")]
                    for name in names:
                        if name not in self.records:
                            doc = store.get_json(name)
                            if doc is not None:  # else gone since the listing: not kept, so asked again
                                self.records[name] = doc
                    listed[folder] = names
            self.listed, self.read_at = listed, time.monotonic()
        partitions = set(self.partitions())
        topics = {t for t, _ in partitions}
        out = Samples()
        for folder, field, metric, only_where_found in KINDS:
            found = counted([self.records[n] for n in self.listed[folder] if n in self.records], field)
            every = set() if only_where_found else partitions
            for topic, p in every | {tp for tp in found if tp[0] in topics}:
                out.set(metric, (self.archive, topic, p), found.get((topic, p), 0))
        return out
