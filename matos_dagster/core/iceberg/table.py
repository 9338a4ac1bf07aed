"""Keeping a topic's archive as an Apache Iceberg table: the catalog, the table (created, its
properties brought up to date), the archived ranges added from its watermark on (`sync`),
compaction's replacements (`replace`), and the table rebuilt from the manifests or compared with them.

The table's data files are the archive's own Parquet objects (`add_files`: nothing is copied);
its metadata lives beside them under `<MATOS_SWIFT_PREFIX>/_iceberg/<topic>/` (a `_` name, which
Hive-style readers of the archive skip). What goes in and when is plan.py's rule; this module does
the I/O: the catalog (pyiceberg; an embedded sqlite `SqlCatalog` by default) and Swift's listings
through archived.py. Old snapshots go by expiry.py; reading the table is queries.py's, and the runs'
steps (archive, compaction) are hooks.py's.

A typed topic's objects carry typed columns after the raw ones (core/schemas/typed.py): the
commit that adds them first evolves the table's schema to hold them (`union_by_name`: columns
added, struct fields added, types widened; every added field optional), in the same Iceberg
commit, so DuckDB and Spark query their fields in place (`value_data.customer.id`); a file
without them (older, untyped) reads them as null. Untyped topics' tables are SCHEMA's alone.

The archive's truth stays the manifests in Swift: the table can always be rebuilt from them
(`rebuild`) and compared with them (`check`). No Dagster imports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa

from matos_dagster.core import faults, settings
from matos_dagster.core.iceberg import days, expiry
from matos_dagster.core.iceberg import plan as iceberg_plan
from matos_dagster.core.iceberg.access import S3, catalog_properties, s3_for
from matos_dagster.core.iceberg.expiry import Expiry
from matos_dagster.core.iceberg.plan import Step, TableError
from matos_dagster.core.iceberg.queries import marks_of, table_files
from matos_dagster.core.records import unify
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.archived import RANGE, PartitionArchive, archived_partitions
from matos_dagster.core.swift.manifest import Manifest
from matos_dagster.core.swift.store import Store

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


class Tables:
    """The catalog and the tables of one archive (one Swift container and prefix)."""

    def __init__(self, store: Store, s3: S3 | None = None, catalog=None):
        self.store = store
        self.s3 = s3 or s3_for(store)
        self.namespace = settings.get("MATOS_ICEBERG_NAMESPACE") or store.container
        self.root = layout.iceberg_root(store.params.prefix)
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
            from matos_dagster.core.records.schema import SCHEMA
            self.catalog.create_namespace_if_not_exists(self.namespace)
            try:
                t = self.catalog.create_table(ident, schema=SCHEMA, location=self.location(topic),
                                              properties=TABLE_PROPERTIES)
                with t.update_spec() as spec:
                    spec.add_identity("partition")
                    days.add_day_field(spec)
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
        if not days.has_day_field(t.spec()):
            # A table made before it was partitioned by day: its spec evolves, in a commit of its own
            # (no snapshot). Its files stay under the spec they were added with (read by their
            # bounds); files added from now on are each of one day. Refused: another run did it.
            from pyiceberg.exceptions import CommitFailedException

            try:
                with t.update_spec() as spec:
                    days.add_day_field(spec)
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

    def sync(self, prefix: str, topic: str, partition: int, say: Callable[[str], None] = log.info,
             table: str | None = None) -> list[Step]:
        """Add the partition's archived ranges from the table's watermark on, one commit a step;
        the steps committed. Repairs a crash between a manifest and its commit, at any history.
        `table`: the table's name, by default the topic's (a later incarnation's has its own: hooks.py)."""
        from pyiceberg.exceptions import CommitFailedException

        archive = PartitionArchive(self.store, prefix, topic, partition)
        topic = table or topic  # below: the table's name
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

    def replace(self, topic: str, doc: Manifest, table: str | None = None) -> bool:
        """After compaction's switch: the compacted range's objects replace, in one commit, the table's
        files of the ranges it contains. Idempotent (False: nothing to do), so it also repairs a crash
        between the switch and this commit when called again before the replaced folders are deleted.
        Also an erasure's rewritten range (core/erase/table.py): its objects now, none if all went.
        `table`: the table's name, by default the topic's (hooks.table_name)."""
        from pyiceberg.exceptions import CommitFailedException

        topic = table or topic  # below: the table's name
        for _ in range(COMMIT_TRIES):
            t = self.table(topic)
            marks = marks_of(t)
            if marks.get(doc.partition, -1) < doc.end:
                return False  # not in the table yet: catching up adds it (replacing below the watermark)
            present = table_files(t, doc.partition, doc.start, doc.end)
            drop = iceberg_plan.covering(((p, lo, hi) for p, (lo, hi, _, _) in present.items()), doc.start, doc.end)
            want = [self.url(o.name) for o in doc.objects]
            if sorted({self.source(topic, p) for p in drop}) == sorted(want):
                return False
            step = Step(doc.partition, marks[doc.partition], tuple(o.name for o in doc.objects), doc.records,
                        [(doc.start, doc.end)], (doc.start, doc.end), iceberg_plan.is_typed(doc))
            try:
                self._commit(t, step, marks, {p: present[p][3] for p in drop})
            except CommitFailedException:
                continue
            for p in drop:  # the replaced objects' copies by day: the table's own, referenced no more
                if self.source(topic, p) != p:
                    self.store.delete(p.removeprefix(self.url("")))
            return True
        raise TableError(f"{doc.topic}/{doc.partition}: the Iceberg commit of compacted range [{doc.start}, {doc.end}) "
                         "kept failing; the next compaction run retries it")

    def expire(self, t) -> Expiry:
        """Expire table `t`'s old snapshots once a batch has piled up, and delete the metadata files only
        they used (expiry.py's `expire`); what it did."""
        return expiry.expire(t)

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
        footers = {self.url(n): days.footer(t.io, self.url(n)) for n in step.adds}  # each read once, for both uses
        typed = typed_columns(t, footers) if step.typed else []
        files = self.day_files(t, footers)  # before the transaction: a retried commit writes the same copies
        with t.transaction() as tx:
            if tx.table_metadata.name_mapping() is None:  # what add_files sets: Parquet without field ids
                tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                     tx.table_metadata.schema().name_mapping.model_dump_json()})
            missing = {k: v for k, v in TABLE_PROPERTIES.items()
                       if k.startswith("write.metadata.") and k not in tx.table_metadata.properties}
            if missing:  # a table made before these properties: they bound its metadata files too
                tx.set_properties(**missing)
            if typed:  # the files' typed columns, in the table before the files (the name mapping follows)
                with tx.update_schema() as update:
                    update.union_by_name(pa.schema(typed))
            snap = tx.update_snapshot(snapshot_properties=iceberg_plan.summary(marks))
            with (snap.overwrite() if drop else snap.merge_append()) as producer:
                for f in (drop or {}).values():
                    producer.delete_data_file(f)
                for f in parquet_files_to_data_files(t.io, tx.table_metadata, iter(files)):
                    producer.append_data_file(f)
            # The snapshot's manifests are in Swift now, the catalog not yet switched to them.
            faults.at("table-written")

    def day_files(self, t, footers: dict) -> list[str]:
        """The table's files for these objects ({URL: Parquet footer}): an object of one day itself, any
        other its copies by day (days.py), written now (the same bytes again if a commit is retried)."""
        out = []
        table_dir = layout.join(self.root, t.name()[-1])
        for url, footer in footers.items():
            if days.one_day(footer):
                out.append(url)
                continue
            name = url.removeprefix(self.url(""))
            folder = days.copies_dir(table_dir, name)
            for day, data in sorted(days.split(self.store.get(name)).items()):
                copy = layout.join(folder, f"{day}.parquet")
                self.store.put(copy, data)
                out.append(self.url(copy))
        return out

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
        files = table_files(t)
        in_table: dict[str, int] = {}  # records per archive object, its copies by day summed
        for path, (_, _, n, _) in files.items():
            source = self.source(topic, path)
            in_table[source] = in_table.get(source, 0) + n
        out = Comparison(topic, table_records=sum(in_table.values()))
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
            if expected[path] != in_table[path]:
                out.problems.append(f"{path}: {in_table[path]} records in the table, {expected[path]} in its manifest")
        out.files = len(files)
        return out

    def source(self, topic: str, path: str) -> str:
        """The archive object (URL) a table file is: itself, or the object a copy by day was cut from."""
        name = days.source_of(layout.join(self.root, topic), path.removeprefix(self.url("")))
        return path if name is None else self.url(name)


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


def typed_columns(t, footers: dict) -> list[pa.Field]:
    """The typed columns of these Parquet files ({path: footer}), each in one type across them
    (records/unify.py) and optional, as an added Iceberg column must be; [] for untyped files."""
    schemas = []
    for path, footer in footers.items():
        schema = footer.schema.to_arrow_schema()
        nulls = [c.name for c in unify.typed_fields(schema) if _has_null(c.type)]
        if nulls:
            raise TableError(f"{path} has typed column(s) {', '.join(nulls)} of Arrow's null type (no record of "
                             "the object decoded): an Iceberg table of format version 2 has no such type, so the "
                             "object cannot be added to it; the archive itself holds it")
        schemas.append(schema)
    if not schemas:
        return []
    return [unify.nullable(c) for c in unify.typed_fields(unify.unify(schemas, t.name()[-1]))]


def _has_null(t: pa.DataType) -> bool:
    if pa.types.is_null(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_null(f.type) for f in t)
    if pa.types.is_map(t):
        return _has_null(t.key_type) or _has_null(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_null(t.value_type)
    return False


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


def metadata_location(tables: Tables, topic: str) -> str:
    return tables.table(topic, create=False).metadata_location

