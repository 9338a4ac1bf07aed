"""A topic's archive as an Apache Iceberg table: kept by the archive runs, read in place over Swift's S3 API.

The table's data files are the archive's own Parquet objects (`add_files`: nothing is copied);
its metadata lives beside them under `<MATOS_SWIFT_PREFIX>/_iceberg/<topic>/` (a `_` name, which
Hive-style readers of the archive skip). What goes in and when is iceberg_plan.py's rule; this
module does the I/O: the catalog (pyiceberg; an embedded sqlite `SqlCatalog` by default), Swift's
listings through archived.py, and DuckDB with its extensions loaded offline from their wheels.

The archive's truth stays the manifests in Swift: the table can always be rebuilt from them
(`rebuild`) and compared with them (`check`). No Dagster imports.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from matos_dagster import iceberg_plan, layout, settings
from matos_dagster.archived import RANGE, Entry, PartitionArchive, archived_partitions
from matos_dagster.iceberg_plan import Step, TableError
from matos_dagster.manifest import Manifest
from matos_dagster.store import Store

log = logging.getLogger(__name__)

COMMIT_TRIES = 10  # runs of other partitions of the topic commit to the same table at the same time
NO_PYICEBERG_RETRY = "commit.retry.num-retries"  # pyiceberg's TableProperties.COMMIT_NUM_RETRIES
# Statistics for the columns readers filter on (the archive's Parquet has them for these only),
# so that a filter by partition, offset or timestamp skips files.
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.metadata.metrics.default": "none",
    "write.metadata.metrics.column.partition": "full",
    "write.metadata.metrics.column.offset": "full",
    "write.metadata.metrics.column.timestamp": "full",
    # Merge small manifests as commits pile up, so one commit's metadata stays small at any history.
    "commit.manifest-merge.enabled": "true",
    # Each commit writes a new metadata file: keep the last 100 (a reader holding an older one has long
    # read it), delete older ones, so Swift does not keep one per range ever archived.
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
    # One attempt per commit. pyiceberg (0.12) retries a commit the catalog refused because another run
    # committed first by applying the same files and the same snapshot summary on the new head: a range
    # the other run already added would be added twice, and another partition's watermark, which the
    # summary carries, rolled back (so its next run adds its ranges again). Our retry (sync, replace)
    # loads the table again and plans the commit anew from the watermarks it finds.
    NO_PYICEBERG_RETRY: "0",
}
# Snapshots kept: the newest KEEP_SNAPSHOTS (time travel over the last ones); older ones are expired
# in batches of EXPIRE_BATCH (one metadata-only commit per batch), so that the table's metadata file,
# which every commit rewrites and lists every snapshot in, stays bounded whatever the history.
KEEP_SNAPSHOTS = 100
EXPIRE_BATCH = 100
# Metadata files whose delete failed at an expiry (Swift refused or did not answer): listed here, beside
# the table's folders, and retried by the next expiry (PendingDeletes).
PENDING_DELETES = "_deletes_pending.json"
PENDING_MAX = 1000


@dataclass(frozen=True)
class S3:
    """What a reader needs to reach the archive through Swift's S3 API (s3api middleware)."""

    endpoint: str  # http(s)://host:port
    access_key: str
    secret_key: str = field(repr=False)
    region: str = "us-east-1"

    def pyiceberg(self) -> dict[str, str]:
        return {"s3.endpoint": self.endpoint, "s3.access-key-id": self.access_key,
                "s3.secret-access-key": self.secret_key, "s3.region": self.region,
                "s3.force-virtual-addressing": "false"}

    def duckdb_secret(self) -> str:
        u = urlsplit(self.endpoint)
        q = lambda s: "'" + s.replace("'", "''") + "'"  # noqa: E731 - SQL string literal
        return (f"CREATE OR REPLACE SECRET matos_s3 (TYPE s3, KEY_ID {q(self.access_key)}, SECRET {q(self.secret_key)}, "
                f"REGION {q(self.region)}, ENDPOINT {q(u.netloc)}, URL_STYLE 'path', "
                f"USE_SSL {'true' if u.scheme == 'https' else 'false'})")


