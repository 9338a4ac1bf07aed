"""Offset ranges: the unit of archiving, and the partition keys that name them.

No Dagster imports here: this is the arithmetic the whole protocol rests on, so it is kept
small and tested with tables (tests/core/offsets/test_ranges.py).

A range is half-open, `[start, end)`, like Kafka's committed offset (the next offset to
read). `end - start` bounds the records in it but is never a count: compaction,
transaction markers and aborted transactions leave holes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Iterator

# Kafka's own rule for topic names (kafka.common.internals.Topic): up to 249 of these.
TOPIC_PATTERN = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

OFFSET_WIDTH = 20  # int64 needs 19 digits; 20 keeps the archive's object names aligned
PARTITION_WIDTH = 5

KEY_FORM = "<topic>:p<partition, 5 digits>:<start, 20 digits>-<end, 20 digits>"
KEY_EXAMPLE = "orders:p00003:00000000000000001000-00000000000000002000"
_KEY = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]{1,249}):p(?P<partition>\d{5}):(?P<start>\d{20})-(?P<end>\d{20})$")


class MalformedKey(ValueError):
    """A partition key that does not name exactly one offset range."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """`[start, end)` of one topic partition. Ordered by (topic, partition, start, end)."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        check_topic(self.topic)
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition}")
        if self.start < 0 or self.end < 0:
            raise ValueError(f"offsets must be >= 0, got [{self.start}, {self.end})")
        if self.end <= self.start:
            raise ValueError(
                f"an offset range needs start < end, got [{self.start}, {self.end}) "
                f"of {self.topic}/{self.partition}"
            )

    @property
    def key(self) -> str:
        """The Dagster partition key: readable, and sorts in offset order within a partition."""
        return (
            f"{self.topic}:p{self.partition:0{PARTITION_WIDTH}d}:"
            f"{self.start:0{OFFSET_WIDTH}d}-{self.end:0{OFFSET_WIDTH}d}"
        )

    @property
    def span(self) -> int:
        """Upper bound on the records in the range (holes make the real count smaller)."""
        return self.end - self.start

    def slices(self, size: int) -> list["OffsetRange"]:
        """Cut into consecutive sub-ranges of at most `size` offsets, covering it exactly."""
        return list(cut(self.topic, self.partition, self.start, self.end, size))

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}[{self.start}, {self.end})"


def parse_key(key: str) -> OffsetRange:
    """The one range a partition key names; a malformed key is refused showing the form."""
    m = _KEY.fullmatch(key)
    if not m:
        raise MalformedKey(
            f"malformed archive partition key {key!r}: expected {KEY_FORM}, e.g. {KEY_EXAMPLE}"
        )
    try:
        return OffsetRange(m["topic"], int(m["partition"]), int(m["start"]), int(m["end"]))
    except ValueError as e:
        raise MalformedKey(f"archive partition key {key!r} does not name a range ({e}): expected {KEY_FORM}") from None


def check_topic(topic: str) -> str:
    if not TOPIC_PATTERN.match(topic) or topic in (".", ".."):
        raise ValueError(
            f"invalid Kafka topic name {topic!r}: use 1-249 of the characters a-z A-Z 0-9 . _ -"
        )
    if "..." in topic:
        # Dagster refuses "..." inside partition keys, and keys carry the topic name.
        raise ValueError(f"topic name {topic!r} contains '...', which Dagster partition keys refuse")
    return topic


def cut(topic: str, partition: int, start: int, end: int, size: int) -> Iterator[OffsetRange]:
    """Consecutive ranges of at most `size` offsets covering `[start, end)`; nothing if empty."""
    if size <= 0:
        raise ValueError(f"range size must be > 0, got {size}")
    lo = start
    while lo < end:
        hi = min(lo + size, end)
        yield OffsetRange(topic, partition, lo, hi)
        lo = hi


def overlaps(ranges: Iterable[OffsetRange]) -> list[tuple[OffsetRange, OffsetRange]]:
    """The pairs of distinct ranges of one partition that share an offset, each pair in offset order.

    A run archiving two such ranges would put those offsets in two manifests (the archive's check
    of overlaps looks at manifests already written, not at the run's other ranges)."""
    out = []
    by_partition: dict[tuple[str, int], list[OffsetRange]] = {}
    for r in sorted(set(ranges)):
        by_partition.setdefault((r.topic, r.partition), []).append(r)
    for group in by_partition.values():
        for i, a in enumerate(group):
            for b in group[i + 1:]:
                if b.start >= a.end:
                    break  # sorted by start: no later range reaches back into `a`
                out.append((a, b))
    return out
