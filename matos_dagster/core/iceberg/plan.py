"""What goes into a topic's Iceberg table, and when: pure rules, no I/O, no Dagster imports.

The table of a topic holds, for each Kafka partition, the objects of the effective archived
ranges of one contiguous run of offsets `[first, end)`: `end` is the partition's *watermark*,
kept in the summary of every snapshot the product commits (`matos.end.<partition>`), so the
watermark and the files it vouches for change in the same atomic Iceberg commit.

Catching up (`catch_up`) starts at the watermark and takes the entries the finder yields
from there (archived.py's `entries_from`) up to the first hole: the ranges whose manifests were
written since the last commit, including one a crashed run wrote and never added. So a range is
added once (the watermark moves past it in the commit that adds it), never before its manifest
exists, and an object its manifest does not list (a stray of a failed attempt) is never added.
Its cost is the new entries, whatever the history (docs/design.md, bounded cost).

A compacted range that starts below the watermark (compaction merged ranges on both sides of it)
replaces the table's files between its start and the watermark in the same commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from matos_dagster.core.swift.archived import RANGE, Entry
from matos_dagster.core.swift.manifest import Manifest

WATERMARK = "matos.end."  # + partition: a snapshot summary property


class TableError(RuntimeError):
    """The table cannot be kept as asked (a setting or the archive's format), with what to change."""


@dataclass(frozen=True)
class Step:
    """One commit's worth of work for one partition."""

    partition: int
    end: int  # the watermark after the commit
    adds: tuple[str, ...] = ()  # object names (in the container), in offset order
    records: int = 0  # records the added objects hold
    ranges: list[tuple[int, int]] = field(default_factory=list)  # the archived ranges added
    replace: tuple[int, int] | None = None  # the table's files inside these offsets are dropped
    typed: bool = False  # a manifest of a typed topic's range among them: its objects have typed columns

    @property
    def empty(self) -> bool:
        return not self.adds and self.replace is None


def watermarks(summary: Mapping[str, str] | None) -> dict[int, int]:
    """The partitions' watermarks a snapshot summary records."""
    out = {}
    for k, v in (summary or {}).items():
        if k.startswith(WATERMARK) and k[len(WATERMARK):].isdigit():
            out[int(k[len(WATERMARK):])] = int(v)
    return out


def summary(marks: Mapping[int, int]) -> dict[str, str]:
    """Snapshot summary properties for every partition's watermark (each commit carries them all)."""
    return {f"{WATERMARK}{p}": str(end) for p, end in sorted(marks.items())}


def catch_up(partition: int, base: int, entries: Iterable[tuple[Entry, Manifest | None]]) -> Step:
    """The commit that brings the table's partition from watermark `base` to the end of the contiguous
    entries that follow it.

    `entries`: the effective entries from `base` on, in offset order, each with its manifest (None for
    an acknowledged loss, which adds nothing and is passed over like the committed offset passes over
    it). Stops at the first hole, or at a range whose manifest vanished (read next time).
    """
    pos, adds, records, ranges, replace, typed = base, [], 0, [], None, False
    for e, doc in entries:
        if e.start > pos or e.end <= pos:
            break  # a hole: later ranges wait for it to be archived
        if e.kind == RANGE:
            if doc is None:
                break
            if doc.format != "parquet":
                raise TableError(
                    f"{doc.topic} is archived as {doc.format}: only Parquet archives are Iceberg tables "
                    "(set the topic's format to parquet, or leave MATOS_ICEBERG_TABLES off)"
                )
            if e.start < pos:
                if adds or replace is not None:
                    break  # one replacement a commit, at its start
                replace = (e.start, pos)  # a compacted range reaching below the watermark
            adds.extend(o.name for o in doc.objects)
            records += doc.records
            typed = typed or is_typed(doc)
            ranges.append(e.span)
        pos = e.end
    return Step(partition, pos, tuple(adds), records, ranges, replace, typed)


def is_typed(doc: Manifest) -> bool:
    """Whether the range's objects have typed columns: its manifest counts them (swift/manifest.py)."""
    return isinstance(getattr(doc, "typed", None), dict)


def first_base(first: Entry | None) -> int:
    """Where a partition without a watermark starts: its first entry (the history's start), or 0."""
    return first.start if first is not None else 0


def covering(files: Iterable[tuple[str, int, int]], start: int, end: int) -> list[str]:
    """Of the table's files `(path, first offset, last offset)` that share an offset with `[start, end)`,
    those to drop; a TableError if one reaches outside it (the table is not what the archive says:
    rebuild it)."""
    out = []
    for path, lo, hi in files:
        if hi < start or lo >= end:
            continue
        if lo < start or hi >= end:
            raise TableError(
                f"the table's file {path} holds offsets [{lo}, {hi}], across the edge of [{start}, {end}): "
                "the table does not match the archive; rebuild it (the iceberg_rebuild job)"
            )
        out.append(path)
    return out
