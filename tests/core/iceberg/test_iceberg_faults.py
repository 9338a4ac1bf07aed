"""A real run killed around its Iceberg commit (issue 16), runs committing to one table at once, and
the expiry of old snapshots over Swift's S3 API (issue 36): the table holds every record once, and
expiry deletes what it says, no more, retrying the deletes Swift refused.

Each kill is a SIGKILL of a process archiving a range (MATOS_FAULT, range_run.py's and table.py's
fault points), a client of the session's Spark Connect server as the runs of `make run` are. After
it the table is behind the archive (killed before its commit) or up to date (killed after it), never
ahead and never twice: the next run, a rerun of the same range as the sensor requests a failed one or
the partition's next range, leaves the table holding exactly the manifests' objects (the check), and
every archived record once.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter

import pytest
from helpers import killed_run, produce, read_kafka
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import load_file_io
from pyiceberg.table import Table as PyIcebergTable
from test_iceberg import as_rows
from test_iceberg_expiry import batch

from matos_dagster.core import faults
from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.iceberg import days as iceberg_days
from matos_dagster.core.iceberg import expiry
from matos_dagster.core.iceberg.plan import summary
from matos_dagster.core.iceberg.queries import marks_of, table_files
from matos_dagster.core.iceberg.table import NO_PYICEBERG_RETRY, Tables
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.layout import PENDING_DELETES
from matos_dagster.core.topics import TopicConfig


@pytest.fixture
def tables_on(monkeypatch, tmp_path):
    """Tables kept by the archive runs (this process's and the killed ones'), in a sqlite catalog of the test's own."""
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    return monkeypatch

def assert_table_is_the_archive(store, cfg: TopicConfig, kafka, end: int) -> None:
    """The table holds exactly the manifests' objects up to `end`, and every record below `end` once."""
    tables = Tables(store)
    table = tables.table(cfg.name, create=False)
    assert marks_of(table) == {0: end}
    report = tables.check(layout.join(store.params.prefix, cfg.prefix), cfg.name)
    assert report.ok, report.problems
    assert report.table_records == end
    assert as_rows(table.scan().to_arrow()) == read_kafka(kafka, cfg.name, 0, 0, end)


def test_a_run_killed_before_or_after_its_table_commit_leaves_the_table_repaired_by_its_rerun_exactly_once(
        kafka, kafka_server, swift, connect_server, spark, new_topic, tables_on):
    topic = new_topic()
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode(), []) for i in range(90)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    second, third = OffsetRange(topic, 0, 30, 60), OffsetRange(topic, 0, 60, 90)
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)

        # Killed after its manifest and offset commit, before its table commit: the table is behind.
        killed_run(second, cfg, kafka_server, swift, connect_server, "after-commit")
        assert store.get_json(layout.manifest_name(prefix, second)) is not None
        assert kafka.committed(topic, [0], cfg.group) == {0: 60}
        assert_table_is_the_archive(store, cfg, kafka, 30)
        # The sensor requests the failed range again: archived and committed, so only verified, and
        # its table commit is made now.
        again = archive_range(second, cfg, kafka, store, spark)
        assert again.already_archived
        assert_table_is_the_archive(store, cfg, kafka, 60)

        # Killed right after its table commit: the table is up to date; the rerun adds nothing.
        killed_run(third, cfg, kafka_server, swift, connect_server, "after-table")
        assert_table_is_the_archive(store, cfg, kafka, 90)
        snapshot = Tables(store).table(topic, create=False).current_snapshot().snapshot_id
        again = archive_range(third, cfg, kafka, store, spark)
        assert again.already_archived
        table = Tables(store).table(topic, create=False)
        assert table.current_snapshot().snapshot_id == snapshot  # no commit at all, so no range twice
        assert_table_is_the_archive(store, cfg, kafka, 90)


