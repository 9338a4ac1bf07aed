"""The verifier's pure judgements: coverage of offsets, manifests as documents, the report.

Coverage is judged with `spans.py`, the arithmetic the archive's commit and the monitor
use too, so the three cannot disagree about what is a hole. No I/O, no Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from matos_dagster.core.archive import loss
from matos_dagster.core.offsets import spans
from matos_dagster.core.swift import layout

GAP, UNCOVERED, OVERLAP = "gap", "uncovered", "overlap"
MANIFEST, MISSING, SIZE, MD5, DECODE, RECORDS, OFFSETS = (
    "manifest", "missing", "size", "md5", "decode", "records", "offsets")
DIFFERS, BEYOND_END, UNCOMPARED, LOSS = "differs", "beyond-end", "uncompared", "loss"
ACKNOWLEDGED = "acknowledged-loss"
KINDS = (GAP, UNCOVERED, OVERLAP, BEYOND_END, MANIFEST, MISSING, SIZE, MD5, DECODE, RECORDS, OFFSETS, DIFFERS,
         UNCOMPARED)
# The job that records a loss in the archive (loss.py): named in every loss message, since it
# is the one way on after records were deleted before being archived.
ACKNOWLEDGE = "the `acknowledge_loss` job"


def acknowledge_command(topic: str, partition: int) -> str:
    """The operator's command for the `acknowledge_loss` job: the one loss.py prints everywhere."""
    return loss.command(topic, partition)


_FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")


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
    audited_from: int | None = None  # where this audit began (None: the partition's first entry)
    first_archived: int | None = None  # first entry seen (the partition's first, in a full audit)
    archived_end: int | None = None  # end of the contiguous run of entries from `first_archived`
    mark: int | None = None  # the audit mark after this audit (None: none kept)
    manifests: int = 0
    objects: int = 0
    records: int = 0
    bytes: int = 0


