"""Verify a topic's archive: every manifest in Swift, every object it lists, and Kafka.

    python -m matos_dagster.verify --topic demo               # manifests, objects, offsets
    python -m matos_dagster.verify --topic demo --sample 20   # and 20 records a range vs Kafka
    python -m matos_dagster.verify --topic demo --full        # and every record vs Kafka

What DESIGN.md promises, checked from the outside, per partition of the topic:

- the archived ranges are contiguous from the first archived offset up to the committed
  offset: no hole between two manifests (`gap`), no committed offset in no manifest
  (`uncovered`), no offset in two manifests (`overlap`);
- every object a manifest lists is in Swift (`missing`) with the manifest's size (`size`)
  and md5 (`md5`, downloaded and hashed), decodes (`decode`) to the manifest's record count
  (`records`), and its offsets lie inside its range and do not overlap another object's
  (`offsets`); the manifest itself names its own range (`manifest`);
- optionally, archived records equal Kafka's, field by field, while Kafka still has them
  (`differs`): a sample of positions per range, or all of them.

Offsets below the log start offset that no manifest holds are gone from Kafka for good:
they are reported apart, as `loss`. Both make the report not `ok`.

No Dagster imports: the `verify` job and this module's command line are thin shells.
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

from confluent_kafka import Consumer, KafkaError, TopicPartition

from matos_dagster import layout, records
from matos_dagster.ranges import contiguous_end
from matos_dagster.store import Store
from matos_dagster.topics import TopicConfig

GAP, UNCOVERED, OVERLAP = "gap", "uncovered", "overlap"
MANIFEST, MISSING, SIZE, MD5, DECODE, RECORDS, OFFSETS = (
    "manifest", "missing", "size", "md5", "decode", "records", "offsets")
DIFFERS, BEYOND_END, LOSS = "differs", "beyond-end", "loss"
KINDS = (GAP, UNCOVERED, OVERLAP, BEYOND_END, MANIFEST, MISSING, SIZE, MD5, DECODE, RECORDS, OFFSETS, DIFFERS)

_ENTRY = re.compile(r"^partition=(\d+)/(\d{20})-(\d{20})/([^/]+)$")
_FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")


class Kafka(Protocol):  # what verifying asks of the Kafka resource
    def client_config(self) -> dict[str, Any]: ...
    def partitions(self, topic: str) -> list[int]: ...
    def watermarks(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]: ...
    def committed(self, topic: str, partitions: list[int], group: str | None = None) -> dict[int, int | None]: ...


@dataclass(frozen=True)
class Problem:
    kind: str
    partition: int
    message: str
    start: int | None = None  # the offsets concerned, [start, end), when there are some
    end: int | None = None
    name: str | None = None  # the manifest or object concerned

    def __str__(self) -> str:
        return f"[{self.kind}] {self.message}"


@dataclass
class PartitionSummary:
    partition: int
    log_start: int | None
    log_end: int | None
    committed: int | None
    first_archived: int | None = None
    archived_end: int | None = None  # end of the contiguous run of ranges from the first
    manifests: int = 0
    objects: int = 0
    records: int = 0
    bytes: int = 0


@dataclass
class Report:
    topic: str
    sample: int | None
    partitions: list[PartitionSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    loss: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: int = 0  # records compared with Kafka
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and not self.loss

    @property
    def lost_offsets(self) -> int:
        return sum(p.end - p.start for p in self.loss)

    def totals(self) -> dict[str, int]:
        keys = ("manifests", "objects", "records", "bytes")
        return {k: sum(getattr(s, k) for s in self.partitions) for k in keys}

    def counts(self) -> dict[str, int]:
        """Problems by kind (every kind, zeros included), and the loss."""
        out = {k: 0 for k in KINDS}
        for p in self.problems:
            out[p.kind] = out.get(p.kind, 0) + 1
        out[LOSS] = len(self.loss)
        return out

    def render(self) -> str:
        t = self.totals()
        mode = {0: "not compared with Kafka", None: "every record compared with Kafka"}.get(
            self.sample, f"{self.sample} records a range compared with Kafka")
        head = "OK" if self.ok else f"{len(self.problems)} PROBLEM(S), {len(self.loss)} LOSS(ES)"
        lines = [
            f"verify {self.topic}: {head}",
            f"  {len(self.partitions)} partitions, {t['manifests']} manifests, {t['objects']} objects, "
            f"{t['records']} records, {t['bytes']} bytes checked; {mode} ({self.compared} compared); "
            f"{self.duration_s:.1f}s",
            "  partition  log start  log end  committed  archived",
        ]
        for s in self.partitions:
            archived = "-" if s.first_archived is None else f"[{s.first_archived}, {s.archived_end})"
            lines.append(f"  {s.partition:>9}  {_n(s.log_start):>9}  {_n(s.log_end):>7}  {_n(s.committed):>9}  "
                         f"{archived} in {s.manifests} ranges")
        if self.problems:
            lines.append("problems:")
            lines += [f"  {p}" for p in self.problems]
        if self.loss:
            lines.append(f"DATA LOSS ({self.lost_offsets} offsets):")
            lines += [f"  {p}" for p in self.loss]
        if self.notes:
            lines.append("notes:")
            lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)


# -- pure parts ---------------------------------------------------------------------------


def uncovered(spans: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """The parts of `[lo, hi)` that no span covers, in order."""
    out, pos = [], lo
    for a, b in sorted(spans):
        if pos >= hi or a >= hi:
            break
        if b <= pos:
            continue
        if a > pos:
            out.append((pos, a))
        pos = max(pos, b)
    if pos < hi:
        out.append((pos, hi))
    return out


def check_coverage(
    topic: str, group: str, partition: int, spans: list[tuple[int, int]], low: int, high: int, committed: int | None
) -> tuple[list[Problem], list[Problem]]:
    """(problems, loss) of one partition's archived ranges against its offsets in Kafka.

    Every offset from the first archived one (or the committed one, if lower) up to the
    committed offset, and between archived ranges, must be in exactly one manifest. Offsets
    before the first archived one are not the archive's business unless committed. Holes
    below the log start offset can no longer be filled: they are loss, not gaps.
    """
    where = f"{topic}/{partition}"
    problems: list[Problem] = []
    loss: list[Problem] = []
    spans = sorted(spans)
    reach: tuple[int, int] | None = None  # the range reaching furthest so far
    for s in spans:
        if reach is not None and s[0] < reach[1]:
            problems.append(Problem(
                OVERLAP, partition,
                f"{where}: manifests [{reach[0]}, {reach[1]}) and [{s[0]}, {s[1]}) both hold offsets "
                f"[{s[0]}, {min(s[1], reach[1])}): every offset must be in exactly one manifest",
                s[0], min(s[1], reach[1])))
        if reach is None or s[1] > reach[1]:
            reach = s
        if s[1] > high:
            problems.append(Problem(
                BEYOND_END, partition,
                f"{where}: the archived range [{s[0]}, {s[1]}) ends past the log end offset {high}: "
                "was the topic deleted and created again?", max(s[0], high), s[1]))
    starts = [x for x in (spans[0][0] if spans else None, committed) if x is not None]
    if not starts:
        return problems, loss  # nothing archived, nothing committed: nothing promised yet
    first = spans[0][0] if spans else None
    last_end = max(b for _, b in spans) if spans else None
    # Up to the committed offset or the archive's end, whichever is further; and up to the
    # log start offset, since offsets promised but not archived below it are gone.
    top = max(x for x in (committed, last_end, low) if x is not None)
    for a, b in uncovered(spans, min(starts), top):
        if a < low:
            gone = min(b, low)
            loss.append(Problem(
                LOSS, partition,
                f"{where}: offsets [{a}, {gone}) were deleted from Kafka (log start offset now {low}) before "
                f"they were archived: up to {gone - a} records lost", a, gone))
            a = gone
            if a >= b:
                continue
        if first is not None and last_end is not None and first <= a and b <= last_end:
            state = (f"below the committed offset {committed}" if committed is not None and b <= committed
                     else "not committed yet")
            problems.append(Problem(
                GAP, partition,
                f"{where}: offsets [{a}, {b}) are in no manifest, between archived ranges ({state})", a, b))
        elif last_end is None or a >= last_end:
            ends = "nothing is archived" if last_end is None else f"the archive ends at {last_end}"
            problems.append(Problem(
                UNCOVERED, partition,
                f"{where}: offsets [{a}, {b}) are committed (group {group} at {committed}) but in no "
                f"manifest: {ends}", a, b))
        # else: before the first archived range, above the log start: a committed offset moved
        # back below the archive; those records are still in Kafka, waiting to be archived.
    return problems, loss


def manifest_issues(doc: Any, topic: str, partition: int, span: tuple[int, int]) -> tuple[list[str], bool]:
    """(what is wrong with a manifest as a document, whether its objects can still be checked)."""
    if not isinstance(doc, dict):
        return ["is not a JSON object"], False
    missing = [k for k in ("topic", "partition", "start", "end", "format", "records", "objects") if k not in doc]
    if missing:
        return [f"lacks {', '.join(missing)}"], False
    out, usable = [], True
    said = (doc["topic"], doc["partition"], doc["start"], doc["end"])
    if said != (topic, partition, *span):
        out.append(f"names {said[0]}/{said[1]}[{said[2]}, {said[3]}), not the range of its folder "
                   f"{topic}/{partition}[{span[0]}, {span[1]})")
    if doc["format"] not in layout.EXTENSIONS:
        out.append(f"has unknown format {doc['format']!r}")
        usable = False
    objs = doc["objects"]
    keys = {"name", "records", "bytes", "md5", "first_offset", "last_offset"}
    if not isinstance(objs, list) or not all(isinstance(o, dict) and keys <= set(o) for o in objs):
        out.append("has an `objects` list whose entries lack name, records, bytes, md5 or offsets")
        usable = False
    elif doc["records"] != sum(o["records"] for o in objs):
        out.append(f"says {doc['records']} records, its objects {sum(o['records'] for o in objs)}")
    return out, usable


def object_issues(objects: list[dict], span: tuple[int, int]) -> list[tuple[str, str]]:
    """(object name, message) for each object whose offsets leave the range or overlap another's."""
    out = []
    start, end = span
    prev: dict | None = None
    for o in sorted(objects, key=lambda o: o["first_offset"]):
        first, last = o["first_offset"], o["last_offset"]
        if not (start <= first <= last < end):
            out.append((o["name"], f"holds offsets [{first}, {last}], outside its range [{start}, {end})"))
        if prev is not None and first <= prev["last_offset"]:
            out.append((o["name"], f"holds offsets [{first}, {last}], overlapping [{prev['first_offset']}, "
                                   f"{prev['last_offset']}] of object {prev['name']}"))
        prev = o
    return out


