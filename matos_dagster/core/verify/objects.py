"""Swift's side of the audit: one entry at a time, its manifest (or loss record) and objects.

Every object a manifest lists must be in Swift (`missing`) with the manifest's size (`size`)
and md5 (`md5`, downloaded and hashed), decode (`decode`) to the manifest's record count
(`records`), and hold offsets inside its range that no other object holds (`offsets`); the
manifest itself must be JSON naming its own range (`manifest`). Decoded records are fed to
the comparison with Kafka (kafka.py) when one is asked for: their raw columns only (a typed
topic's typed columns are decoded from them, not Kafka's). No Dagster imports.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable

from matos_dagster.core.records.objects import decode
from matos_dagster.core.records.unify import raw
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import Entry, PartitionArchive
from matos_dagster.core.swift.store import Store
from matos_dagster.core.verify.coverage import (
    ACKNOWLEDGE,
    ACKNOWLEDGED,
    DECODE,
    DIFFERS,
    MANIFEST,
    MD5,
    MISSING,
    OFFSETS,
    RECORDS,
    SIZE,
    UNCOMPARED,
    PartitionSummary,
    Problem,
    Report,
    loss_issues,
    manifest_issues,
    object_issues,
)
from matos_dagster.core.verify.expired import expired_offsets
from matos_dagster.core.verify.kafka import Comparison, KafkaRecords

Say = Callable[..., None]


def check_range(report: Report, archive: PartitionArchive, entry: Entry, low: int | None,
                reader: KafkaRecords | None, summary: PartitionSummary, incarnation=None) -> None:
    """Check an archived range's manifest and objects, and compare its records with Kafka's.
    `incarnation`: the one audited (its manifests must not name another)."""
    store, topic, p, span = archive.store, archive.topic, archive.partition, entry.span
    mname = layout.manifest_name(archive.prefix, archive.range(entry))
    where = f"{topic}/{p}[{span[0]}, {span[1]})"
    summary.manifests += 1

    def problem(kind: str, message: str, name: str | None = None, lo: int | None = None, hi: int | None = None):
        report.problems.append(Problem(kind, p, message, span[0] if lo is None else lo,
                                       span[1] if hi is None else hi, name or mname))

    doc = _json(store, mname, where, "manifest", problem)
    if doc is None:
        return
    issues, usable = manifest_issues(doc, topic, p, span, incarnation)
    for msg in issues:
        problem(MANIFEST, f"{where}: manifest {mname} {msg}")
    if not usable:
        return
    fmt, objs = doc["format"], sorted(doc["objects"], key=lambda o: o["first_offset"])
    for name, msg in object_issues(objs, span):
        problem(OFFSETS, f"{where}: object {name} {msg}", name)
    compare = None
    if reader is not None and low is not None and max(span[0], low) < span[1]:
        lo = max(span[0], low)  # offsets an erasure or expiry removed are not compared
        compare = Comparison(reader, topic, p, lo, span[1], report.sample,
                             set(doc.get("erased") or ()) | expired_offsets(doc, lo, span[1]))
    spoiled = False
    for o in objs:
        summary.objects += 1
        ok = _check_object(o, fmt, store, where, problem, summary, topic, p, compare if not spoiled else None)
        spoiled = spoiled or not ok
    if compare is None:
        return
    if spoiled:
        report.notes.append(f"{where}: not compared with Kafka, since an object of it is damaged")
        return
    compare.finish()
    report.compared += compare.compared
    if compare.diffs:
        problem(DIFFERS, f"{where}: {len(compare.diffs)} of {compare.compared} records compared with Kafka differ; "
                         f"first: {compare.diffs[0]}")
    if compare.stopped:
        # Not compared is not equal: the audit asked for a comparison and could not make it.
        problem(UNCOMPARED, f"{where}: could not be compared with Kafka ({compare.compared} records compared "
                            f"before it stopped): {compare.stopped}; run the audit again when Kafka answers")


def check_loss(report: Report, archive: PartitionArchive, entry: Entry, low: int | None) -> None:
    """Report an acknowledged loss apart from problems, with the operator's reason and time."""
    topic, p, span = archive.topic, archive.partition, entry.span
    name = layout.loss_name(archive.prefix, archive.range(entry))
    where = f"{topic}/{p}[{span[0]}, {span[1]})"

    def problem(kind: str, message: str, *_):
        report.problems.append(Problem(kind, p, message, span[0], span[1], name))

    doc = _json(archive.store, name, where, "loss record", problem)
    if doc is None:
        return
    issues = loss_issues(doc, topic, p, span)
    for msg in issues:
        problem(MANIFEST, f"{where}: loss record {name} {msg}")
    if issues:
        return
    said = ", ".join(f"{k} {doc[k]}" for k in ("reason", "acknowledged_at") if doc.get(k))
    report.acknowledged.append(Problem(
        ACKNOWLEDGED, p, f"{where}: {span[1] - span[0]} offsets deleted from Kafka before they were archived, "
                         f"acknowledged with {ACKNOWLEDGE}{f' ({said})' if said else ''}", span[0], span[1], name))
    if low is not None and low < span[1]:
        report.notes.append(f"{where}: acknowledged as lost, yet Kafka's log starts at {low}: offsets "
                            f"[{max(low, span[0])}, {span[1]}) may still be readable there")


