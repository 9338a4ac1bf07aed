"""Span arithmetic: the one place that says how half-open offset spans cover a partition.

Archive (commit target, overlap refusal), monitor, verifier, reader and restore all judge
coverage with these functions, so they cannot disagree about what is archived, what is a
gap and what is an overlap. A span is `(start, end)`, half-open like Kafka's offsets.
No Dagster imports; tested with tables (tests/core/offsets/test_spans.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

Span = tuple[int, int]


def merge(spans: Iterable[Span]) -> list[Span]:
    """The union of `spans` as sorted, disjoint, non-adjacent spans; empty spans dropped."""
    out: list[Span] = []
    for lo, hi in sorted(s for s in spans if s[0] < s[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def uncovered(spans: Iterable[Span], lo: int, hi: int) -> list[Span]:
    """The parts of `[lo, hi)` that no span covers, in order."""
    out: list[Span] = []
    pos = lo
    for a, b in merge(spans):
        if a >= hi:
            break
        if b <= pos:
            continue
        if a > pos:
            out.append((pos, a))
        pos = max(pos, b)
    if pos < hi:
        out.append((pos, hi))
    return out


def covers(spans: Iterable[Span], lo: int, hi: int) -> bool:
    """Whether every offset of `[lo, hi)` is in some span (an empty `[lo, hi)` is covered)."""
    return lo >= hi or not uncovered(spans, lo, hi)


def contiguous_end(spans: Iterable[Span], start: int) -> int:
    """End of the contiguous run of `spans` that begins at or covers `start`, or `start`.

    This is how far a consumer group may commit: spans past a hole do not count. A span
    that covers `start` part-way (an administrator moved the offset into the middle of it)
    counts, since every offset of it is archived.
    """
    pos = start
    for lo, hi in sorted(spans):
        if lo > pos:
            break
        pos = max(pos, hi)
    return pos


def overlaps(spans: Iterable[Span]) -> list[Span]:
    """The offsets held by more than one span, as spans in order (one per meeting)."""
    out: list[Span] = []
    reach: int | None = None
    for lo, hi in sorted(spans):
        if reach is not None and lo < reach:
            out.append((lo, min(hi, reach)))
        reach = hi if reach is None else max(reach, hi)
    return out


def gaps(spans: Iterable[Span]) -> list[Span]:
    """The holes between the first span's start and the last span's end, in order."""
    ordered = sorted(spans)
    if not ordered:
        return []
    return uncovered(ordered, ordered[0][0], max(hi for _, hi in ordered))


def clip(span: Span, lo: int | None, hi: int | None) -> Span | None:
    """`span` narrowed to `[lo, hi)` (None is open), or None when nothing is left."""
    a = span[0] if lo is None else max(span[0], lo)
    b = span[1] if hi is None else min(span[1], hi)
    return (a, b) if a < b else None


@dataclass(frozen=True)
class Coverage:
    """How a partition's spans cover the offsets: holes, overlaps, extent."""

    first: int | None  # lowest covered offset, None when there is no span
    contiguous_end: int | None  # end of the run of spans starting at `first`
    gaps: tuple[Span, ...]
    overlaps: tuple[Span, ...]


def coverage(spans: Iterable[Span]) -> Coverage:
    ordered = sorted(spans)
    if not ordered:
        return Coverage(None, None, (), ())
    first = ordered[0][0]
    return Coverage(first, contiguous_end(ordered, first), tuple(gaps(ordered)), tuple(overlaps(ordered)))
