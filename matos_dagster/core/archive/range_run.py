"""Archiving one offset range, exactly once: the protocol of docs/design.md, on the driver.

1. validate the range against Kafka (topic, partition, log start and end offsets);
2. run its slices as Spark tasks, each writing its own deterministically named objects (a
   typed topic's with its typed columns, core/schemas/typed.py);
3. archive every schema those objects name (`_schemas/`), then write the manifest last: only
   then is the range archived;
4. commit the consumer group's offset, forward only, to the end of the contiguous
   archived prefix, as Swift (not any local state) tells it;
5. bring the topic's Iceberg table up to date (MATOS_ICEBERG_TABLES), once, however the
   range came to be archived and committed.

A crash between any two steps leaves nothing wrong: a retry rewrites the same objects, and the
commit step recomputes its target from Swift. A range already archived (manifest there, offset
committed past its end) is only verified: nothing rewritten, no Spark task. No Dagster imports.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from matos_dagster.core import faults, settings
from matos_dagster.core.erase import key_index, ledger
from matos_dagster.core.erase.keys import SETTING as ledger_key
from matos_dagster.core.archive import loss
from matos_dagster.core.archive.commit import advance
from matos_dagster.core.archive.slice_task import SliceJob, archive_slice
from matos_dagster.core.iceberg.hooks import keep_table
from matos_dagster.core.kafka.client import KafkaClient
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.schemas import typed as typed_columns
from matos_dagster.core.schemas.errors import RegistryUnavailable
from matos_dagster.core.spark.tasks import run_entries
from matos_dagster.core.swift import incarnations, layout, manifest
from matos_dagster.core.swift.incarnations import Incarnation
from matos_dagster.core.swift.archived import EXPIRED, LOSS, PartitionArchive
from matos_dagster.core.swift.listed import ListedPartition
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import SWIFT_MAX_NAME, TopicConfig

log = logging.getLogger(__name__)


class RangeRefused(ValueError):
    """The range cannot be archived as asked; nothing was written."""


class Overlaps(RangeRefused):
    """Offsets of the range are archived already (a range, or an acknowledged loss): `span` is the
    first such entry, `[start, end)`. No retry of the same range can succeed; the lag sensor plans
    the partition's next range from it (core/runs/policy.py)."""

    def __init__(self, message: str, span: tuple[int, int]):
        super().__init__(message)
        self.span = span


class Undecodable(RangeRefused):
    """decode_strict: a record of the range does not decode (which, and why); nothing is committed."""


class DataLoss(RuntimeError):
    """Records of the range were deleted from Kafka before they were archived."""

    def __init__(self, r: OffsetRange, lost_end: int, low: int, group: str | None):
        self.range, self.lost = r, (r.start, lost_end)
        super().__init__(
            f"offsets [{r.start}, {lost_end}) of {r.topic}/{r.partition} were deleted from Kafka "
            f"(log start offset is now {low}) before they were archived: those records are lost. "
            f"To go on, acknowledge the loss (it is recorded in the archive and the group's offset "
            f"moves past it): {loss.command(r.topic, r.partition)}"
        )


@dataclass
class Archived:
    range: OffsetRange
    manifest_name: str
    manifest: dict
    verified_only: bool  # the existing archive was verified, nothing written (expired, or already archived)
    committed_before: int | None
    committed_after: int | None
    duration_s: float
    slices: int = 0
    notes: list[str] = field(default_factory=list)
    already_archived: bool = False  # its manifest was there (committed, or records expired): verified only
    log_end: int | None = None  # the partition's log end offset when the run read it
    reader: str = ""  # the slice reader that read the records written: native, python (a mix: both); "" if none

    @property
    def records_written(self) -> int:
        return 0 if self.verified_only else self.manifest["records"]

    @property
    def records_per_s(self) -> float:
        return self.records_written / self.duration_s if self.duration_s > 0 else 0.0


def archive_range(
    r: OffsetRange,
    topic: TopicConfig,
    kafka: KafkaClient,
    store: Store,
    spark: Any,
    say: Callable[[str], None] = log.info,
    checked: Checked | None = None,
    typing: typed_columns.Typing | None = None,
    incarnation: Incarnation | None = None,
) -> Archived:
    """Archive `r` (the steps above). `spark`: a session, or a function that makes one, called
    only if Spark tasks are needed (a range already archived needs none). `checked`: what the
    run learnt of the partition already (`check`, `in_turn`); None: Kafka is asked here.
    `typing`: the topic's typed columns; None: as the topic and the MATOS_SCHEMA_REGISTRY_*
    settings say (`typed.for_topic`, None for a topic of bytes only). `incarnation`: the topic's log the
    run resolved (`incarnations.observe`), under whose prefix the range is archived; None: the first's
    prefix, and no topic id in the manifest."""
    t0 = time.monotonic()
    prefix = incarnations.prefix_of(layout.join(store.params.prefix, topic.prefix), incarnation.number if incarnation else 1)
    if typing is None:
        typing = typed_columns.for_topic(topic)
    done = _archive(r, topic, kafka, store, spark, say, checked, prefix, typing, incarnation)
    # The Iceberg step, here only, whichever way the range ended archived and committed (written now,
    # found archived, its records expired from Kafka and the archive verified): this range and any a
    # crashed run left out, one commit (a no-op when it is there). Refused or failed: no table step.
    done.notes += keep_table(store, prefix, topic, r.partition, say, incarnation.number if incarnation else 1)
    faults.at("after-table")
    done.duration_s = time.monotonic() - t0  # the whole run's, the table step included
    return done