def _json(store: Store, name: str, where: str, what: str, problem: Say) -> dict | None:
    raw = store.get(name)
    if raw is None:
        problem(MANIFEST, f"{where}: {what} {name} was listed but cannot be read")
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        problem(MANIFEST, f"{where}: {what} {name} is not valid JSON ({e})")
        return None


def _check_object(o: dict, fmt: str, store: Store, where: str, problem: Say, summary: PartitionSummary,
                  topic: str, p: int, compare: Comparison | None) -> bool:
    """Check one object against its manifest entry; feed it to the comparison. False if damaged."""
    name = o["name"]
    data = store.get(name)
    if data is None:
        problem(MISSING, f"{where}: object {name} of the manifest is missing from Swift", name,
                o["first_offset"], o["last_offset"] + 1)
        return False
    md5 = hashlib.md5(data).hexdigest()
    if len(data) != o["bytes"]:
        problem(SIZE, f"{where}: object {name} has {len(data)} bytes (md5 {md5}) in Swift; the manifest says "
                      f"{o['bytes']} bytes (md5 {o['md5']})", name, o["first_offset"], o["last_offset"] + 1)
        return False
    if md5 != o["md5"]:
        problem(MD5, f"{where}: object {name} in Swift has md5 {md5}; the manifest says {o['md5']} "
                     f"(same size, {len(data)} bytes)", name, o["first_offset"], o["last_offset"] + 1)
        return False
    summary.bytes += len(data)
    try:
        table = raw(decode(data, fmt))
    except Exception as e:  # noqa: BLE001 - whatever the decoder raises, the object is unreadable
        problem(DECODE, f"{where}: object {name} does not decode as {fmt}: {type(e).__name__}: {e}", name)
        return False
    summary.records += table.num_rows
    offsets = table.column("offset").to_pylist()
    good = True
    if table.num_rows != o["records"]:
        problem(RECORDS, f"{where}: object {name} holds {table.num_rows} records; the manifest says {o['records']}",
                name)
        good = False
    if set(table.column("topic").to_pylist()) - {topic} or set(table.column("partition").to_pylist()) - {p}:
        problem(RECORDS, f"{where}: object {name} holds records of another topic or partition", name)
        good = False
    if offsets:
        # Whether the manifest's offsets fit the range is object_issues' business; here the
        # object must hold what its entry says.
        ordered = all(a < b for a, b in zip(offsets, offsets[1:]))
        if not ordered or (offsets[0], offsets[-1]) != (o["first_offset"], o["last_offset"]):
            problem(OFFSETS, f"{where}: object {name} holds offsets [{offsets[0]}, {offsets[-1]}]"
                             f"{'' if ordered else ' out of order or repeated'}; the manifest says "
                             f"[{o['first_offset']}, {o['last_offset']}]", name)
            good = False
    if good and compare is not None:
        compare.feed(name, table, offsets)
    return good
