"""Compaction's plan (step 1 of the protocol in run.py): which adjacent ranges of a partition merge.

Pure choices over the effective entries, no Swift and no Spark: `plan` groups them, and
`holders` / `holder` say which compacted range contains a folder (archived.py's rule), which
decides the clean-up. Groups are a function of the entries alone, so two runs can only ever
plan the same groups. No Dagster imports.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable

from matos_dagster.core.swift.archived import RANGE, Entry


@dataclass(frozen=True)
class Member:
    """An effective entry as planning sees it."""

    start: int
    end: int
    kind: str = RANGE
    record_bytes: int = 0
    format: str = "parquet"
    age_s: float = float("inf")  # since its manifest was written
    min_timestamp: int | None = None  # Kafka's, ms, from the manifest
    max_timestamp: int | None = None


@dataclass(frozen=True)
class Group:
    members: tuple[Member, ...]

    @property
    def start(self) -> int:
        return self.members[0].start

    @property
    def end(self) -> int:
        return self.members[-1].end

    @property
    def record_bytes(self) -> int:
        return sum(m.record_bytes for m in self.members)


@dataclass(frozen=True)
class Plan:
    groups: tuple[Group, ...]
    # Where the next walk may start: the start of the first group not compacted now (the
    # trailing one, or the first too young), or the walk's end when everything closed.
    resume: int | None


def plan(members: Iterable[Member], upper: int, compact_bytes: int, min_age_s: float, max_groups: int = 0,
         span_s: float = 0) -> Plan:
    """The groups to compact among `members` (effective entries in offset order, from a group boundary).

    Only entries ending at or below `upper` (the committed offset) are considered. Groups
    are cut greedily when their record bytes reach `compact_bytes`, or before an entry whose
    records would make the group span `span_s` or more of Kafka time (0: no limit; this is
    what merges a quiet topic's day, which never reaches `compact_bytes`); a loss, a hole, a change
    of format, or an entry of `compact_bytes` or more ends the group before it and joins none
    (an already compacted range is such an entry, so it is never merged again). Only complete
    groups of two entries or more are returned, up to the first one with an entry younger than
    `min_age_s`, at most `max_groups` (0: no limit).
    """
    groups: list[Group] = []
    cur: list[Member] = []
    resume: int | None = None
    stopped = False

    def close() -> None:
        nonlocal cur, resume, stopped
        if not stopped and len(cur) >= 2:
            if any(m.age_s < min_age_s for m in cur) or (max_groups and len(groups) >= max_groups):
                stopped, resume = True, cur[0].start
            else:
                groups.append(Group(tuple(cur)))
        cur = []

    for m in members:
        if m.end > upper:
            break
        if cur and (m.start != cur[-1].end or m.format != cur[-1].format):
            close()  # a hole or a change of format: the group ends here
        elif cur and span_s and m.max_timestamp is not None:
            first = min((x.min_timestamp for x in cur if x.min_timestamp is not None), default=None)
            if first is not None and m.max_timestamp - first >= span_s * 1000:
                close()  # m would stretch the group over span_s: the group is complete without it
        if m.kind != RANGE or m.record_bytes >= compact_bytes:
            close()
            continue
        cur.append(m)
        if sum(x.record_bytes for x in cur) >= compact_bytes:
            close()
    if cur and not stopped:
        resume = cur[0].start  # the trailing group waits for more ranges
    return Plan(tuple(groups), resume)


def holders(span: tuple[int, int], raw: list[Entry]) -> list[Entry]:
    """The archived ranges of `raw` that contain `span` and are longer (archived.py's rule). Pure."""
    return [c for c in raw if c.kind == RANGE and c.start <= span[0] and span[1] <= c.end and c.span != span]


def holder(span: tuple[int, int], outer: list[Entry], starts: list[int]) -> Entry | None:
    """The effective entry of `outer` (sorted; `starts` their starts) that contains `span` and is
    longer, or None. Since effective entries never nest, only the last one starting at or before
    `span` can. Grace is then counted from the outermost switch: later, never earlier. Pure."""
    i = bisect.bisect_right(starts, span[0]) - 1
    if i < 0:
        return None
    c = outer[i]
    return c if c.kind == RANGE and span[1] <= c.end and c.span != span else None

