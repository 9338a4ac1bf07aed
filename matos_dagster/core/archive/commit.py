"""Committing: the group's offset moves to the end of the contiguous archived prefix, never back.

The one place that decides how far a partition counts as archived (ranges and acknowledged
losses alike), used by the archive run, acknowledging a loss and adding pending ranges.
No Dagster imports.
"""

from __future__ import annotations

from typing import Callable, Iterator

from matos_dagster.core.kafka import many
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.offsets import spans
from matos_dagster.core.swift.archived import Entry, PartitionArchive
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig


def advance(kafka: KafkaClient, store: Store, prefix: str, topic: TopicConfig, partition: int, low: int) -> int | None:
    """Commit the group's offset to the end of the contiguous archived prefix, never backwards.

    The prefix is read from Swift from the committed offset on (`entries_from`), and only up
    to its first hole: the history below the committed offset is never listed. Acknowledged
    losses (loss.py) are entries too, so the prefix passes over them; nothing else can move
    the offset past offsets that are not archived.

    Kafka's commit is not compare-and-set: two runs finishing together could each commit the
    end they computed, the smaller last. So after committing we read the offset back and
    commit again if it is behind what Swift now shows; the archived prefix only grows.
    """
    archive = PartitionArchive(store, prefix, topic.name, partition)
    for _ in range(5):
        committed = kafka.committed(topic.name, [partition], topic.group)[partition]
        # A group that never committed starts at the log start offset: offsets below it
        # are gone and can never be archived by anyone.
        base = committed if committed is not None else low
        target = prefix_end(archive, base)
        if committed is not None and target <= committed:
            return committed
        if committed is None and target <= base:
            return None
        kafka.commit(topic.name, {partition: target}, topic.group)
    return kafka.committed(topic.name, [partition], topic.group)[partition]


def advance_many(kafka: KafkaClient, store: Store, parts: list[tuple[str, TopicConfig, int, int]],
                 each: Callable | None = None,
                 known: dict[tuple[str, int], tuple[int, int]] | None = None) -> dict[tuple[str, int], int | None]:
    """`advance` for many partitions (`(prefix, topic, partition, log start)` each) at once: per
    group one read of the committed offsets, one commit of every partition that moves and one
    read-back, instead of three requests a partition. Each partition's prefix is read from Swift
    as `advance` reads it; the same re-commit if a read-back is behind. The committed offsets after.

    `each(fn, items)`: `[fn(item, store) for item in items]`, or the same from a pool of threads
    with a Store each (batch.py); by default in this thread, with `store`. `known`: per partition,
    `(base, end)`: the prefix from `base` ends at `end`, as the caller read it within the partition's
    turn (batch.py); Swift is not read for a partition whose committed offset is still `base`."""
    each = each or (lambda fn, items: [fn(item, store) for item in items])
    out: dict[tuple[str, int], int | None] = {}
    for group in sorted({t.group for _, t, _, _ in parts}):
        mine = [(prefix, t, p, low) for prefix, t, p, low in parts if t.group == group]
        tps = [(t.name, p) for _, t, p, _ in mine]
        ends: dict[tuple[str, int], int] = {}
        for _ in range(5):
            committed = many.committed(kafka, group, tps)
            bases = {(t.name, p): committed[(t.name, p)] if committed[(t.name, p)] is not None else low
                     for _, t, p, low in mine}
            for tp, (base, end) in (known or {}).items():
                if tp not in ends and bases.get(tp) == base:
                    ends[tp] = end
            # Swift is read once a partition, unless someone moved its offset past what was read.
            stale = [(prefix, t, p) for prefix, t, p, _ in mine if ends.get((t.name, p), -1) < bases[(t.name, p)]]
            found = each(lambda x, s: prefix_end(PartitionArchive(s, x[0], x[1].name, x[2]), bases[(x[1].name, x[2])]),
                         stale)
            ends.update({(t.name, p): end for (_, t, p), end in zip(stale, found)})
            moves = {tp: ends[tp] for tp in tps if ends[tp] > bases[tp]}
            if not moves:
                break
            many.commit(kafka, group, moves)
        else:
            committed = many.committed(kafka, group, tps)
        out.update(committed)
    return out


def prefix_end(archive: PartitionArchive, base: int) -> int:
    """End of the contiguous run of entries (ranges and acknowledged losses) from `base`."""
    return spans.contiguous_end((e.span for e in up_to_first_hole(archive.entries_from(base), base)), base)


def unarchived(archive: PartitionArchive, start: int, end: int) -> list[tuple[int, int]]:
    """The parts of `[start, end)` that no entry (range or acknowledged loss) holds, in order."""
    return spans.uncovered([e.span for e in archive.overlapping(start, end)], start, end)


def up_to_first_hole(entries: Iterator[Entry], base: int) -> Iterator[Entry]:
    """The entries in offset order until the first offset at or above `base` that none holds.

    Stops pulling there, so a lazy listing (`entries_from`) lists no further than the hole.
    """
    pos = base
    for e in entries:
        if e.start > pos:
            return
        pos = max(pos, e.end)
        yield e


def restart(kafka: KafkaClient, group: str, committed: dict[tuple[str, int], int | None],
            lows: dict[tuple[str, int], int]) -> dict[tuple[str, int], int | None]:
    """A new incarnation's partitions (a topic deleted and created again): a committed offset the group
    kept from the earlier log counts offsets of that log, so it is set back to the new log's start
    (one commit for all), the one time the offset moves back: nothing of the new log is archived
    yet, and starting from the old offset would skip the new log's records below it. None (Kafka
    dropped the earlier log's offsets with the topic) stays None. The committed offsets after."""
    stale = {tp: lows[tp] for tp, c in committed.items() if c is not None and c != lows[tp]}
    many.commit(kafka, group, stale)
    return {tp: lows[tp] if tp in stale else c for tp, c in committed.items()}