def s3_for(store: Store) -> S3:
    """The S3 settings (MATOS_S3_*), with what the Swift settings give for those left empty.

    Empty endpoint: the host of Swift's storage URL (the proxy serves the S3 API when s3api is in
    its pipeline). Empty keys: with tempauth (v1), its user and key are S3 keys; with Keystone
    they must be EC2 credentials (`openstack ec2 credentials create`, s3token in the proxy).
    """
    endpoint = settings.get("MATOS_S3_ENDPOINT")
    if not endpoint:
        u = urlsplit(store.url)
        endpoint = f"{u.scheme}://{u.netloc}"
    access, secret = settings.get("MATOS_S3_ACCESS_KEY"), settings.get("MATOS_S3_SECRET_KEY")
    p = store.params
    if not access and p.auth_version == "1":
        access, secret = p.user, p.key
    if not access or not secret:
        raise TableError("no S3 keys for Swift's S3 API: set MATOS_S3_ACCESS_KEY and MATOS_S3_SECRET_KEY "
                         "(with Keystone: EC2 credentials, `openstack ec2 credentials create`)")
    return S3(endpoint.rstrip("/"), access, secret, settings.get("MATOS_S3_REGION"))


def enabled() -> bool:
    return settings.flag("MATOS_ICEBERG_TABLES")


