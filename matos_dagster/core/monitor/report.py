"""The monitor's judgement of one topic: Matos' `monitor`, grown up, with Burrow's rules.

Per topic partition: log start and end offsets, committed offset, archived high-water mark
(AHWM: end of the contiguous prefix of entries, archived ranges and acknowledged losses),
lag in records and seconds, gaps, overlaps, data lost to retention, and acknowledged losses.
Coverage is judged with spans.py, the arithmetic the commit step and the verifier use too.
Status over a window of recent evaluations, as Burrow evaluates a consumer:

- ERROR: a gap or an overlap between entries, committed offsets in no entry, offsets
  deleted before they were archived (and not acknowledged as lost), or a stall (lag, and
  the committed offset has not moved for `stall_s`);
- WARN: lag above the topic's threshold in every evaluation of a full window, and not shrinking;
  or the lag sensor no longer requests the partition's ranges (a range failed again and again:
  `stopped`, which names the command that goes on), whatever else is said of it;
- OK otherwise. An acknowledged loss (loss.py) is shown, but is not an error: an operator
  has recorded it, and the partition goes on past it.

Incremental: each evaluation hands the next one a `Known` per partition, how far the archive
is contiguous and sound; the next lists only from there (`entries_from`), so an evaluation
costs the same at any history. The same `Known` is kept in the archive (monitor/marks.py), so
an instance without the check's earlier evaluations starts from it too, once `start_from` has
checked that it still holds; only the very first evaluation of an archive (no `Known`
anywhere) reads the partition once, whole. Full audits are the verifier's (`verify`).

A typed topic's records that did not decode (core/schemas/typed.py) are counted from the
manifests of the ranges an evaluation lists (`typed_counts`), and the counts below `sound_to`
carried in `Known`, so each manifest is read once, not at every evaluation. They are shown, not
judged: the raw bytes of such a record are archived like any other's.

No Dagster imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from matos_dagster.core.offsets import spans
from matos_dagster.core.offsets.spans import Span
from matos_dagster.core.swift.archived import LOSS, RANGE, Entry, PartitionArchive
from matos_dagster.core.topics import TopicConfig

OK, WARN, ERROR = "OK", "WARN", "ERROR"
_RANK = {OK: 0, WARN: 1, ERROR: 2}
WINDOW = 5  # evaluations, this one included
KEEP_ACKNOWLEDGED = 20  # acknowledged losses carried from one evaluation to the next, latest


@dataclass(frozen=True)
class Sample:
    """One partition at one evaluation; kept in the check's metadata for the next ones."""

    t: float  # seconds since the epoch
    committed: int | None
    lag: int


@dataclass(frozen=True)
class Known:
    """What earlier evaluations established about a partition's archive.

    Every offset of `[first, sound_to)` is in exactly one entry, no gap, no overlap: later
    evaluations take that as given and list from `sound_to` only. `ranges` and `offsets`
    count the archived ranges and their offsets below `sound_to`; `acknowledged` are the
    latest acknowledged losses below it (to keep showing them); `decode` the typed sides'
    records decoded and failed below it, as `(side, decoded, failed)`.
    """

    first: int
    sound_to: int
    ranges: int = 0
    offsets: int = 0
    acknowledged: tuple[Span, ...] = ()
    decode: tuple[tuple[str, int, int], ...] = ()

    def to_json(self) -> list:
        doc = [self.first, self.sound_to, self.ranges, self.offsets, [list(s) for s in self.acknowledged]]
        return doc + [[list(d) for d in self.decode]] if self.decode else doc

    @classmethod
    def from_json(cls, doc) -> "Known | None":
        try:
            first, sound_to, ranges, offsets, acknowledged, *rest = doc
            decode = tuple((str(n), int(d), int(f)) for n, d, f in rest[0]) if rest else ()
            return cls(int(first), int(sound_to), int(ranges), int(offsets),
                       tuple((int(a), int(b)) for a, b in acknowledged), decode)
        except (TypeError, ValueError):
            return None  # written by another version: read the partition whole once


@dataclass
class PartitionReport:
    partition: int
    log_start: int
    log_end: int
    committed: int | None
    ahwm: int | None
    archived_ranges: int
    lag_records: int
    lag_seconds: float
    gaps: list[Span] = field(default_factory=list)
    overlaps: list[Span] = field(default_factory=list)
    lost: list[Span] = field(default_factory=list)
    acknowledged: list[Span] = field(default_factory=list)  # losses an operator acknowledged
    archived_offsets: int = 0
    # A typed topic's sides: records decoded and records that did not, in the ranges archived.
    decoded: dict[str, int] = field(default_factory=dict)
    not_decoded: dict[str, int] = field(default_factory=dict)
    status: str = OK
    reasons: list[str] = field(default_factory=list)
    known: Known | None = None  # for the next evaluation

    def sample(self, now: float) -> Sample:
        return Sample(now, self.committed, self.lag_records)


# Where an evaluation starts (`start_from`'s second value).
FROM_INSTANCE = "instance"  # the check's metadata of its last evaluation
FROM_MARK = "mark"  # the monitor's mark in the archive
WHOLE = "whole"  # no usable Known: the partition read whole
WHOLE_MARK_STALE = "whole: the mark no longer holds"


