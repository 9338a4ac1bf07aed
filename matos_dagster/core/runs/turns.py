"""Whose turn it is to archive in a topic partition: one run at a time, whatever started it.

Dagster's run queue limits runs per partition key, but only for runs that pass through the
queue; `dg launch`, `dagster asset materialize` and `materialize()` run in the caller's
process and never do. So each archive run takes a turn itself: it writes a claim (when it
claimed, its run id) on its own run as a tag, then reads the claims of the other runs of the
same topic partition that are still going, and waits for every claim ordered before its own.

Two runs that claim at the same moment both see both claims and agree on one order; a run
that claims after another has read sees that one's claim, which is earlier. So at most one
run proceeds at a time (given one clock: the runs of one Dagster instance on one machine, or
machines whose clocks agree to far better than a run's start-up). No Dagster imports here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True, order=True)
class Claim:
    """A run's claim on a topic partition; ordered by time, then run id (a total order)."""

    since: float  # seconds since the epoch
    run_id: str

    @property
    def tag(self) -> str:
        return f"{self.since:.6f}"

    @classmethod
    def from_tag(cls, value: str, run_id: str) -> "Claim | None":
        try:
            return cls(float(value), run_id)
        except ValueError:  # not ours to judge: a claim we cannot read orders nothing
            return None


def ahead(mine: Claim, others: Iterable[Claim | None]) -> list[Claim]:
    """The claims to wait for: those of other runs ordered before mine, oldest first."""
    return sorted(c for c in others if c is not None and c.run_id != mine.run_id and c < mine)


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