@pytest.mark.slow
def test_a_run_killed_inside_its_table_commit_is_repaired_by_the_partitions_next_range(
        kafka, kafka_server, swift, connect_server, spark, new_topic, tables_on):
    """Killed with the new snapshot's manifests written to Swift but the catalog not switched to them:
    those files are orphans nobody reads, and the next range's run adds both ranges in one commit."""
    topic = new_topic()
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode(), []) for i in range(90)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)
        before = set(table_files(Tables(store).table(topic, create=False)))
        killed_run(OffsetRange(topic, 0, 30, 60), cfg, kafka_server, swift, connect_server, "table-written")
        assert kafka.committed(topic, [0], cfg.group) == {0: 60}
        assert set(table_files(Tables(store).table(topic, create=False))) == before
        assert_table_is_the_archive(store, cfg, kafka, 30)
        done = archive_range(OffsetRange(topic, 0, 60, 90), cfg, kafka, store, spark)
        assert any("added 2 ranges ([30, 60), [60, 90))" in n for n in done.notes), done.notes
        assert_table_is_the_archive(store, cfg, kafka, 90)


# --------------------------------------------------------------------------- runs committing at once


class ForcedConflict:
    """Two threads, "winner" and "loser", each keeping one topic's table, made to collide for certain.

    The loser, at its first commit, stops where it has loaded the table and written its new snapshot's
    manifests but not yet switched the catalog to them (table.py's `table-written` point) and waits
    there until the winner has committed; the winner waits to commit until the loser stands there. So
    the loser's commit starts from a table that has changed under it: the catalog must refuse it
    (CommitFailedException), and what the product does next is what is under test.
    """

    TIMEOUT_S = 240

    def __init__(self, monkeypatch):
        self.loser_loaded, self.winner_committed = threading.Event(), threading.Event()
        self.refused: list[str] = []  # the threads whose commit the catalog refused, in order
        self.failures: list[BaseException] = []
        do_commit = PyIcebergTable._do_commit

        # Counted where the catalog answers, so that a refusal is seen whoever retries after it.
        def counted_commit(table, *args, **kwargs):
            try:
                do_commit(table, *args, **kwargs)
            except CommitFailedException:
                self.refused.append(threading.current_thread().name)
                raise
            if threading.current_thread().name == "winner":
                self.winner_committed.set()

        monkeypatch.setattr(PyIcebergTable, "_do_commit", counted_commit)
        monkeypatch.setattr(faults, "at", self._at)

    def _at(self, point: str) -> None:
        if point != "table-written":
            return
        me = threading.current_thread().name
        if me == "loser" and not self.loser_loaded.is_set():
            self.loser_loaded.set()
            assert self.winner_committed.wait(self.TIMEOUT_S), "the winner never committed"
        elif me == "winner":
            assert self.loser_loaded.wait(self.TIMEOUT_S), "the loser never got to its commit"

    def run(self, winner, loser) -> None:
        """Run both callables in their threads; re-raise what either raised."""

        def guarded(fn):
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported by the test's thread
                self.failures.append(e)
                self.loser_loaded.set()  # the other thread must not wait in vain
                self.winner_committed.set()

        threads = [threading.Thread(target=guarded, args=(fn,), name=name) for name, fn in
                   (("winner", winner), ("loser", loser))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.failures:
            raise self.failures[0]


def offsets_per_partition(table) -> dict[int, Counter]:
    """How many times the table holds each offset, per Kafka partition."""
    rows = table.scan(selected_fields=("partition", "offset")).to_arrow()
    out: dict[int, Counter] = {}
    for p, o in zip(rows["partition"].to_pylist(), rows["offset"].to_pylist()):
        out.setdefault(p, Counter())[o] += 1
    return out


def test_two_partitions_archived_at_once_whose_table_commits_conflict_hold_every_record_once(
        kafka, swift, spark, new_topic, tables_on, monkeypatch):
    """Partition 1's run commits to the table while partition 0's run stands between loading the table
    and committing: the catalog refuses partition 0's commit, and its run must load the table again and
    commit with partition 1's watermark kept, its own range added once."""
    topic = new_topic(partitions=2)
    produce(kafka, topic, ((f"k{i}".encode(), f"v{i}".encode(), [], i % 2) for i in range(120)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        Tables(store).table(topic)  # made beforehand: the runs' only conflict is the one forced below
        conflict = ForcedConflict(monkeypatch)

        def archive(partition):
            def go():
                with swift.store() as own:  # a Store is one connection: one per thread
                    archive_range(OffsetRange(topic, partition, 0, 60), cfg, kafka, own, spark)
            return go

        conflict.run(winner=archive(1), loser=archive(0))

        tables = Tables(store)
        table = tables.table(topic, create=False)
        assert marks_of(table) == {0: 60, 1: 60}  # the winner's watermark survived the loser's retry
        assert offsets_per_partition(table) == {p: Counter(range(60)) for p in (0, 1)}
        assert as_rows(table.scan().to_arrow()) == read_kafka(kafka, topic, 0, 0, 60) + read_kafka(kafka, topic, 1, 0, 60)
        # The partitions' next runs catch up from the watermarks: nothing is added again.
        assert [tables.sync(prefix, topic, p) for p in (0, 1)] == [[], []]
        table = tables.table(topic, create=False)
        assert offsets_per_partition(table) == {p: Counter(range(60)) for p in (0, 1)}
        report = tables.check(prefix, topic)
        assert report.ok and report.table_records == 120, report.problems
        assert conflict.refused == ["loser"]  # the conflict was forced, once, and overcome


def test_two_runs_catching_up_one_partition_at_once_add_its_range_once(
        kafka, swift, spark, new_topic, tables_on, monkeypatch):
    """A range left out of the table (its run killed before its table commit) and two runs of its
    partition catching up at once (the sensor's rerun of it and the next run, say): both plan to add
    it; the one whose commit the catalog refuses must plan again from the new watermark, and add nothing.
    pyiceberg's own retry would add it again as planned: the table is one an earlier version of the
    product made, without the property that turns that retry off, and the product's first run sets it."""
    topic = new_topic()
    produce(kafka, topic, ((None, f"v{i}".encode(), []) for i in range(60)))
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    with swift.store() as store:
        prefix = layout.join(store.params.prefix, cfg.prefix)
        tables = Tables(store)
        with tables.table(topic).transaction() as tx:  # as an earlier version made it
            tx.remove_properties(NO_PYICEBERG_RETRY)
        assert NO_PYICEBERG_RETRY not in tables.catalog.load_table(tables.identifier(topic)).properties
        archive_range(OffsetRange(topic, 0, 0, 30), cfg, kafka, store, spark)
        tables_on.setenv("MATOS_ICEBERG_TABLES", "false")  # what the killed run leaves: the table behind
        archive_range(OffsetRange(topic, 0, 30, 60), cfg, kafka, store, spark)
        tables_on.setenv("MATOS_ICEBERG_TABLES", "true")
        conflict = ForcedConflict(monkeypatch)
        added: dict[str, list] = {}

        def catch_up(name):
            def go():
                with swift.store() as own:
                    added[name] = [s.ranges for s in Tables(own).sync(prefix, topic, 0)]
            return go

        conflict.run(winner=catch_up("winner"), loser=catch_up("loser"))
        table = Tables(store).table(topic, create=False)
        assert offsets_per_partition(table) == {0: Counter(range(60))}
        assert as_rows(table.scan().to_arrow()) == read_kafka(kafka, topic, 0, 0, 60)
        assert marks_of(table) == {0: 60}
        assert added == {"winner": [[(30, 60)]], "loser": []}
        assert conflict.refused == ["loser"]  # the conflict was forced, once, and overcome
        assert table.properties[NO_PYICEBERG_RETRY] == "0"


# --------------------------------------------------------------------------- expiry over Swift's S3 API


def swift_names(store, table, folder: str = "") -> set[str]:
    """The objects under the table's location (or one of its folders), as Swift's own listing names them."""
    root = table.location().removeprefix(f"s3://{store.container}/").rstrip("/") + "/"
    return {o["name"] for o in store.list(root + folder)}


def name_of(store, path: str) -> str:
    return path.removeprefix(f"s3://{store.container}/")


@pytest.fixture
def small_batches(monkeypatch):
    """Expiry after a few commits, not hundreds: keep the newest snapshot, expire in batches of two.
    The tables are partitioned by Kafka partition alone: pyiceberg's own writes, which make these
    snapshots, compute a day partition only with pyiceberg-core (the product adds files, never writes)."""
    monkeypatch.setattr(expiry, "KEEP_SNAPSHOTS", 1)
    monkeypatch.setattr(expiry, "EXPIRE_BATCH", 2)
    monkeypatch.setattr(iceberg_days, "add_day_field", lambda spec: None)


def three_snapshots(table) -> None:
    """Two appends, then an overwrite of their records as one file (what compaction's replacement
    commits; pyiceberg makes it two snapshots, a delete and an append): the last snapshot no longer
    lists the appends' manifests."""
    for i in range(2):
        table.append(batch(i * 5), snapshot_properties=summary({0: i * 5 + 5}))
    table.overwrite(batch(0, 10), snapshot_properties=summary({0: 10}))


def test_expiry_over_swifts_s3_api_deletes_exactly_the_metadata_files_it_reports(swift, tables_on, small_batches):
    with swift.store() as store:
        tables = Tables(store)
        table = tables.table(f"expiry-{uuid.uuid4().hex[:8]}")
        three_snapshots(table)
        snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number)
        old, kept = snapshots[:-1], snapshots[-1:]
        # The files only the expired snapshots use: their manifest lists, and the manifests no kept
        # snapshot lists (the appends', which the overwrite replaced).
        live = {m.manifest_path for s in kept for m in s.manifests(table.io)}
        only_old = {s.manifest_list for s in old} | {m.manifest_path for s in old for m in s.manifests(table.io)} - live
        assert any(p.endswith("-m0.avro") for p in only_old)  # manifests as well as manifest lists
        before, data = swift_names(store, table), swift_names(store, table, "data/")

        expiry = tables.expire(table)

        after = swift_names(store, table)
        assert expiry.expired == len(old) and expiry.failed == () and expiry.retried == 0
        assert set(expiry.deleted) == only_old
        assert before - after == {name_of(store, p) for p in expiry.deleted}  # what it says, really gone
        # Nothing else changed but the expiry's own commit, and the empty "folder" object pyarrow's S3
        # filesystem writes after a delete, in case the folder lost its last file (zero bytes, read by nobody).
        written = after - before
        markers = {n for n in written if n.endswith("/")}
        (commit,) = written - markers
        assert commit.endswith(".metadata.json")
        assert markers <= {name_of(store, table.location()).rstrip("/") + "/metadata/"}
        assert swift_names(store, table, "data/") == data
        table = tables.table(table.name()[-1], create=False)
        assert [s.snapshot_id for s in table.snapshots()] == [kept[0].snapshot_id]
        assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == list(range(10))


def test_a_delete_swift_refuses_is_counted_logged_and_retried_by_the_next_expiry(
        swift, tables_on, small_batches, caplog):
    with swift.store() as store:
        tables = Tables(store)
        table = tables.table(f"expiry-{uuid.uuid4().hex[:8]}")
        three_snapshots(table)
        old = sorted(table.snapshots(), key=lambda s: s.sequence_number)[:-1]
        victim = old[0].manifest_list
        # Swift itself refuses the victim's delete: it is sent with a wrong S3 secret (403), the
        # other deletes with the table's own keys.
        refusing = load_file_io({**table.io.properties, "s3.secret-access-key": "not-the-secret"})
        allowed = table.io.delete
        table.io.delete = lambda path: (refusing.delete if path == victim else allowed)(path)

        with caplog.at_level(logging.INFO, logger="matos_dagster.core.iceberg.expiry"):
            expiry = tables.expire(table)

        assert expiry.expired == len(old) and expiry.failed == (victim,)
        assert victim not in expiry.deleted and len(expiry.deleted) >= 2
        assert name_of(store, victim) in swift_names(store, table)
        warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warned) == 1 and "1 of" in warned[0] and victim in warned[0], warned
        pending = layout.join(name_of(store, table.location()), PENDING_DELETES)
        assert store.get_json(pending) == {"paths": [victim]}

        # The next batch's expiry, with Swift accepting again: the victim goes with it.
        table = tables.table(table.name()[-1], create=False)
        for i in range(2):
            table.append(batch(10 + i * 5), snapshot_properties=summary({0: 15 + i * 5}))
        again = tables.expire(table)
        assert again.expired == 2 and again.failed == () and again.retried == 1
        assert victim in again.deleted
        assert name_of(store, victim) not in swift_names(store, table)
        assert store.get(pending) is None  # nothing left to retry
        assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == list(range(20))