def _archive(r: OffsetRange, topic: TopicConfig, kafka: KafkaClient, store: Store, spark: Any,
             say: Callable[[str], None], checked: Checked | None, prefix: str,
             typing: typed_columns.Typing | None, incarnation: Incarnation | None = None) -> Archived:
    """Steps 1-4 of `archive_range`: the range archived and the group's offset committed, or found
    archived and only verified. Its `duration_s` is left to `archive_range`, which times the table
    step too."""
    if checked is None:
        kafka.check_partition(r.topic, r.partition)
    marks = kafka.watermarks(r.topic, [r.partition])[r.partition]
    if checked is None:
        checked = Checked(kafka.committed(r.topic, [r.partition], topic.group)[r.partition])
    planned = plan(r, topic, kafka, store, marks, checked.committed, prefix, typing, say, incarnation)
    if isinstance(planned, Archived):
        return planned
    say(f"{r}: archiving in {len(planned.jobs)} Spark task(s) of up to {topic.slice_records} offsets")
    session = spark() if callable(spark) else spark
    # The Spark job is the run's long wait: the driver's kept Kafka clients are closed for it (an idle
    # one whose broker went away retries its connection every 12 ms, a log line each).
    kafka.release_clients()
    objects = _run_slices(session, planned.jobs, r)
    done = write_manifest(planned, objects, store, say)
    done.committed_after = advance(kafka, store, prefix, topic, r.partition, planned.low)
    faults.at("after-commit")
    return done


@dataclass
class Planned:
    """A range that needs its records written: its slices' tasks, and what the run knew of it."""

    range: OffsetRange
    topic: TopicConfig
    prefix: str
    jobs: list[SliceJob]
    committed_before: int | None
    low: int  # the partition's log start and end offsets when the range was planned
    high: int
    typing: typed_columns.Typing | None
    incarnation: Incarnation | None = None  # the log read: its number and topic id go in the manifest