@dataclass
class Report:
    topic: str
    sample: int | None
    scope: str = "everything"  # what was audited: "everything", "from the audit marks", "from offset N"
    partitions: list[PartitionSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    loss: list[Problem] = field(default_factory=list)  # deleted before archived, not acknowledged
    acknowledged: list[Problem] = field(default_factory=list)  # losses recorded in the archive
    notes: list[str] = field(default_factory=list)
    compared: int = 0  # records compared with Kafka
    duration_s: float = 0.0
    incarnation: int | None = None  # which log of the topic's name (None: the topic has had one only)

    @property
    def ok(self) -> bool:
        # An acknowledged loss is the archive's record of what is gone: not a fault to fix.
        return not self.problems and not self.loss

    @property
    def lost_offsets(self) -> int:
        return sum(p.end - p.start for p in self.loss)

    @property
    def acknowledged_offsets(self) -> int:
        return sum(p.end - p.start for p in self.acknowledged)

    def totals(self) -> dict[str, int]:
        keys = ("manifests", "objects", "records", "bytes")
        return {k: sum(getattr(s, k) for s in self.partitions) for k in keys}

    def counts(self) -> dict[str, int]:
        """Problems by kind (every kind, zeros included), the loss and the acknowledged loss."""
        out = {k: 0 for k in KINDS}
        for p in self.problems:
            out[p.kind] = out.get(p.kind, 0) + 1
        out[LOSS] = len(self.loss)
        out[ACKNOWLEDGED] = len(self.acknowledged)
        return out

    def render(self) -> str:
        t = self.totals()
        mode = {0: "not compared with Kafka", None: "every record compared with Kafka"}.get(
            self.sample, f"{self.sample} records a range compared with Kafka")
        head = "OK" if self.ok else f"{len(self.problems)} PROBLEM(S), {len(self.loss)} LOSS(ES)"
        lines = [
            f"verify {self.topic}{'' if self.incarnation is None else f' incarnation {self.incarnation}'}: {head}",
            f"  audited {self.scope}: {len(self.partitions)} partitions, {t['manifests']} manifests, "
            f"{t['objects']} objects, {t['records']} records, {t['bytes']} bytes checked; {mode} "
            f"({self.compared} compared); {self.duration_s:.1f}s",
            "  partition  log start  log end  committed  audited from  archived  audit mark",
        ]
        for s in self.partitions:
            archived = "-" if s.first_archived is None else f"[{s.first_archived}, {s.archived_end})"
            begun = "first" if s.audited_from is None else str(s.audited_from)
            lines.append(f"  {s.partition:>9}  {_n(s.log_start):>9}  {_n(s.log_end):>7}  {_n(s.committed):>9}  "
                         f"{begun:>12}  {archived} in {s.manifests} ranges  {_n(s.mark)}")
        if self.problems:
            lines.append("problems:")
            lines += [f"  {p}" for p in self.problems]
        if self.loss:
            lines.append(f"DATA LOSS ({self.lost_offsets} offsets), not acknowledged:")
            lines += [f"  {p}" for p in self.loss]
        if self.acknowledged:
            lines.append(f"acknowledged loss ({self.acknowledged_offsets} offsets, recorded in the archive):")
            lines += [f"  {p}" for p in self.acknowledged]
        if self.notes:
            lines.append("notes:")
            lines += [f"  {n}" for n in self.notes]
        return "\n".join(lines)


def _n(v: int | None) -> str:
    return "-" if v is None else str(v)


# -- coverage -------------------------------------------------------------------------------


def check_coverage(
    topic: str,
    group: str,
    partition: int,
    ranges: Iterable[tuple[int, int]],
    low: int,
    high: int,
    committed: int | None,
    acknowledged: Iterable[tuple[int, int]] = (),
    start: int | None = None,
    hint: str = "",
) -> tuple[list[Problem], list[Problem]]:
    """(problems, loss) of one partition's entries against its offsets in Kafka.

    `ranges` are archived ranges, `acknowledged` recorded losses; both are entries, and every
    offset from the first entry (or the committed offset, if lower) up to the committed
    offset, and between entries, must be in exactly one. `start` (None: the first entry)
    is where the audit begins: the caller passes the entries holding offsets from `start`
    on and the last entry below it, and offsets below `start` are not judged. Offsets before
    the first entry are not the archive's business unless committed. Holes below the log
    start offset can no longer be filled: they are loss (not acknowledged), not gaps.
    """
    where = f"{topic}/{partition}"
    problems: list[Problem] = []
    loss: list[Problem] = []
    held = sorted([(a, b, "manifests") for a, b in ranges] + [(a, b, "loss records") for a, b in acknowledged])
    reach: tuple[int, int, str] | None = None  # the entry reaching furthest so far
    for s in held:
        if reach is not None and s[0] < reach[1]:
            what = reach[2] if reach[2] == s[2] else "a manifest and a loss record"
            problems.append(Problem(
                OVERLAP, partition,
                f"{where}: {what} [{reach[0]}, {reach[1]}) and [{s[0]}, {s[1]}) both hold offsets "
                f"[{s[0]}, {min(s[1], reach[1])}): every offset must be in exactly one entry",
                s[0], min(s[1], reach[1])))
        if reach is None or s[1] > reach[1]:
            reach = s
        if s[1] > high:
            problems.append(Problem(
                BEYOND_END, partition,
                f"{where}: the archived range [{s[0]}, {s[1]}) ends past the log end offset {high}"
                + (f": {hint}" if hint else ""), max(s[0], high), s[1]))
    covered = [(a, b) for a, b, _ in held]
    first = covered[0][0] if covered else None
    last_end = max(b for _, b in covered) if covered else None
    starts = [x for x in (first, committed) if x is not None]
    if not starts:
        return problems, loss  # nothing archived, nothing committed: nothing promised yet
    begin = min(starts) if start is None else start
    # Up to the committed offset or the archive's end, whichever is further; and up to the
    # log start offset, since offsets promised but not archived below it are gone.
    top = max(x for x in (committed, last_end, low) if x is not None)
    for a, b in spans.uncovered(covered, begin, top):
        if a < low:
            gone = min(b, low)
            loss.append(Problem(
                LOSS, partition,
                f"{where}: offsets [{a}, {gone}) were deleted from Kafka (log start offset now {low}) before "
                f"they were archived: up to {gone - a} records lost; to go on, record the loss in the archive "
                f"with {ACKNOWLEDGE}: {acknowledge_command(topic, partition)}", a, gone))
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


def sound_end(start: int, entries: Iterable[tuple[int, int]], bad: Iterable[Problem],
              committed: int | None) -> int | None:
    """How far an audit that began at `start` found the partition sound: the new audit mark.

    The contiguous run of entries from `start`, cut at the first offset any problem or loss
    concerns, and at the committed offset (what is not committed yet may still change).
    None when a problem names no offsets (the mark cannot be placed) or nothing is committed.
    """
    if committed is None:
        return None
    end = min(spans.contiguous_end(list(entries), start), committed)
    for p in bad:
        if p.start is None:
            return None
        end = min(end, p.start)
    return end


# -- documents ------------------------------------------------------------------------------


def manifest_issues(doc: Any, topic: str, partition: int, span: tuple[int, int],
                    incarnation: Any = None) -> tuple[list[str], bool]:
    """(what is wrong with a manifest as a document, whether its objects can still be checked).

    `incarnation` (an incarnations.Incarnation): the one whose prefix the manifest lies under; a
    manifest that names another (version 4's `incarnation` and `topic_id`) is another log's range."""
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
    if incarnation is not None and "incarnation" in doc:
        said_id = doc.get("topic_id")
        if doc["incarnation"] != incarnation.number or (
                said_id is not None and incarnation.topic_id is not None and said_id != incarnation.topic_id):
            out.append(f"names incarnation {doc['incarnation']} (topic id {said_id or 'unknown'}), yet lies under "
                       f"{incarnation}'s prefix: another log's range")
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


def loss_issues(doc: Any, topic: str, partition: int, span: tuple[int, int]) -> list[str]:
    """What is wrong with a loss record as a document (it must name its own folder's range)."""
    if not isinstance(doc, dict):
        return ["is not a JSON object"]
    missing = [k for k in ("topic", "partition", "start", "end") if k not in doc]
    if missing:
        return [f"lacks {', '.join(missing)}"]
    said = (doc["topic"], doc["partition"], doc["start"], doc["end"])
    if said != (topic, partition, *span):
        return [f"names {said[0]}/{said[1]}[{said[2]}, {said[3]}), not the range of its folder "
                f"{topic}/{partition}[{span[0]}, {span[1]})"]
    return []


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
