"""Every Swift object name of the archive, and only here: Hive-style paths any engine can read.

    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/part-<first offset:020d>.parquet
    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/part-<first offset:020d>.e<n>.parquet
                                                   (an object rewritten by the n-th erasure of its records)
    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/_manifest.json
    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/_loss.json   (an acknowledged loss)
    <prefix>/topic=<topic>/partition=<p>/<start:020d>-<end:020d>/_expired.json (a span expired by age)
    <prefix>/topic=<topic>/_monitor/partition=<p>.json                        (the monitor's mark)
    <prefix>/topic=<topic>/_audit/partition=<p>.json                          (the verifier's mark)
    <prefix>/topic=<topic>/_schemas/<schema id>.json                          (a record schema, archived)
    <prefix>/_compaction/topic=<topic>/partition=<p>.json                     (compaction's cursor)
    <prefix>/_erasure/topic=<topic>/ledger.json                               (what the topic's writers leave out)
    <prefix>/_erasure/requests/<id>.json                                      (an erasure request, until done)
    <prefix>/_erasure/records/<id>.json                                       (an erasure, done: its record)
    <prefix>/_expiry/topic=<topic>/partition=<p>.json                         (expiry's cursor)
    <prefix>/_expiry/records/<id>.json                                        (an expiry run: its record)
    <prefix>/_iceberg/...                                                     (the Iceberg tables)
    <prefix>/_matos_check/<unique>                                            (`matos check`'s probe)

Names starting with `_` are the archive's own bookkeeping: table engines skip them.

Every name is a function of the range and the records in it, nothing else: a retry writes
the same names, so it can never leave a duplicate beside the first attempt. No Dagster imports.
"""

from __future__ import annotations

import re

from matos_dagster.core.offsets.ranges import OFFSET_WIDTH, OffsetRange

MANIFEST = "_manifest.json"
# An acknowledged data loss is recorded in a range folder of its own, so the one listing
# that finds archived ranges finds losses too, in offset order. Engines skip `_` files.
LOSS = "_loss.json"
# A span whose every record was older than the topic's `archive_retention_days` (core/expire/):
# its objects are deleted, the marker stays, so the span is expired, never a gap.
EXPIRED = "_expired.json"
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


def expired_name(prefix: str, r: OffsetRange) -> str:
    return join(range_dir(prefix, r), EXPIRED)


def object_name(directory: str, first_offset: int, fmt: str) -> str:
    return join(directory, f"part-{first_offset:0{OFFSET_WIDTH}d}{EXTENSIONS[fmt]}")


_ERASED = re.compile(r"^(.*/part-\d{20})(?:\.e(\d+))?(\.[a-z.]+)$")


def erased_object_name(name: str) -> str:
    """The name of `name`'s replacement without erased records: `part-<offset>.e<n+1>.<ext>`.

    Never a name an archive run writes (those have no `.e<n>`), so a re-archive of the range and
    an erasure never write the same name; a re-run of the same erasure writes the same one."""
    m = _ERASED.match(name)
    if m is None:
        raise ValueError(f"{name} is not an archive object's name")
    return f"{m[1]}.e{int(m[2] or 0) + 1}{m[3]}"


def erasure_dir(prefix: str) -> str:
    """Forgetting's bookkeeping (core/erase/): outside every topic folder, beside `_compaction/`."""
    return join(prefix, "_erasure")


def erasure_request_name(prefix: str, request_id: str) -> str:
    return join(erasure_dir(prefix), "requests", f"{request_id}.json")


def erasure_record_name(prefix: str, request_id: str) -> str:
    return join(erasure_dir(prefix), "records", f"{request_id}.json")


def erasure_ledger_name(prefix: str, topic: str) -> str:
    return join(erasure_dir(prefix), f"topic={topic}", "ledger.json")


def expiry_cursor_name(prefix: str, topic: str, partition: int) -> str:
    """How far expiry (core/expire/) looked, and the kept ranges it must look at again: outside every topic folder."""
    return join(prefix, "_expiry", f"topic={topic}", f"partition={partition}.json")


def expiry_record_name(prefix: str, record_id: str) -> str:
    return join(prefix, "_expiry", "records", f"{record_id}.json")


def monitor_mark_name(prefix: str, topic: str, partition: int) -> str:
    return join(topic_dir(prefix, topic), "_monitor", f"partition={partition}.json")


def audit_mark_name(prefix: str, topic: str, partition: int) -> str:
    return join(topic_dir(prefix, topic), "_audit", f"partition={partition}.json")


def schema_name(prefix: str, topic: str, schema_id: int) -> str:
    """A schema the topic's records name by id (Confluent wire format), archived beside them."""
    return join(topic_dir(prefix, topic), "_schemas", f"{schema_id}.json")


def event_time_state_name(prefix: str, topic: str) -> str:
    """What the event-time windows' evaluation knows of the topic (core/days/evaluate.py)."""
    return join(topic_dir(prefix, topic), "_event_time", "_state.json")


def window_name(prefix: str, topic: str, window_key: str) -> str:
    """A complete window's record: per partition, the ranges and offsets that hold it (core/days/)."""
    return join(topic_dir(prefix, topic), "_event_time", f"{window_key}.json")


def open_window_name(prefix: str, topic: str, window_key: str) -> str:
    """A window not complete yet: the shares of it read so far, until it completes (core/days/evaluate.py)."""
    return join(topic_dir(prefix, topic), "_event_time", "_open", f"{window_key}.json")


def compaction_cursor_name(prefix: str, topic: str, partition: int) -> str:
    # Outside every topic folder, so compacting a topic never lists it among its ranges.
    return join(prefix, "_compaction", f"topic={topic}", f"partition={partition}.json")


def probe_name(prefix: str, unique: str) -> str:
    """`matos check`'s probe object, written and deleted at once to prove the container writable."""
    return join(prefix, "_matos_check", unique)


def iceberg_root(prefix: str) -> str:
    """The Iceberg catalog's folder: each table's metadata (and PENDING_DELETES) lives under it."""
    return join(prefix, "_iceberg")


# Metadata files of a table whose delete failed, retried at its next expiry (beside its metadata).
PENDING_DELETES = "_deletes_pending.json"


def is_bookkeeping(name: str) -> bool:
    """A `_` object (manifest, loss, marks): not data, skipped by table engines."""
    return name.rpartition("/")[2].startswith("_")


def parse_range_dir(name: str) -> tuple[int, int] | None:
    """`(start, end)` of a range directory's last path segment, or None if it is not one."""
    m = _RANGE_DIR.match(name.rstrip("/").rsplit("/", 1)[-1])
    return (int(m[1]), int(m[2])) if m else None