def plan(r: OffsetRange, topic: TopicConfig, kafka: KafkaClient, store: Store, marks: tuple[int, int],
         committed: int | None, prefix: str, typing: typed_columns.Typing | None,
         say: Callable[[str], None] = log.info, incarnation: Incarnation | None = None,
         ledger_of: Callable[[Store, str, str], dict] | None = None, listed: ListedPartition | None = None) -> Planned | Archived:
    """Check `r` against its partition's `marks` (log start, end), the group's `committed` offset and
    the archive: its Spark tasks, or (Archived) the range found archived and only verified.

    `ledger_of(store, prefix, topic)`: the topic's erasure ledger (default: read from Swift; a batch
    reads each topic's once for all its ranges). `listed`: the partition as a batch listed it once
    (core/swift/listed.py), instead of a manifest read and listings for this range.

    Raises RangeRefused (the range cannot be archived as asked) or DataLoss; nothing is written."""
    if r.topic != topic.name:
        raise RangeRefused(f"range {r} is not of topic {topic.name!r}")
    longest = max(len(layout.object_name(layout.range_dir(prefix, r), r.start, topic.format).encode()),
                  len(layout.manifest_name(prefix, r).encode()))
    if longest > SWIFT_MAX_NAME:
        raise RangeRefused(
            f"the object names of {r} would be {longest} bytes long, above Swift's limit of {SWIFT_MAX_NAME} "
            "(max_object_name_length): shorten MATOS_SWIFT_PREFIX or the topic's prefix"
        )
    low, high = marks
    if r.end > high:
        raise RangeRefused(
            f"range {r} ends past the log end offset {high} of {r.topic}/{r.partition}: "
            f"nothing can be archived beyond {high} yet"
        )
    name = layout.manifest_name(prefix, r)
    existing = store.get_json(name) if listed is None or listed.has_manifest(r) else None
    if isinstance(existing, dict) and incarnation is not None and incarnation.topic_id is not None \
            and existing.get("topic_id") not in (None, incarnation.topic_id):
        # Never over another log's range: its objects have these very names.
        raise RangeRefused(
            f"range {r}: {name} is the manifest of a range of topic id {existing['topic_id']}, not of "
            f"{incarnation}: the topic was deleted and created again; nothing was written")

    # Before the loss check: a range over an acknowledged loss is refused for that, not re-reported.
    _refuse_overlaps(listed or PartitionArchive(store, prefix, r.topic, r.partition), r)
    if archived_and_committed(existing, r, topic, committed):
        # Typically a run that waited for another run of its partition, which archived this
        # very range: the archive is checked, not rewritten. An object found missing or
        # different is rewritten below, if Kafka still has its records.
        try:
            verify(store, existing)
        except manifest.ManifestError as e:
            say(f"{r}: archived already, but {e}; archiving it again")
        else:
            say(f"{r}: already archived (manifest there, offset committed at {committed}); "
                f"its {len(existing['objects'])} object(s) were verified against the manifest, nothing rewritten")
            return Archived(r, name, existing, True, committed, committed, 0.0,
                            already_archived=True, log_end=high)
    if r.start < low:
        if existing is None:
            raise DataLoss(r, min(low, r.end), low, topic.group)
        verify(store, existing)
        say(f"{r}: records expired from Kafka; the archived range was verified against its manifest")
        after = advance(kafka, store, prefix, topic, r.partition, low)
        return Archived(r, name, existing, True, committed, after, 0.0, already_archived=True, log_end=high)

    try:
        doc = (ledger_of or ledger.read)(store, prefix, r.topic)
        leave = ledger.leave(doc, r.partition, r.start, settings.get(ledger_key))
    except ledger.LedgerError as e:
        raise RangeRefused(f"range {r}: {e}") from None
    index = key_index.indexer_or_none(settings.get(ledger_key), lambda why: say(f"{r}: {why}"))
    jobs = [
        SliceJob(
            slice=s,
            directory=layout.range_dir(prefix, r),
            kafka_conf=kafka.client_config(),
            group=topic.group,
            swift=store.params,
            format=topic.format,
            object_bytes=topic.object_bytes,
            max_record_bytes=topic.max_record_bytes,
            typing=typing,
            leave=leave,
            index=index,
        )
        for s in r.slices(topic.slice_records)
    ]
    return Planned(r, topic, prefix, jobs, committed, low, high, typing, incarnation)


def write_manifest(p: Planned, objects: list[dict], store: Store, say: Callable[[str], None] = log.info,
                   say_reader: bool = True, listed: list[str] | None = None) -> Archived:
    """Step 3 for a planned range whose tasks wrote `objects`: its schemas, then its manifest, then
    the removal of what an earlier attempt left (of `listed`, the folder's objects as a batch listed
    them, else listed here). The range is archived; nothing is committed here. `say_reader`: say
    which slice reader read the range (a batch says it once for all its ranges)."""
    r = p.range
    reader = ", ".join(sorted({o.pop("reader") for o in objects if "reader" in o}))
    # Records the erasure ledger left out (core/erase/ledger.py): the manifest names their offsets.
    erased = [off for o in objects if "erased" in o for off in o["erased"]]
    objects = [o for o in objects if "erased" not in o]
    if reader and say_reader:
        say(f"{r}: records read by the {reader} slice reader (MATOS_NATIVE_READER=false turns the native one off)")
    faults.at("after-objects")

    formats = None
    if p.typing is not None:
        formats = {side: s.format for side, s, _ in p.typing.sides}
        ids = {side: {i for o in objects for i in o["typed"][side]["schema_ids"]} for side in formats}
        archived = typed_columns.archive_schemas(store, p.prefix, r.topic, p.typing, ids)
        if archived:
            say(f"{r}: schemas {', '.join(map(str, archived))} archived beside the records (_schemas/)")
    name = layout.manifest_name(p.prefix, r)
    inc = p.incarnation
    doc = manifest.build(r, p.topic.format, objects, formats, inc.topic_id if inc else None, inc.number if inc else None,
                         erased=erased)
    store.put_json(name, doc)
    faults.at("after-manifest")
    notes = _remove_strays(store, layout.range_dir(p.prefix, r), doc, listed)
    return Archived(r, name, doc, False, p.committed_before, None, 0.0, len(p.jobs), notes, log_end=p.high,
                    reader=reader)


def _run_slices(session: Any, jobs: list[SliceJob], r: OffsetRange) -> list[dict]:
    """Every object's manifest entry. A task's RegistryUnavailable (retried by Spark first) is
    raised as what it is; a slice refused for a record that does not decode raises Undecodable,
    for a record above max_record_bytes RangeRefused: one line each, never a worker's traceback."""
    written = run_entries(
        session, archive_slice, jobs, f"archive {r}", RegistryUnavailable,
        lambda failed: RegistryUnavailable(f"{r}: {failed}; nothing was committed, a later run archives the range"),
        lambda o: (Undecodable if o.get("kind") == "Undecodable" else RangeRefused)(o["refused"]))
    return [o for objects in written for o in objects]