def start_from(archive: PartitionArchive, known: Known | None, marked: Known | None,
               high: int) -> tuple[Known | None, str]:
    """What this evaluation takes as given: the further of `known` (the check's metadata of its
    last evaluation on this instance) and `marked` (the archive's mark, monitor/marks.py), the
    mark only if `mark_holds`; and which it was. `high`: the partition's log end offset."""
    if known is not None and known.sound_to > high:
        known = None  # the topic was made anew: what was known is of another topic
    if marked is None or (known is not None and marked.sound_to <= known.sound_to):
        return known, FROM_INSTANCE if known is not None else WHOLE
    if marked.sound_to <= high and mark_holds(archive, marked):
        return marked, FROM_MARK
    return (known, FROM_INSTANCE) if known is not None else (None, WHOLE_MARK_STALE)


def mark_holds(archive: PartitionArchive, k: Known) -> bool:
    """Whether a mark still describes this archive, by two to four small listings whatever the
    history: an entry still reaches `sound_to` from inside the known part, and none starts below
    `first`.

    What may change below `sound_to` after the mark was written, and why this is enough:
    compaction puts a containing range over contained ones, same offsets (archived.py keeps
    the effective ones), and deletes the contained folders after its grace period: the entry
    reaching `sound_to` is then the containing one, and every offset stays held once. A loss
    is acknowledged only for offsets no entry holds (loss.py): below `first`, never inside
    the known part; an entry below `first` (such a loss, or ranges archived from an offset
    moved back) makes the mark stale. A topic made anew shows as `sound_to` past its log end
    (`start_from`). Folders deleted by hand, or ranges written over the known part, are what
    the verifier's full audit finds (`matos verify --audit-all`), as for the check's own metadata.
    """
    last = archive.last_before(k.sound_to)
    if last is None or last.start < k.first or last.end < k.sound_to:
        return False
    return k.first == 0 or archive.last_before(k.first) is None


def typed_counts(archive: PartitionArchive, entries: Iterable[Entry]) -> dict[Span, dict[str, tuple[int, int]]]:
    """The decoded and failed records per typed side of these ranges, from their manifests (one GET
    each: call it for a typed topic's listed entries only, which `Known` then carries)."""
    out = {}
    for e in entries:
        doc = archive.read(e) if e.kind == RANGE else None
        if doc and isinstance(doc.get("typed"), dict):
            out[e.span] = {side: (int(t.get("decoded", 0)), int(t.get("failed", 0))) for side, t in doc["typed"].items()}
    return out


def read_entries(archive: PartitionArchive, known: Known | None, high: int) -> list[Entry]:
    """The entries an evaluation must look at: from `known.sound_to` on, or all of them once."""
    if known is None or known.sound_to > high:  # no state, or the topic was made anew
        return list(archive.all())
    return list(archive.entries_from(known.sound_to))


