"""A topic's compaction backlog, from what the monitor and the compact runs already recorded: no Swift.

Per partition: the offsets from where its ranges not merged yet begin (`unmerged_from`, which each
compact run records for the partitions it walked: jobs/compact.py) up to its committed offset; summed
over the topic. A partition no compact run was seen walking counts from its first archived offset
(the monitor's `Known.first`): nothing of it is merged. The committed offsets and `Known` are the
monitor's latest verdict's (`archive_state`), which the exporter reads anyway; the verdict is made
again at the monitor's next tick after a committed offset moves.

When compaction runs, the backlog stays below what a merged range gathers (`compact_bytes`, or
`compact_span_s` of a quiet topic, plus `compact_min_age_s`); when it stops, the backlog grows with
the archive. No Dagster imports.
"""

from __future__ import annotations

from typing import Mapping

from matos_dagster.core.monitor.report import Known


def backlog(state: Mapping, unmerged: Mapping[int, int]) -> int | None:
    """Offsets archived and committed not merged yet, over the partitions of a verdict's `state`
    (its `archive_state`); `unmerged`: per partition, `unmerged_from` of the latest compact run that
    walked it. None: the verdict says nothing of the offsets (the topic is not in Kafka)."""
    offsets = state.get("offsets")
    if not offsets or state.get("missing"):
        return None
    known = state.get("partitions") or {}
    total = 0
    for p, (_low, _high, committed) in offsets.items():
        if committed is None:
            continue
        start = unmerged.get(int(p))
        if start is None:
            k = Known.from_json(known.get(p)) if p in known else None
            start = committed if k is None else k.first  # nothing known archived: nothing to merge
        total += max(0, int(committed) - int(start))
    return total