@dataclass(frozen=True)
class Checked:
    """What a run already asked Kafka about its partition, so that `archive_range` does not ask again.

    The partition exists, and `committed` is the group's committed offset as the run last read it
    (`check`) or as its previous `archive_range` on the partition left it (`committed_after`: read
    back from Kafka by `advance`, or unchanged). The run holds its partition's turn (turns.py), so
    no other archive run moves that offset meanwhile.
    """

    committed: int | None


def check(kafka: KafkaClient, r: OffsetRange, group: str | None) -> Checked:
    """Check `r`'s partition, then read the group's committed offset: once a run, not once a range."""
    # The partition first: an unknown topic or partition, or a broker that does not answer, is
    # then named for what it is, not as a failed offset lookup (tests/end_to_end/test_bad_input.py).
    kafka.check_partition(r.topic, r.partition)
    return Checked(kafka.committed(r.topic, [r.partition], group)[r.partition])


def in_turn(topic: TopicConfig, kafka: KafkaClient, store: Store, spark: Any, checked: Checked,
            say: Callable[[str], None] = log.info, typing: typed_columns.Typing | None = None,
            incarnation: Incarnation | None = None) -> Callable[[OffsetRange], Archived]:
    """`archive_range` for the ranges a run archives one after another in its partition's turn
    (those below its own first, offset_order.py, then its own), from one `check`.

    Each call starts from the committed offset the call before left, so a run asks Kafka for the
    partition and the offset once, not once per range (on loopback a check_partition takes about
    60 ms, a committed about 30: medians of 15 at load 1-3). A refused range
    (RangeRefused, DataLoss) raises before any commit: the offset it started from still holds.
    """
    known = checked

    def archive(r: OffsetRange) -> Archived:
        nonlocal known
        done = archive_range(r, topic, kafka, store, spark, say, checked=known, typing=typing, incarnation=incarnation)
        known = Checked(done.committed_after)
        return done

    return archive


def archived_and_committed(existing: dict | None, r: OffsetRange, topic: TopicConfig, committed: int | None) -> bool:
    """The manifest there is the one this run would write (its range, its format), and the
    group's offset is at or past its end: the range is archived and committed, nothing to write."""
    return (
        isinstance(existing, dict)
        and committed is not None
        and committed >= r.end
        and existing.get("format") == topic.format
        and (existing.get("topic"), existing.get("partition"), existing.get("start"), existing.get("end"))
        == (r.topic, r.partition, r.start, r.end)
    )



def verify(store: Store, doc: dict) -> None:
    """The manifest is one (typed, checked), and every object of it is in Swift with its size and md5."""
    for o in manifest.Manifest.from_json(doc).objects:
        found = store.head(o.name)
        if found is None:
            raise manifest.ManifestError(f"object {o.name} of the manifest is missing from Swift")
        if found["bytes"] != o.bytes or found["md5"] != o.md5:
            raise manifest.ManifestError(
                f"object {o.name} in Swift has {found['bytes']} bytes, md5 {found['md5']}; "
                f"the manifest says {o.bytes} bytes, md5 {o.md5}"
            )


def _refuse_overlaps(archive: PartitionArchive, r: OffsetRange) -> None:
    for e in archive.overlapping(r.start, r.end):
        if e.kind == LOSS:
            raise Overlaps(
                f"range {r} overlaps [{e.start}, {e.end}), acknowledged as lost (its {layout.LOSS}): those "
                "records were deleted from Kafka. Archive the offsets outside it instead.", e.span)
        if e.kind == EXPIRED:
            raise Overlaps(
                f"range {r} overlaps [{e.start}, {e.end}), expired by age (its {layout.EXPIRED}): those records "
                "are older than the topic's archive_retention_days. Archive the offsets outside it instead.", e.span)
        if e.span != (r.start, r.end):
            raise Overlaps(
                f"range {r} overlaps the archived range [{e.start}, {e.end}): every offset must be in exactly "
                "one manifest. Archive the offsets outside it instead.", e.span)


def _remove_strays(store: Store, directory: str, doc: dict, listed: list[str] | None = None) -> list[str]:
    """Delete objects of an earlier attempt (other settings) that the manifest does not list; of
    `listed`, the folder's objects before the range's tasks ran (they write only the manifest's)."""
    keep = {o["name"] for o in doc["objects"]} | {layout.join(directory, layout.MANIFEST)}
    names = listed if listed is not None else [item.get("name") for item in store.list(directory + "/")]
    removed = []
    for name in names:
        if name and name not in keep:
            store.delete(name)
            removed.append(name)
    return [f"removed {n}: left by an earlier attempt, not in the manifest" for n in removed]
