"""Where a range's objects live in Swift: Hive-style paths any table engine can read.

    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/part-<first offset:020d>.parquet
    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/_manifest.json
    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/_loss.json   (an acknowledged loss)

Every name is a function of the range and the records in it, nothing else: a retry writes
the same names, so it can never leave a duplicate beside the first attempt. No Dagster imports.
"""

from __future__ import annotations

import re

from matos_dagster.ranges import OFFSET_WIDTH, OffsetRange

MANIFEST = "_manifest.json"
# An acknowledged data loss is recorded in a range folder of its own, so the one listing
# that finds archived ranges finds losses too, in offset order. Engines skip `_` files.
LOSS = "_loss.json"
EXTENSIONS = {"parquet": ".parquet", "jsonl": ".jsonl.gz"}
_RANGE_DIR = re.compile(r"^(\d{20})-(\d{20})$")


def join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def topic_dir(prefix: str, topic: str) -> str:
    return join(prefix, f"topic={topic}")


def partition_dir(prefix: str, topic: str, partition: int) -> str:
    return join(topic_dir(prefix, topic), f"partition={partition}")


def range_dir(prefix: str, r: OffsetRange) -> str:
    return join(partition_dir(prefix, r.topic, r.partition), f"{r.start:0{OFFSET_WIDTH}d}-{r.end:0{OFFSET_WIDTH}d}")


def manifest_name(prefix: str, r: OffsetRange) -> str:
    return join(range_dir(prefix, r), MANIFEST)


def loss_name(prefix: str, r: OffsetRange) -> str:
    return join(range_dir(prefix, r), LOSS)


def object_name(directory: str, first_offset: int, fmt: str) -> str:
    return join(directory, f"part-{first_offset:0{OFFSET_WIDTH}d}{EXTENSIONS[fmt]}")


def parse_range_dir(name: str) -> tuple[int, int] | None:
    """`(start, end)` of a range directory's last path segment, or None if it is not one."""
    m = _RANGE_DIR.match(name.rstrip("/").rsplit("/", 1)[-1])
    return (int(m[1]), int(m[2])) if m else None