def sample_positions(lo: int, hi: int, n: int) -> list[int]:
    """`n` offsets spread evenly over `[lo, hi)`, both ends included (all of them if fewer)."""
    if hi <= lo or n <= 0:
        return []
    if n >= hi - lo:
        return list(range(lo, hi))
    if n == 1:
        return [lo]
    return sorted({lo + (i * (hi - 1 - lo)) // (n - 1) for i in range(n)})


def differences(archived: dict, kafka: dict) -> list[str]:
    """The fields in which an archived record differs from Kafka's."""
    return [f for f in _FIELDS if archived.get(f) != kafka.get(f)]


# -- Kafka, read on the driver --------------------------------------------------------------


class Unreadable(RuntimeError):
    """Kafka cannot show these records now (deleted meanwhile, open transaction, no answer)."""


class KafkaRecords:
    """Kafka's committed records of one partition, as archive rows (read_committed)."""

    def __init__(self, conf: dict[str, Any], timeout_s: float = 15.0):
        self.timeout_s = timeout_s
        self.consumer = Consumer({
            **conf,
            "group.id": "matos-verify",  # assign() only, never commits: the group stays empty
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "error",  # records deleted under us must not be skipped silently
            "enable.partition.eof": True,
            # Each sample is a new fetch position: answer it now, not after the default 500 ms
            # the broker waits for more data at the end of a log.
            "fetch.wait.max.ms": 20,
        })

    def close(self) -> None:
        self.consumer.close()

    def rows(self, topic: str, partition: int, start: int, end: int) -> Iterator[dict]:
        """Every readable record of `[start, end)`, in offset order."""
        self.consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self.timeout_s
        while True:
            # poll returns with the first record; consume(timeout=0) then takes what is
            # already fetched (consume alone would wait for all 1000, or the timeout).
            first = self.consumer.poll(1.0)
            msgs = [first, *self.consumer.consume(num_messages=999, timeout=0)] if first is not None else []
            if msgs:
                deadline = time.monotonic() + self.timeout_s
            elif time.monotonic() > deadline:
                raise Unreadable(f"Kafka sent no record of {topic}/{partition} within {self.timeout_s:.0f}s")
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise Unreadable(f"Kafka could not read {topic}/{partition}: {err.str()}")
                    if m.offset() >= end:
                        return
                    if m.offset() < start:
                        continue  # the end of an earlier assignment's fetch
                    # The last stable offset is below `end`: a transaction is still open.
                    raise Unreadable(f"{topic}/{partition}: a transaction open at offset {m.offset()} hides the "
                                     f"records up to {end}")
                if m.offset() < start:
                    continue  # fetched for an earlier assignment
                if m.offset() >= end:
                    return
                yield kafka_row(m)

    def first_at(self, topic: str, partition: int, offset: int, end: int) -> dict | None:
        """Kafka's first readable record at or after `offset`, None if none before `end`."""
        return next(self.rows(topic, partition, offset, end), None)


def kafka_row(m) -> dict:
    ts_type, ts = m.timestamp()
    return {
        "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
        "timestamp": ts if ts_type else None,
        "timestamp_type": records.TIMESTAMP_TYPES.get(ts_type, "NotAvailable"),
        "key": m.key(), "value": m.value(),
        "headers": [{"key": k, "value": v} for k, v in (m.headers() or [])],
    }


def archive_rows(table, lo: int = 0, hi: int | None = None) -> list[dict]:
    """Rows `[lo, hi)` of a decoded object, timestamps as Kafka's epoch milliseconds."""
    rows = table.slice(lo, (hi if hi is not None else table.num_rows) - lo).to_pylist()
    for r in rows:
        ts = r["timestamp"]
        r["timestamp"] = None if ts is None else round(ts.timestamp() * 1000)
    return rows


class _Comparison:
    """Archived records of one range against Kafka's, fed one decoded object at a time.

    Sampling: for each sample position, Kafka's first readable record at or after it must be
    the archive's first record at or after it (so a record missing from either side shows).
    Full: both sides merged by offset.
    """

    def __init__(self, reader: KafkaRecords, topic: str, partition: int, lo: int, end: int, sample: int | None):
        self.reader, self.topic, self.partition, self.lo, self.end = reader, topic, partition, lo, end
        self.full = sample is None
        self.pending = [] if self.full else sample_positions(lo, end, sample)
        self.stream = self._kafka_stream() if self.full else None
        self.next_k: dict | None = None
        self.started = False  # the first Kafka record has been asked for
        self.compared = 0
        self.diffs: list[str] = []
        self.stopped: str | None = None  # why comparing stopped early

    def _kafka_stream(self) -> Iterator[dict]:
        yield from self.reader.rows(self.topic, self.partition, self.lo, self.end)

    def _next_kafka(self) -> dict | None:
        self.started = True
        return next(self.stream, None)

    def feed(self, name: str, table, offsets: list[int]) -> None:
        if self.stopped or not offsets:
            return
        try:
            if self.full:
                self._merge(name, table, offsets)
            else:
                while self.pending and self.pending[0] <= offsets[-1]:
                    p = self.pending.pop(0)
                    i = bisect.bisect_left(offsets, p)
                    a = archive_rows(table, i, i + 1)[0] if offsets[i] < self.end else None
                    self._one(name, a, self.reader.first_at(self.topic, self.partition, p, self.end))
        except Unreadable as e:
            self.stopped = str(e)

    def finish(self) -> None:
        try:
            if self.full:
                if not self.started:
                    self.next_k = self._next_kafka()
                while self.next_k is not None and not self.stopped:
                    self._one(None, None, self.next_k)
                    self.next_k = self._next_kafka()
            else:
                for p in self.pending:
                    self._one(None, None, self.reader.first_at(self.topic, self.partition, p, self.end))
        except Unreadable as e:
            self.stopped = self.stopped or str(e)

    def _merge(self, name: str, table, offsets: list[int]) -> None:
        first = bisect.bisect_left(offsets, self.lo)
        if first >= len(offsets):
            return
        if not self.started:
            self.next_k = self._next_kafka()
        for a in archive_rows(table, first):
            while self.next_k is not None and self.next_k["offset"] < a["offset"]:
                self._one(name, None, self.next_k)
                self.next_k = self._next_kafka()
            if self.next_k is not None and self.next_k["offset"] == a["offset"]:
                self._one(name, a, self.next_k)
                self.next_k = self._next_kafka()
            else:
                self._one(name, a, None)

    def _one(self, name: str | None, a: dict | None, k: dict | None) -> None:
        if a is None and k is None:
            return
        self.compared += 1
        where = f" (object {name})" if name else ""
        if a is None:
            self.diffs.append(f"Kafka's record at offset {k['offset']} is not in the archive{where}")
        elif k is None or k["offset"] != a["offset"]:
            self.diffs.append(f"archived record at offset {a['offset']} is not in Kafka{where}")
        else:
            bad = differences(a, k)
            if bad:
                self.diffs.append(f"record at offset {a['offset']} differs in {', '.join(bad)}{where}")


# -- the verifier -------------------------------------------------------------------------


def verify_topic(
    kafka: Kafka,
    store: Store,
    prefix: str,
    topic_config: TopicConfig,
    sample: int | None = 0,
    say: Callable[[str], None] | None = None,
) -> Report:
    """Check `topic_config`'s archive under `prefix` (everything in front of `topic=`).

    `sample`: 0 compares nothing with Kafka, N compares N records per range, None every
    record (each read from Kafka on this machine: slow for a large archive).
    """
    if sample is not None and sample < 0:
        raise ValueError(f"sample must be >= 0 (or None for every record), got {sample}")
    t0 = time.monotonic()
    topic = topic_config.name
    report = Report(topic, sample)
    # Committed offsets first, listing last: a manifest is written before its range is
    # committed, so every manifest a committed offset relies on is in the listing.
    parts = kafka.partitions(topic)
    committed = kafka.committed(topic, parts, topic_config.group)
    marks = kafka.watermarks(topic, parts)
    listing = _list(store, prefix, topic, report)
    reader = KafkaRecords(kafka.client_config(), float(getattr(kafka, "timeout_s", 15))) if sample != 0 else None
    try:
        for p in sorted(set(parts) | set(listing)):
            dirs = listing.get(p, {})
            spans = sorted(s for s, d in dirs.items() if d["manifest"])
            if p not in marks:
                report.problems.append(Problem(
                    BEYOND_END, p, f"{topic}/{p} is archived but Kafka's topic {topic} has no partition {p}"))
                summary = PartitionSummary(p, None, None, None)
                low = None
            else:
                low, high = marks[p]
                summary = PartitionSummary(p, low, high, committed[p])
                problems, loss = check_coverage(topic, topic_config.group, p, spans, low, high, committed[p])
                report.problems += problems
                report.loss += loss
            report.partitions.append(summary)
            if spans:
                summary.first_archived = spans[0][0]
                summary.archived_end = contiguous_end(spans, spans[0][0])
                c = summary.committed
                if c is not None and summary.first_archived <= c < summary.archived_end:
                    report.notes.append(f"{topic}/{p}: committed offset {c} is behind the archive's end "
                                        f"{summary.archived_end}; the next archive run commits it")
            for span in spans:
                _check_range(report, store, topic, p, span, dirs[span], low, reader, summary)
                if say:
                    say(f"{topic}/{p}[{span[0]}, {span[1]}) checked")
            for span, d in sorted(dirs.items()):
                if not d["manifest"] and d["objects"]:
                    report.notes.append(
                        f"{topic}/{p}[{span[0]}, {span[1]}): {len(d['objects'])} object(s) but no manifest: an "
                        "unfinished attempt, not archived; the range's next run rewrites them")
    finally:
        if reader is not None:
            reader.close()
    report.duration_s = time.monotonic() - t0
    return report


def _list(store: Store, prefix: str, topic: str, report: Report) -> dict[int, dict[tuple[int, int], dict]]:
    """partition -> (start, end) -> {"manifest": name or None, "objects": {names}} from one listing."""
    base = layout.topic_dir(prefix, topic) + "/"
    out: dict[int, dict[tuple[int, int], dict]] = {}
    for item in store.list(base):
        name = item.get("name", "")
        m = _ENTRY.match(name[len(base):])
        if not m:
            report.notes.append(f"{name}: not where the archive writes anything (ignored)")
            continue
        d = out.setdefault(int(m[1]), {}).setdefault((int(m[2]), int(m[3])), {"manifest": None, "objects": set()})
        if m[4] == layout.MANIFEST:
            d["manifest"] = name
        else:
            d["objects"].add(name)
    return out


def _check_range(report: Report, store: Store, topic: str, p: int, span: tuple[int, int], listed: dict,
                 low: int | None, reader: KafkaRecords | None, summary: PartitionSummary) -> None:
    mname = listed["manifest"]
    where = f"{topic}/{p}[{span[0]}, {span[1]})"
    summary.manifests += 1

    def problem(kind: str, message: str, name: str | None = None, lo: int | None = None, hi: int | None = None):
        report.problems.append(Problem(kind, p, message, span[0] if lo is None else lo,
                                       span[1] if hi is None else hi, name or mname))

    raw = store.get(mname)
    if raw is None:
        problem(MANIFEST, f"{where}: manifest {mname} was listed but cannot be read")
        return
    try:
        doc = json.loads(raw)
    except ValueError as e:
        problem(MANIFEST, f"{where}: manifest {mname} is not valid JSON ({e})")
        return
    issues, usable = manifest_issues(doc, topic, p, span)
    for msg in issues:
        problem(MANIFEST, f"{where}: manifest {mname} {msg}")
    if not usable:
        return
    fmt, objs = doc["format"], sorted(doc["objects"], key=lambda o: o["first_offset"])
    for name, msg in object_issues(objs, span):
        problem(OFFSETS, f"{where}: object {name} {msg}", name)
    compare = None
    if reader is not None and low is not None and max(span[0], low) < span[1]:
        compare = _Comparison(reader, topic, p, max(span[0], low), span[1], report.sample)
    spoiled = False
    for o in objs:
        summary.objects += 1
        ok = _check_object(o, fmt, store, where, problem, summary, topic, p, compare if not spoiled else None)
        spoiled = spoiled or not ok
    listed_objects = listed["objects"] - {o["name"] for o in objs}
    if listed_objects:
        report.notes.append(f"{where}: {len(listed_objects)} object(s) not in its manifest (left by an earlier "
                            "attempt; not part of the archive)")
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
        report.notes.append(f"{where}: comparison with Kafka stopped early: {compare.stopped}")


def _check_object(o: dict, fmt: str, store: Store, where: str, problem, summary: PartitionSummary,
                  topic: str, p: int, compare: _Comparison | None) -> bool:
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
        table = records.decode(data, fmt)
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


def _n(v: int | None) -> str:
    return "-" if v is None else str(v)


# -- command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m matos_dagster.verify",
        description="Verify a topic's archive in Swift against its manifests and Kafka, with the MATOS_* "
        "settings. Exit status: 0 all is well, 1 problems or data loss found (printed), 2 usage error.",
    )
    parser.add_argument("--topic", required=True, help="a topic of the topics file (MATOS_TOPICS_FILE)")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--sample", type=int, default=0, metavar="N",
                     help="also compare N records a range with Kafka, while Kafka still has them")
    how.add_argument("--full", action="store_true", help="also compare every record with Kafka")
    args = parser.parse_args(argv)
    if args.sample < 0:
        parser.error(f"--sample must be >= 0, got {args.sample}")
    # The settings reach the resources exactly as they reach Dagster's: through the one
    # Definitions' RESOURCES (EnvVar). Imported here so the checks above stay Dagster-free.
    try:
        from matos_dagster import definitions
    except Exception as e:  # noqa: BLE001 - a broken topics file or setting is a usage error
        print(f"verify: cannot load the settings: {e}", file=sys.stderr)
        return 2
    topics = {t.name: t for t in definitions.TOPICS}
    if args.topic not in topics:
        print(f"verify: topic {args.topic!r} is not in the topics file ({os.environ['MATOS_TOPICS_FILE']}); "
              f"it has {sorted(topics)}", file=sys.stderr)
        return 2
    topic = topics[args.topic]
    try:
        kafka = definitions.RESOURCES["kafka"].process_config_and_initialize()
        swift = definitions.RESOURCES["swift"].process_config_and_initialize()
        params = swift.params()
        with Store(params) as store:
            report = verify_topic(kafka, store, layout.join(params.prefix, topic.prefix), topic,
                                  None if args.full else args.sample)
    except Exception as e:  # noqa: BLE001 - Kafka or Swift unreachable: not verified
        print(f"verify: could not verify {args.topic}: {e}", file=sys.stderr)
        return 1
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