def catalog_properties() -> dict[str, str]:
    """MATOS_ICEBERG_CATALOG (`key=value;...`, any pyiceberg catalog), or the embedded sqlite one."""
    raw = settings.get("MATOS_ICEBERG_CATALOG").strip()
    if not raw:
        folder = Path(settings.get("MATOS_DEVSTACK_DIR")) / "iceberg"
        folder.mkdir(parents=True, exist_ok=True)
        return {"type": "sql", "uri": f"sqlite:///{folder / 'catalog.db'}"}
    props = {}
    for part in filter(None, (p.strip() for p in raw.split(";"))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise TableError(f"MATOS_ICEBERG_CATALOG: {part!r} is not key=value (e.g. type=rest;uri=https://...)")
        props[key.strip()] = value.strip()
    return props


class Tables:
    """The catalog and the tables of one archive (one Swift container and prefix)."""

    def __init__(self, store: Store, s3: S3 | None = None, catalog=None):
        self.store = store
        self.s3 = s3 or s3_for(store)
        self.namespace = settings.get("MATOS_ICEBERG_NAMESPACE") or store.container
        self.root = layout.join(store.params.prefix, "_iceberg")
        self.catalog = catalog or self._catalog()
        self.expiry = Expiry()  # the last expiry's, by sync

    def _catalog(self):
        from pyiceberg.catalog import load_catalog

        props = catalog_properties()
        props.setdefault("warehouse", self.url(self.root))
        try:
            return load_catalog("matos", **{**self.s3.pyiceberg(), **props})
        except Exception as e:  # noqa: BLE001 - any catalog's own failure: name the setting
            raise TableError(f"the Iceberg catalog could not be opened ({type(e).__name__}: {e}): "
                             "check MATOS_ICEBERG_CATALOG") from None

    def url(self, name: str) -> str:
        return f"s3://{self.store.container}/{name}"

    def identifier(self, topic: str) -> tuple[str, str]:
        return (self.namespace, topic)

    def location(self, topic: str) -> str:
        return self.url(layout.join(self.root, topic))

    def table(self, topic: str, create: bool = True):
        """The topic's table, created (empty, partitioned by Kafka partition) if it does not exist."""
        from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

        ident = self.identifier(topic)
        try:
            t = self.catalog.load_table(ident)
        except NoSuchTableError:
            if not create:
                return None
            from matos_dagster import records

            self.catalog.create_namespace_if_not_exists(self.namespace)
            try:
                t = self.catalog.create_table(ident, schema=records.SCHEMA, location=self.location(topic),
                                              properties=TABLE_PROPERTIES)
                with t.update_spec() as spec:
                    spec.add_identity("partition")
                t = self.catalog.load_table(ident)
            except TableAlreadyExistsError:  # another run created it meanwhile
                t = self.catalog.load_table(ident)
        if t.location().rstrip("/") != self.location(topic):
            raise TableError(f"table {'.'.join(ident)} is at {t.location()}, not {self.location(topic)}: it is "
                             "another archive's; set MATOS_ICEBERG_NAMESPACE to a namespace of this archive's own")
        if t.properties.get(NO_PYICEBERG_RETRY) != "0":
            # A table made before that property: set it in a commit of its own (no snapshot, so pyiceberg
            # does not retry it), before any commit of ours runs on it. Refused: another run set it, or
            # committed; _commit refuses to run on a table still without it.
            from pyiceberg.exceptions import CommitFailedException

            try:
                with t.transaction() as tx:
                    tx.set_properties(**{NO_PYICEBERG_RETRY: "0"})
            except CommitFailedException:
                pass
            t = self.catalog.load_table(ident)
        return t

    def drop(self, topic: str) -> None:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            self.catalog.drop_table(self.identifier(topic))
        except NoSuchTableError:
            pass

    # -- keeping the table ---------------------------------------------------------------

    def sync(self, prefix: str, topic: str, partition: int, say: Callable[[str], None] = log.info) -> list[Step]:
        """Add the partition's archived ranges from the table's watermark on, one commit a step;
        the steps committed. Repairs a crash between a manifest and its commit, at any history."""
        from pyiceberg.exceptions import CommitFailedException

        archive = PartitionArchive(self.store, prefix, topic, partition)
        done: list[Step] = []
        tries = 0
        while True:
            t = self.table(topic)
            marks = marks_of(t)
            base = marks.get(partition)
            if base is None:
                base = iceberg_plan.first_base(archive.entry_at_or_after(0))
            step = iceberg_plan.catch_up(partition, base, _entries(archive, base))
            if step.empty and step.end == base:
                if done:
                    self.expiry = self.expire(t)
                    if self.expiry.expired:
                        say(f"{topic}: table {'.'.join(self.identifier(topic))}: {self.expiry.expired} old snapshot(s) "
                            f"expired, {len(self.expiry.deleted)} metadata file(s) deleted"
                            + (f" ({self.expiry.retried} an earlier expiry failed to delete)" if self.expiry.retried else "")
                            + (f", {len(self.expiry.failed)} not deleted (retried by the next expiry)"
                               if self.expiry.failed else ""))
                return done
            try:
                self._commit(t, step, {**marks, partition: step.end})
            except CommitFailedException:
                tries += 1
                if tries >= COMMIT_TRIES:
                    raise TableError(f"{topic}/{partition}: the Iceberg commit failed {tries} times in a row "
                                     "(other runs committing); the next run catches up") from None
                continue
            done.append(step)
            if step.adds:
                say(f"{topic}/{partition}: table {'.'.join(self.identifier(topic))} += {len(step.ranges)} range(s), "
                    f"{len(step.adds)} object(s), {step.records} records; watermark {step.end}")

    def replace(self, topic: str, doc: Manifest) -> bool:
        """After compaction's switch: the compacted range's objects replace, in one commit, the table's
        files of the ranges it contains. Idempotent (False: nothing to do), so it also repairs a crash
        between the switch and this commit when called again before the replaced folders are deleted."""
        from pyiceberg.exceptions import CommitFailedException

        for _ in range(COMMIT_TRIES):
            t = self.table(topic)
            marks = marks_of(t)
            if marks.get(doc.partition, -1) < doc.end:
                return False  # not in the table yet: catching up adds it (replacing below the watermark)
            present = table_files(t, doc.partition, doc.start, doc.end)
            drop = iceberg_plan.covering(((p, lo, hi) for p, (lo, hi, _, _) in present.items()), doc.start, doc.end)
            want = [self.url(o.name) for o in doc.objects]
            if sorted(drop) == sorted(want):
                return False
            step = Step(doc.partition, marks[doc.partition], tuple(o.name for o in doc.objects), doc.records,
                        [(doc.start, doc.end)], (doc.start, doc.end))
            try:
                self._commit(t, step, marks, {p: present[p][3] for p in drop})
                return True
            except CommitFailedException:
                continue
        raise TableError(f"{doc.topic}/{doc.partition}: the Iceberg commit of compacted range [{doc.start}, {doc.end}) "
                         "kept failing; the next compaction run retries it")

    def expire(self, t) -> "Expiry":
        """Expire all but the newest KEEP_SNAPSHOTS snapshots of table `t`, once EXPIRE_BATCH more have piled
        up, and delete the metadata files only they used (their manifest lists, and manifests no kept
        snapshot lists), with those an earlier expiry failed to delete; what it did. pyiceberg's expiry
        itself deletes no file, and this deletes nothing outside the table's `metadata/` folder: the data
        files are the archive's objects."""
        snaps = sorted(t.snapshots(), key=lambda s: s.sequence_number or 0)
        if len(snaps) < KEEP_SNAPSHOTS + EXPIRE_BATCH:
            return Expiry()
        current = t.current_snapshot().snapshot_id
        old = [s for s in snaps[:-KEEP_SNAPSHOTS] if s.snapshot_id != current]
        gone = {s.snapshot_id for s in old}
        keep = [s for s in snaps if s.snapshot_id not in gone]
        try:
            t.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in old]).commit()
        except Exception as e:  # noqa: BLE001 - housekeeping: another run committed or expired meanwhile
            log.info("%s: snapshots not expired this time (%s: %s); a later run expires them", t.name(), type(e).__name__, e)
            return Expiry()
        # Expired: no snapshot of the table names these files any more. A crash before (or while)
        # deleting them leaves a batch's files in Swift, unreferenced; nothing reads them.
        folder = t.location().rstrip("/") + "/metadata/"
        live = {m.manifest_path for s in keep for m in s.manifests(t.io)}
        dead = {s.manifest_list for s in old}
        for s in old:
            try:
                dead |= {m.manifest_path for m in s.manifests(t.io)} - live
            except Exception as e:  # noqa: BLE001 - its manifest list is gone already (a run deleted it)
                log.info("%s: the manifests of expired snapshot %s not read (%s: %s); only its manifest list "
                         "is deleted", ".".join(t.name()), s.snapshot_id, type(e).__name__, e)
        # The deletes an earlier expiry saw fail, tried again. Why a list kept beside the table and not
        # a listing of `metadata/` for files no snapshot names: a listing would also find the manifests
        # of a commit another run is making right now (written, not yet in the catalog) and delete them
        # from under it. A file in the list was named only by expired snapshots, which no later commit
        # names again (a commit starts from the current snapshot, which is kept), so deleting it later
        # is as safe as deleting it now; the live ones are left out all the same, and only `metadata/`.
        pending = PendingDeletes(t.io, t.location().rstrip("/") + "/" + PENDING_DELETES)
        earlier = pending.read()
        todo = sorted(p for p in (dead | earlier) - live if p.startswith(folder))
        deleted, failed, error = [], [], None
        for path in todo:
            try:
                t.io.delete(path)
            except FileNotFoundError:
                deleted.append(path)  # gone already: an earlier attempt's delete reached Swift after all
            except Exception as e:  # noqa: BLE001 - Swift refused or did not answer: retried by the next expiry
                failed.append(path)
                error = error or e
            else:
                deleted.append(path)
        if failed:
            log.warning("%s: %d of %d metadata file(s) of expired snapshots not deleted (first %s: %s: %s); "
                        "the next expiry retries them", ".".join(t.name()), len(failed), len(todo), failed[0],
                        type(error).__name__, error)
        if failed or earlier:
            pending.write(failed)
        return Expiry(len(old), tuple(deleted), tuple(failed), len(earlier & set(deleted)))

    def _commit(self, t, step: Step, marks: dict[int, int], drop: dict | None = None) -> None:
        """One Iceberg commit: the step's objects added, the files it replaces removed, every watermark."""
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.io.pyarrow import parquet_files_to_data_files
        from pyiceberg.table import TableProperties

        if t.properties.get(NO_PYICEBERG_RETRY) != "0":  # see TABLE_PROPERTIES: the caller loads it again
            raise CommitFailedException(f"{t.name()} would let pyiceberg retry a refused commit as it was planned")
        if drop is None and step.replace is not None:
            present = table_files(t, step.partition, *step.replace)
            names = iceberg_plan.covering(((p, lo, hi) for p, (lo, hi, _, _) in present.items()), *step.replace)
            drop = {p: present[p][3] for p in names}
        with t.transaction() as tx:
            if tx.table_metadata.name_mapping() is None:  # what add_files sets: Parquet without field ids
                tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                     tx.table_metadata.schema().name_mapping.model_dump_json()})
            missing = {k: v for k, v in TABLE_PROPERTIES.items()
                       if k.startswith("write.metadata.") and k not in tx.table_metadata.properties}
            if missing:  # a table made before these properties: they bound its metadata files too
                tx.set_properties(**missing)
            snap = tx.update_snapshot(snapshot_properties=iceberg_plan.summary(marks))
            with (snap.overwrite() if drop else snap.merge_append()) as producer:
                for f in (drop or {}).values():
                    producer.delete_data_file(f)
                for f in parquet_files_to_data_files(t.io, tx.table_metadata, iter([self.url(n) for n in step.adds])):
                    producer.append_data_file(f)
            # The snapshot's manifests are in Swift now, the catalog not yet switched to them.
            _fault("table-written")

    # -- rebuilding and checking -------------------------------------------------------------

    def rebuild(self, prefix: str, topic: str, say: Callable[[str], None] = log.info) -> int:
        """Drop the topic's table and build it again from the manifests alone; the records it holds."""
        self.drop(topic)
        for p in archived_partitions(self.store, prefix, topic):
            self.sync(prefix, topic, p, say)
        t = self.table(topic)
        snap = t.current_snapshot()
        return int(snap.summary["total-records"]) if snap else 0

    def check(self, prefix: str, topic: str) -> "Comparison":
        """Compare the table with the manifests: the same files, with the same record counts, for every
        partition up to its watermark (a full audit: every file of the table, every entry of Swift)."""
        t = self.table(topic, create=False)
        if t is None:
            return Comparison(topic, problems=[f"{topic} has no table: run the iceberg_rebuild job"])
        marks = marks_of(t)
        in_table = {p: (lo, hi, n) for p, (lo, hi, n, _) in table_files(t).items()}
        out = Comparison(topic, table_records=sum(n for _, _, n in in_table.values()))
        expected: dict[str, int] = {}
        for p in archived_partitions(self.store, prefix, topic):
            archive = PartitionArchive(self.store, prefix, topic, p)
            end = marks.get(p)
            for e in archive.all():
                if end is None or e.end > end:
                    break
                if e.kind == RANGE:
                    out.ranges += 1
                    for o in Manifest.from_json(archive.read(e)).objects:
                        expected[self.url(o.name)] = o.records
        out.manifest_records = sum(expected.values())
        for path in sorted(set(in_table) - set(expected)):
            out.problems.append(f"{path} is in the table but in no manifest up to the watermark")
        for path in sorted(set(expected) - set(in_table)):
            out.problems.append(f"{path} is in a manifest but not in the table")
        for path in sorted(set(expected) & set(in_table)):
            if expected[path] != in_table[path][2]:
                out.problems.append(f"{path}: {in_table[path][2]} records in the table, {expected[path]} in its manifest")
        out.files = len(in_table)
        return out


