"""Whose turn it is to archive in a topic partition: one run at a time, whatever started it.

Dagster's run queue limits runs per partition key, but only for runs that pass through the
queue; `dg launch`, `dagster asset materialize` and `materialize()` run in the caller's
process and never do. So each archive run takes a turn itself, by Lamport's bakery algorithm
over one tag on its own run (its "turn"), which the other runs of its partitions read:

1. it marks itself CHOOSING (with the tags that say which partitions it archives);
2. it reads the turns of the going runs of those partitions and takes the number
   1 + the largest it saw (`number_after`);
3. it writes that number in place of CHOOSING;
4. it waits, partition by partition, until no other going run of the partition is CHOOSING
   or holds a smaller (number, run id) (`in_the_way`).

Why at most one run of a partition is in its turn. Say runs i and k both are, with
(n_i, i) < (n_k, k). k's last read before its turn came (after k wrote n_k) saw i neither
CHOOSING nor numbered below it, so i had not yet marked itself: i's CHOOSING mark came after
that read, hence after k's number was written. i then read its partition's turns (step 2) and
saw n_k, which stays until k ends, so n_i > n_k: a contradiction. The argument needs only that
a read which begins after a write has returned sees it (what SQLite and PostgreSQL give one
row), and no clock: ordering claims by the time they are taken, as this module once did, lets
a run take its time, another claim, read and go, and the first then write an earlier time and
go too, since a claim is not visible at the moment its time is taken (tests/core/runs/test_turns.py
walks every interleaving of two runs' steps). Numbers grow while runs overlap and start again at
1 once none is going. No Dagster imports here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

CHOOSING = "choosing"  # a run's turn while it takes its number (step 1 to 3)


@dataclass(frozen=True, order=True)
class Claim:
    """A run's turn: ordered by number, then run id (a total order)."""

    number: int
    run_id: str
    since: float = field(default=0.0, compare=False)  # when it claimed (seconds since the epoch): said, orders nothing

    @property
    def tag(self) -> str:
        return str(self.number)


@dataclass(frozen=True)
class Seen:
    """Another run's turn as read: CHOOSING, or a number."""

    run_id: str
    number: int | None  # None: choosing

    @property
    def choosing(self) -> bool:
        return self.number is None


def seen(value: str | None, run_id: str) -> Seen | None:
    """A run's turn tag read; None for a run that takes no part (no tag, or one we cannot read)."""
    if value == CHOOSING:
        return Seen(run_id, None)
    try:
        number = int(value or "")
    except ValueError:  # not ours to judge: a turn we cannot read orders nothing
        return None
    return Seen(run_id, number) if number >= 1 else None


def number_after(others: Iterable[Seen | None]) -> int:
    """The number a run takes (step 2): one above every number it saw."""
    return 1 + max((o.number for o in others if o is not None and o.number is not None), default=0)


def in_the_way(mine: Claim, other: Seen | None) -> bool:
    """Whether `mine` waits for `other` (step 4): it is choosing, or its turn comes first."""
    if other is None or other.run_id == mine.run_id:
        return False
    return other.choosing or (other.number, other.run_id) < (mine.number, mine.run_id)


def ahead(mine: Claim, others: Iterable[Seen | None]) -> list[Seen]:
    """The runs to wait for: choosing ones first, then the numbered ones before mine, in order."""
    return sorted((o for o in others if in_the_way(mine, o)),
                  key=lambda o: (not o.choosing, o.number or 0, o.run_id))


def busy_partitions(runs: Iterable[tuple[str, Iterable[str]]]) -> dict[tuple[str, int], str]:
    """Partitions that going runs of another origin archive: `{(topic, partition): why}`.

    `runs`: (run id, partition keys it archives) of the instance's queued, starting and started runs
    that the lag sensor did not request (a run of one range from the UI or the CLI, a backfill's, a
    batch launched by hand). The lag sensor requests nothing in such a partition until that run ends.
    """
    from matos_dagster.core.offsets.ranges import MalformedKey, parse_key

    busy: dict[tuple[str, int], str] = {}
    for run_id, keys in runs:
        for key in keys:
            try:
                r = parse_key(key)
            except MalformedKey:  # not a range: it archives nothing
                continue
            busy.setdefault((r.topic, r.partition), f"run {run_id} is archiving {r}; waiting for it")
    return busy
