"""A run archives the pending ranges below its own first: the archive's order is the offset order.

Dagster starts a backfill's runs in no promised order, and the run queue starts two at once,
so the run of a later range of a topic partition can take its turn (turns.py) before the run
of an earlier one. When a run has its turn, it therefore first archives, in offset order, the
ranges of its topic partition that are registered as partition keys, not archived yet, and lie
between the committed offset and its own range, contiguous from the committed offset (each
by `archive_range`, with its own manifest and commit); then its own. Those ranges' own runs,
when the queue starts them, find them archived and committed, and only verify them (their
materialisation's metadata is read from the manifest).

No run waits for a run the queue has not started (no deadlock with the queue's limits): a
run only archives what lies below it, in the turn it holds. A lower range that is refused
(an overlap, an acknowledged loss, records deleted from Kafka) stops the walk there: that
range's own run fails with its own message, and this run goes on with its own range (the
committed offset stays below the refused range either way). No Dagster imports: the asset
is the thin shell (assets/archive.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from matos_dagster.core.offsets.ranges import PARTITION_WIDTH, MalformedKey, OffsetRange, parse_key
from matos_dagster.core.offsets.spans import Span
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive


def ranges_first(target: OffsetRange, registered: Iterable[OffsetRange], base: int,
                 archived: Iterable[Span]) -> list[OffsetRange]:
    """The registered ranges to archive before `target`, in offset order.

    `base`: the committed offset (the log start if the group never committed); `archived`:
    the spans of the partition's archive entries (ranges and acknowledged losses) from `base`.
    Walks from `base` towards `target.start`: over what is archived, and over the one
    registered range that starts exactly where the walk is, ends at or before `target.start`
    and overlaps nothing archived. It stops at a hole no registered range fills (not the
    backfill's to guess), at two registered ranges starting at one offset (only one can be
    archived: the runs decide), and at a range that would overlap an archived one (its own
    run is refused). Ranges of other topics or partitions do not count.
    """
    mine = [r for r in registered if (r.topic, r.partition) == (target.topic, target.partition)]
    done = sorted(s for s in archived if s[0] < s[1])
    starting: dict[int, set[OffsetRange]] = {}
    for r in mine:
        if r.end <= target.start:
            starting.setdefault(r.start, set()).add(r)
    out: list[OffsetRange] = []
    pos = base
    while pos < target.start:
        reach = max((b for a, b in done if a <= pos < b), default=None)
        if reach is not None:  # archived already (or a loss acknowledged): the walk goes over it
            pos = reach
            continue
        here = starting.get(pos, set())
        if len(here) != 1:
            break
        (r,) = here
        if any(a < r.end and r.start < b for a, b in done):
            break
        out.append(r)
        pos = r.end
    return out


def registered_below(keys: Iterable[str], target: OffsetRange) -> list[OffsetRange]:
    """The partition keys of `target`'s topic partition that end at or before it starts.

    Keys of other partitions and topics are skipped by their prefix, before any parsing: the
    keys of a long history are many.
    """
    prefix = f"{target.topic}:p{target.partition:0{PARTITION_WIDTH}d}:"
    out = []
    for key in keys:
        if not key.startswith(prefix):
            continue
        try:
            r = parse_key(key)
        except MalformedKey:  # not a range: no run archives it, so nothing waits on it
            continue
        if (r.topic, r.partition) == (target.topic, target.partition) and r.end <= target.start:
            out.append(r)
    return out


def plan(target: OffsetRange, topic, kafka, store, keys: Callable[[], Iterable[str]],
         committed: int | None, prefix: str | None = None) -> list[OffsetRange]:
    """ranges_first for `target`, from the registered `keys`, the group's `committed` offset and Swift.

    `committed`: as the run read it after checking the partition (archive.check), before this;
    the same value then goes to the run's first archive_range, so Kafka is not asked twice.
    Reads no more than it needs: nothing more when the committed offset is at or past
    `target.start` (the sensor's runs, in order: the usual case, so the instance's keys, called
    `keys()` lazily, are not fetched on that path), else the keys, and only when one lies below,
    the archive's entries from the committed offset up to `target.start` (a bounded listing).
    """
    base = committed
    if base is None:  # a group that never committed starts at the log start
        base = kafka.watermarks(target.topic, [target.partition])[target.partition][0]
    if base >= target.start:
        return []
    below = registered_below(keys(), target)
    if not below:
        return []
    # `prefix`: of the topic's incarnation the run archives (core/swift/incarnations.py); None: the first's.
    prefix = prefix or layout.join(store.params.prefix, topic.prefix)
    archive = PartitionArchive(store, prefix, target.topic, target.partition)
    spans = []
    for e in archive.entries_from(base):
        if e.start >= target.start:
            break
        spans.append(e.span)
    return ranges_first(target, below, base, spans)


@dataclass
class First:
    """What a run archived before its own range, and where (and why) it stopped short."""

    archived: list = field(default_factory=list)  # archive.Archived of each range, in offset order
    stopped_at: OffsetRange | None = None
    reason: str | None = None


def archive_first(target: OffsetRange, first: list[OffsetRange], archive: Callable[[OffsetRange], object],
                  refused: tuple[type[BaseException], ...], say: Callable[[str], None],
                  warn: Callable[[str], None] | None = None) -> First:
    """Archive `first` (ranges_first's answer) in order by `archive`, before `target`.

    An error of a kind in `refused` (RangeRefused, DataLoss) stops the walk there and is said:
    that range's own run fails with it, and `target` goes on (the committed offset stays below
    the refused range anyway). Any other error (Swift or Kafka unreachable, a Spark failure)
    fails this run too, naming the range it was archiving: a retry starts the walk again.
    """
    out = First()
    for r in first:
        say(f"{r}: registered, not archived yet, and before {target} in offset order: archiving it first")
        try:
            out.archived.append(archive(r))
        except refused as e:
            out.stopped_at, out.reason = r, str(e)
            (warn or say)(f"{r} could not be archived before {target} ({e}); its own run will say so. "
                f"Archiving {target} now: the committed offset stays below {r.start} until {r} is archived")
            break
        except Exception as e:
            raise LowerRangeFailed(
                f"archiving {r}, which comes before {target} in offset order, failed: {e}") from e
    return out


class LowerRangeFailed(RuntimeError):
    """A range below the run's own failed to archive for a reason a retry may cure."""