def evaluate_partition(
    topic: TopicConfig,
    partition: int,
    low: int,
    high: int,
    committed: int | None,
    entries: Iterable[Entry],
    oldest_unarchived_ts_ms: int | None,
    history: list[Sample],
    now: float,
    known: Known | None = None,
    counts: Mapping[Span, Mapping[str, tuple[int, int]]] | None = None,
    stopped: str | None = None,
) -> PartitionReport:
    """`entries`: this partition's entries from `known.sound_to` on (all of them without `known`);
    `history`: its samples from earlier evaluations, oldest first; `counts`: a typed topic's
    `typed_counts` of those entries; `stopped`: why the lag sensor no longer requests its ranges."""
    entries = sorted(entries)
    if known is not None and known.sound_to > high:
        known = None
    ranges = [e.span for e in entries if e.kind == RANGE]
    losses = [e.span for e in entries if e.kind == LOSS]
    given = []
    if known is not None:
        # An entry that starts inside the known part and reaches past it contains what it
        # starts on (compaction's containing range, core/compact/): it stands for the known part
        # from its start, rather than overlapping it.
        upto = min([known.sound_to] + [e.start for e in entries if known.first <= e.start < known.sound_to])
        given = [(known.first, upto)] if known.first < upto else []
    every = given + [e.span for e in entries]
    cov = spans.coverage(every)
    position = committed if committed is not None else low
    lag = max(0, high - position)
    lag_s = max(0.0, now - oldest_unarchived_ts_ms / 1000) if lag and oldest_unarchived_ts_ms else 0.0
    r = PartitionReport(partition, low, high, committed, cov.contiguous_end,
                        (known.ranges if known else 0) + len(ranges), lag, lag_s)
    r.archived_offsets = (known.offsets if known else 0) + sum(b - a for a, b in ranges)
    r.acknowledged = spans.merge(list(known.acknowledged if known else ()) + losses)
    counts = counts or {}
    for side, d, f in _decode_sum(known.decode if known else (), [counts.get(s, {}) for s in ranges]):
        r.decoded[side], r.not_decoded[side] = d, f
    r.overlaps = list(cov.overlaps)

    # What the archive promises: from its first entry (or the committed offset, if lower) up
    # to the committed offset, its last entry or the log start, whichever is furthest. Each
    # offset of it that no entry holds is a hole; below the log start a hole is lost for good
    # (reported once, as lost, not as a gap too).
    starts = [x for x in (cov.first, committed) if x is not None]
    last_end = max((b for _, b in every), default=None)
    between, uncommitted = [], []
    if starts:
        top = max(x for x in (committed, last_end, low) if x is not None)
        for hole in spans.uncovered(every, min(starts), top):
            gone = spans.clip(hole, None, low)
            if gone:
                r.lost.append(gone)
            rest = spans.clip(hole, low, None)
            if rest is None:
                continue
            inside = spans.clip(rest, cov.first, last_end) if cov.first is not None else None
            if inside:
                between.append(inside)
            past = spans.clip(rest, last_end if last_end is not None else None, committed)
            if past and committed is not None:
                uncommitted.append(past)
            # Anything else lies below the first entry and above the log start: a committed
            # offset moved back below the archive; those records wait in Kafka to be archived.
    r.gaps = spans.merge(between + uncommitted)
    if between:
        r.reasons.append("gaps between archived ranges: " + _spans(between))
    for a, b in uncommitted:
        r.reasons.append(f"offsets [{a}, {b}) are committed but in no manifest")
    if r.overlaps:
        r.reasons.append("overlapping archived ranges: " + _spans(r.overlaps))
    if r.lost:
        r.reasons.append(
            "records deleted before they were archived: " + _spans(r.lost)
            + f" (acknowledge with the acknowledge_loss job, partition {partition}, to go on)"
        )

    window = history[-(WINDOW - 1):]
    stalled_since = _stalled_since(history, committed, now)
    if lag > 0 and stalled_since is not None and now - stalled_since >= topic.stall_s:
        r.reasons.append(f"stalled: committed offset {committed} has not moved for {now - stalled_since:.0f}s with lag {lag}")

    if r.reasons:
        r.status = ERROR
    elif (lag > topic.lag_warn_records and len(window) == WINDOW - 1
          and all(s.lag > topic.lag_warn_records for s in window) and lag >= window[0].lag):
        # Every evaluation of a full window: one high sample after a quiet spell is not a trend.
        r.status = WARN
        r.reasons.append(f"lag {lag} above {topic.lag_warn_records} for the last {WINDOW} evaluations and not shrinking")
    if stopped:
        # Not an error of the archive, which holds what it holds: the partition waits for an
        # operator, who must be told so before the backlog turns into loss at retention.
        r.reasons.append(f"the lag sensor stopped: {stopped}")
        r.status = max(r.status, WARN, key=_RANK.__getitem__)
    r.known = _known(known, cov, every, entries, counts)
    return r


def _decode_sum(carried: Iterable[tuple[str, int, int]],
                more: Iterable[Mapping[str, tuple[int, int]]]) -> tuple[tuple[str, int, int], ...]:
    total = {side: [d, f] for side, d, f in carried}
    for c in more:
        for side, (d, f) in c.items():
            t = total.setdefault(side, [0, 0])
            t[0], t[1] = t[0] + d, t[1] + f
    return tuple((side, d, f) for side, (d, f) in sorted(total.items()))


def _known(known: Known | None, cov: spans.Coverage, every: list[Span], entries: list[Entry],
           counts: Mapping[Span, Mapping[str, tuple[int, int]]]) -> Known | None:
    """How far the archive is now known contiguous and sound: up to the first hole, or the start
    of the first entry in an overlap (so the next evaluation lists that entry again)."""
    if cov.first is None:
        return None
    in_overlap = [a for a, b in every if any(a < hi and lo < b for lo, hi in cov.overlaps)]
    sound_to = min([cov.contiguous_end] + in_overlap)
    if sound_to <= cov.first:
        return None
    below = [e for e in entries if e.end <= sound_to]
    kept = spans.merge(list(known.acknowledged if known else ()) + [e.span for e in below if e.kind == LOSS])
    return Known(
        first=cov.first,
        sound_to=sound_to,
        ranges=(known.ranges if known else 0) + sum(e.kind == RANGE for e in below),
        offsets=(known.offsets if known else 0) + sum(e.end - e.start for e in below if e.kind == RANGE),
        acknowledged=tuple(kept[-KEEP_ACKNOWLEDGED:]),
        decode=_decode_sum(known.decode if known else (),
                           [counts.get(e.span, {}) for e in below if e.kind == RANGE]),
    )


def overall(reports: list[PartitionReport]) -> str:
    return max((r.status for r in reports), key=_RANK.__getitem__, default=OK)


def _stalled_since(history: list[Sample], committed: int | None, now: float) -> float | None:
    """Earliest time of the run of samples, ending now, in which the committed offset is this one."""
    since = None
    for s in reversed(history):
        if s.committed != committed or s.lag == 0:
            break
        since = s.t
    return since


def _spans(found) -> str:
    return ", ".join(f"[{a}, {b})" for a, b in found)
