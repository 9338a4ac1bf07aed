"""The verifier on an expired span (core/expire/): offsets whose records expired by age, neither a gap nor lost.

Its `_expired.json` must name its own folder's span; the span counts as covered, and Kafka's records
there (when Kafka still holds them) are not compared. No Dagster imports.
"""

from __future__ import annotations

from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import Entry, PartitionArchive
from matos_dagster.core.verify.coverage import MANIFEST, Problem, Report


def check_expired(report: Report, archive: PartitionArchive, entry: Entry) -> int:
    """The span's marker checked; the offsets it expired (0 when the marker is not one)."""
    topic, p, span = archive.topic, archive.partition, entry.span
    name = layout.expired_name(archive.prefix, archive.range(entry))
    where = f"{topic}/{p}[{span[0]}, {span[1]})"
    doc = archive.store.get_json(name)
    wrong = ("was listed but cannot be read" if doc is None else
             next((f"says {k} {doc.get(k)!r}, its folder {want!r}" for k, want in
                   (("kind", "expired"), ("topic", topic), ("partition", p), ("start", span[0]), ("end", span[1]))
                   if doc.get(k) != want), None))
    if wrong:
        report.problems.append(Problem(MANIFEST, p, f"{where}: expired span {name} {wrong}", span[0], span[1], name))
        return 0
    return span[1] - span[0]


def expired_offsets(doc: dict, lo: int, hi: int) -> set[int]:
    """The offsets of `[lo, hi)` a manifest's `expired` spans name: in Kafka, deliberately not archived."""
    return {o for a, b in doc.get("expired") or () for o in range(max(a, lo), min(b, hi))}