@dataclass
class Comparison:
    topic: str
    table_records: int = 0
    manifest_records: int = 0
    files: int = 0
    ranges: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.table_records == self.manifest_records


@dataclass(frozen=True)
class Expiry:
    """What one expiry did (`Tables.expire`): nothing at all until a batch of snapshots has piled up."""

    expired: int = 0  # snapshots
    deleted: tuple[str, ...] = ()  # metadata files deleted (this batch's, and earlier failures retried)
    failed: tuple[str, ...] = ()  # metadata files whose delete failed: kept in PENDING_DELETES, retried next time
    retried: int = 0  # of `deleted`, those an earlier expiry failed to delete


class PendingDeletes:
    """The table's metadata files whose delete failed, a small JSON object beside the table's folders
    (`<location>/_deletes_pending.json`, read and written through the table's own FileIO: Swift's S3 API).

    Bounded: at most PENDING_MAX paths (a batch deletes about one file a snapshot, so that is several whole
    batches refused in a row: Swift refusing everything; the excess stays as orphans, said in the log). Read and rewritten by the expiry only,
    once a batch; two runs expiring at the same moment could each rewrite it and lose the other's paths:
    those files stay as orphans, unreferenced, which is what every failed delete was before this list.
    """

    def __init__(self, io, path: str):
        self.io, self.path = io, path

    def read(self) -> set[str]:
        try:
            with self.io.new_input(self.path).open() as f:
                return set(json.loads(f.read())["paths"])
        except FileNotFoundError:
            return set()
        except Exception as e:  # noqa: BLE001 - unreadable: its paths stay as orphans; new failures are kept
            log.warning("%s not read (%s: %s): the deletes it holds are not retried", self.path, type(e).__name__, e)
            return set()

    def write(self, paths: list[str]) -> None:
        try:
            if not paths:
                self.io.delete(self.path)
                return
            if len(paths) > PENDING_MAX:
                log.warning("%s: %d failed deletes, %d kept for retrying, the rest left as orphans",
                            self.path, len(paths), PENDING_MAX)
            with self.io.new_output(self.path).create(overwrite=True) as f:
                f.write(json.dumps({"paths": sorted(paths)[:PENDING_MAX]}).encode())
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - housekeeping: those files stay as orphans, never read
            log.warning("%s not written (%s: %s): %d failed delete(s) will not be retried",
                        self.path, type(e).__name__, e, len(paths))


