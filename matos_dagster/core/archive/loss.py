"""Acknowledging a data loss: the one documented way to go on after records were deleted
from Kafka (retention, `kafka-delete-records`) before they were archived.

The loss is recorded in the archive itself, as `<range folder>/_loss.json` beside the
manifests (layout.LOSS): partition, offsets, when, the operator's reason and the log start
offset seen. archived.py finds it as an entry like a range, so the contiguous prefix that
`commit.advance` commits passes over it, the monitor shows it as acknowledged (not as an
error), and the verifier, reader and restore know those offsets are gone on purpose.

Only offsets that are really gone may be acknowledged: below the log start offset, and held
by no entry. Nothing else moves the committed offset past offsets that are not archived.

No Dagster imports: the `acknowledge_loss` job (jobs/loss.py) is a thin shell.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from matos_dagster.core.archive.commit import advance
from matos_dagster.core.offsets import spans
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.offsets.spans import Span
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import PartitionArchive
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

JOB = "acknowledge_loss"
OP = "record_loss"  # an op may not share its job's name in one repository
VERSION = 1


class LossRefused(ValueError):
    """The offsets cannot be acknowledged as lost; nothing was written."""


def command(topic: str, partition: int) -> str:
    """The exact command that acknowledges a partition's loss, runnable as printed (this Python by
    its full path; `python -m matos_dagster` runs the `acknowledge_loss` job, which the UI's
    Launchpad runs with the same config)."""
    return (f"{sys.executable} -m matos_dagster acknowledge-loss {topic} --partition {partition} "
            f"--reason '<why the records are gone>'")


@dataclass
class Acknowledged:
    topic: str
    partition: int
    recorded: list[Span]  # spans written as loss records by this call
    committed_before: int | None
    committed_after: int | None
    log_start: int
    notes: list[str] = field(default_factory=list)

    @property
    def lost_offsets(self) -> int:
        return sum(b - a for a, b in self.recorded)


def record(topic: str, partition: int, span: Span, reason: str, log_start: int, committed: int | None,
           when: float) -> dict:
    """The `_loss.json` document of one lost span."""
    return {
        "version": VERSION,
        "kind": "loss",
        "topic": topic,
        "partition": partition,
        "start": span[0],
        "end": span[1],
        "reason": reason,
        "acknowledged_at": datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds"),
        "log_start": log_start,
        "committed": committed,
    }


def acknowledge(
    kafka: Any,
    store: Store,
    prefix: str,
    topic: TopicConfig,
    partition: int,
    reason: str,
    start: int | None = None,
    end: int | None = None,
    now: Callable[[], float] = time.time,
) -> Acknowledged:
    """Record the offsets of `[start, end)` that no entry holds as lost, then commit forward.

    Without a span: every offset from the group's committed offset up to the log start
    offset that no entry holds (the loss that stops the partition). With one: exactly it,
    refused unless it is all below the log start and held by no entry.
    """
    if not reason.strip():
        raise LossRefused("give a reason: it is recorded with the loss for whoever reads the archive later")
    if (start is None) != (end is None):
        raise LossRefused("give both start and end of the lost span, or neither (then: from the committed "
                          "offset to the log start offset)")
    kafka.check_partition(topic.name, partition)
    low, _high = kafka.watermarks(topic.name, [partition])[partition]
    committed = kafka.committed(topic.name, [partition], topic.group)[partition]
    archive = PartitionArchive(store, prefix, topic.name, partition)
    where = f"{topic.name}/{partition}"
    notes: list[str] = []

    if start is None:
        base = committed if committed is not None else low
        held = [e.span for e in archive.overlapping(base, low)] if base < low else []
        lost = spans.uncovered(held, base, low) if base < low else []
        if not lost:
            notes.append(
                f"{where}: nothing to acknowledge: every offset from group {topic.group}'s position {base} up to "
                f"the log start offset {low} is archived or already acknowledged")
    else:
        if not 0 <= start < end:
            raise LossRefused(f"the lost span must have 0 <= start < end, got [{start}, {end})")
        if end > low:
            raise LossRefused(
                f"offsets [{max(start, low)}, {end}) of {where} are still in Kafka (log start offset {low}): "
                "only deleted offsets can be acknowledged as lost; archive those instead")
        held = archive.overlapping(start, end)
        if held:
            e = held[0]
            raise LossRefused(
                f"offsets [{max(start, e.start)}, {min(end, e.end)}) of {where} are already in the archive "
                f"({'an archived range' if e.kind == 'range' else 'an acknowledged loss'} [{e.start}, {e.end})): "
                "acknowledge only offsets no entry holds")
        lost = [(start, end)]

    when = now()
    for span in lost:
        r = OffsetRange(topic.name, partition, *span)
        store.put_json(layout.loss_name(prefix, r), record(topic.name, partition, span, reason, low, committed, when))
        notes.append(f"{where}: recorded offsets [{span[0]}, {span[1]}) as lost: {layout.loss_name(prefix, r)}")
    after = advance(kafka, store, prefix, topic, partition, low)
    return Acknowledged(topic.name, partition, lost, committed, after, low, notes)