def _fault(point: str) -> None:
    # For tests only, as archive._fault (which imports this module): MATOS_FAULT=<point> kills the
    # process right there, to prove that the next run repairs the table.
    if os.environ.get("MATOS_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def marks_of(t) -> dict[int, int]:
    snap = t.current_snapshot()
    return iceberg_plan.watermarks(snap.summary.additional_properties if snap else None)


def table_files(t, partition: int | None = None, start: int | None = None, end: int | None = None) -> dict:
    """{path: (first offset, last offset, records, DataFile)} of the table's files (in one partition and
    sharing an offset with [start, end), if given: Iceberg's own metrics prune the rest)."""
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThanOrEqual, LessThan
    from pyiceberg.conversions import from_bytes

    if t.current_snapshot() is None:
        return {}
    where = AlwaysTrue()
    if partition is not None:
        where = And(EqualTo("partition", partition), GreaterThanOrEqual("offset", start), LessThan("offset", end))
    field_id = t.schema().find_field("offset").field_id
    ftype = t.schema().find_field("offset").field_type
    out = {}
    for task in t.scan(row_filter=where).plan_files():
        f = task.file
        lo = from_bytes(ftype, f.lower_bounds[field_id])
        hi = from_bytes(ftype, f.upper_bounds[field_id])
        out[f.file_path] = (lo, hi, f.record_count, f)
    return out


def _entries(archive: PartitionArchive, base: int):
    """The entries from `base` with their manifests, up to the first hole: a manifest is read only
    when catching up gets to its entry, and the listing stops at the hole."""
    pos = base
    for e in archive.entries_from(base):
        if e.start > pos:
            return
        pos = max(pos, e.end)
        doc = archive.read(e) if e.kind == RANGE else None
        yield e, (Manifest.from_json(doc) if doc is not None else None)


def keep_table(store: Store, prefix: str, topic, partition: int, say: Callable[[str], None] = log.info) -> list[str]:
    """The archive's hook after a range's manifest: bring the topic's table up to date (no-op when off)."""
    if not enabled() or topic.format != "parquet":
        return []
    try:
        tables = Tables(store)
        steps = tables.sync(prefix, topic.name, partition, say)
    except Exception as e:  # noqa: BLE001 - the catalog's, S3's or pyiceberg's own: say what holds
        raise TableError(
            f"{topic.name}/{partition}: the range is archived and its offset committed, but the topic's Iceberg "
            f"table could not be updated ({type(e).__name__}: {e}). The next run of the partition catches the table "
            "up; check MATOS_ICEBERG_CATALOG and MATOS_S3_*, or rebuild it (the iceberg_table job, rebuild: true)"
        ) from None
    notes = expiry_notes(tables, topic.name)
    added = [span for s in steps for span in s.ranges]
    if len(added) < 2:
        return notes  # the run's own range: said above, nothing to warn about
    # More than the run's own range: ranges a run stopped between manifest and table commit left
    # out, or ranges archived ahead of a hole that this run filled. Worth a line in the run's log.
    return notes + [f"Iceberg table of {topic.name}/{partition}: added {len(added)} ranges "
                    f"({', '.join(f'[{a}, {b})' for a, b in added)}), not only this run's: earlier ones were archived "
                    "but not yet in the table (a run stopped between its manifest and its table commit, or a hole "
                    "before them)"]


def expiry_notes(tables: Tables, topic: str) -> list[str]:
    """A warning for the run's log when the expiry its commit made could not delete every file."""
    failed = tables.expiry.failed
    if not failed:
        return []
    return [f"Iceberg table of {topic}: {len(failed)} metadata file(s) of expired snapshots could not be deleted "
            f"(e.g. {failed[0]}); they are kept in {PENDING_DELETES} beside the table's metadata and the next "
            "expiry deletes them (unreferenced meanwhile: nothing reads them)"]


@dataclass(frozen=True)
class TableState:
    """The topic's table as a run leaves it: what the archive asset's metadata shows."""

    table: str
    snapshot_id: int | None  # None: no snapshot yet
    records: int  # in the whole table, every partition
    files: int
    watermark: int | None  # the run's Kafka partition's: the table holds its records below this offset


def table_state(store: Store, topic, partition: int) -> TableState | None:
    """The topic's table now (after keep_table's commit, or another run's since): None when tables are off."""
    if not enabled() or topic.format != "parquet":
        return None
    try:
        tables = Tables(store)
        t = tables.table(topic.name, create=False)
    except Exception as e:  # noqa: BLE001 - the catalog's or S3's own: the archive itself is done
        raise TableError(f"{topic.name}: the Iceberg table's state could not be read ({type(e).__name__}: {e}); "
                         "check MATOS_ICEBERG_CATALOG and MATOS_S3_*") from None
    name = ".".join(tables.identifier(topic.name))
    snap = t.current_snapshot() if t is not None else None
    if snap is None:
        return TableState(name, None, 0, 0, None)
    s = snap.summary
    return TableState(name, snap.snapshot_id, int(s["total-records"] or 0), int(s["total-data-files"] or 0),
                      marks_of(t).get(partition))


def keep_compacted(store: Store, prefix: str, topic, partition: int, spans: list[tuple[int, int]],
                   say: Callable[[str], None] = log.info) -> list[str]:
    """Compaction's hook, after a switch and again before the replaced folders are deleted: the
    compacted ranges' objects replace the small ranges' files in the table, one commit each
    (idempotent: a range already replaced costs a look at the table's metadata, no commit)."""
    if not enabled() or topic.format != "parquet" or not spans:
        return []
    tables = Tables(store)
    # First catch up: a compacted range across the watermark is replaced by catching up.
    tables.sync(prefix, topic.name, partition, say)
    archive = PartitionArchive(store, prefix, topic.name, partition)
    out = expiry_notes(tables, topic.name)
    for start, end in spans:
        doc = archive.read(Entry(start, end, RANGE))
        if doc is not None and tables.replace(topic.name, Manifest.from_json(doc)):
            out.append(f"Iceberg table of {topic.name}: [{start}, {end}) replaces the ranges it compacted")
            say(out[-1])
    return out


def duckdb_connection(s3: S3 | None = None):
    """A DuckDB connection that reads the archive over the S3 API, its extensions loaded from the
    `duckdb-ext-*` wheels (nothing downloaded at run time)."""
    import duckdb
    import duckdb_ext  # noqa: F401 - the wheels' package: its folder holds `extensions/`

    folder = Path(next(iter(duckdb_ext.__path__))) / "extensions"
    con = duckdb.connect(config={"extension_directory": str(folder), "autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    for name in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD {name}")
    if s3 is not None:
        con.execute(s3.duckdb_secret())
    return con


def spark_frame(spark, table):
    """Spark over the table: a DataFrame of exactly the records of the table's current snapshot.

    There is no Iceberg Spark runtime for this project's Spark (4.3), so Spark reads the table's
    own data files, as pyiceberg's scan plans them for the current snapshot (the archived objects,
    each once), through Swift's S3 API: one task a file, each reading it with pyarrow over the
    `s3.*` properties the table was loaded with (nothing added to Spark's classpath).
    Use it as a view: `spark_frame(spark, table).createOrReplaceTempView("demo")`, then Spark SQL.
    """
    from matos_dagster.reader import SPARK_DDL
    from matos_dagster.spark_tasks import item_frame

    props = table.io.properties
    try:
        s3 = S3(props["s3.endpoint"].rstrip("/"), props["s3.access-key-id"], props["s3.secret-access-key"],
                props.get("s3.region") or "us-east-1")
    except KeyError as e:
        raise TableError(f"the table was loaded without {e.args[0]}: load it through Tables (the S3 settings "
                         "MATOS_S3_*), or with the s3.* properties of Swift's S3 API") from None
    files = []
    for task in table.scan().plan_files():
        if task.delete_files:  # the product never writes delete files: a table someone else changed
            raise TableError(f"{task.file.file_path} has delete files in the table: it is not the product's; "
                             "rebuild it (the iceberg_table job, rebuild: true)")
        files.append(task.file.file_path)
    if not files:
        return spark.createDataFrame([], SPARK_DDL)
    return item_frame(spark, [(s3, f) for f in sorted(files)], _file_batches, SPARK_DDL)


def _file_batches(item):
    """Runs on an executor: one data file of the table, read over the S3 API, typed as SPARK_DDL."""
    import pyarrow.parquet as pq
    from pyarrow import fs

    from matos_dagster.reader import SPARK_SCHEMA

    s3, path = item
    u = urlsplit(s3.endpoint)
    s3fs = fs.S3FileSystem(access_key=s3.access_key, secret_key=s3.secret_key, region=s3.region,
                           endpoint_override=u.netloc, scheme=u.scheme, force_virtual_addressing=False)
    table = pq.read_table(path.removeprefix("s3://"), filesystem=s3fs)
    yield from table.select(SPARK_SCHEMA.names).cast(SPARK_SCHEMA).to_batches()


def metadata_location(tables: Tables, topic: str) -> str:
    return tables.table(topic, create=False).metadata_location

