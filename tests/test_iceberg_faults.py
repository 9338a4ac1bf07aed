"""A real run killed around its Iceberg commit (issue 16): the next run repairs the table, once.

Each kill is a SIGKILL of a process archiving a range (MATOS_FAULT, archive.py's and iceberg.py's
fault points), a client of the session's Spark Connect server as the runs of `make run` are. After
it the table is behind the archive (killed before its commit) or up to date (killed after it), never
ahead and never twice: the next run, a rerun of the same range as the sensor requests a failed one or
the partition's next range, leaves the table holding exactly the manifests' objects (the check), and
every archived record once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid

import pytest

from helpers import produce, read_kafka
from matos_dagster import layout
from matos_dagster.archive import archive_range
from matos_dagster.iceberg import Tables, marks_of, table_files
from matos_dagster.ranges import OffsetRange
from matos_dagster.settings import PROJECT_ROOT
from matos_dagster.topics import TopicConfig
from test_iceberg import as_rows


@pytest.fixture
def tables_on(monkeypatch, tmp_path):
    """Tables kept by the archive runs (this process's and the killed ones'), in a sqlite catalog of the test's own."""
    monkeypatch.setenv("MATOS_ICEBERG_TABLES", "true")
    monkeypatch.setenv("MATOS_ICEBERG_CATALOG", f"type=sql;uri=sqlite:///{tmp_path}/catalog.db")
    return monkeypatch

_RUN = """
import json, os, sys
from matos_dagster.archive import archive_range
from matos_dagster.ranges import OffsetRange
from matos_dagster.resources import KafkaResource, SparkResource, SwiftResource
from matos_dagster.topics import TopicConfig

a = json.loads(sys.argv[1])
kafka = KafkaResource(bootstrap_servers=a["bootstrap"], timeout_s=10)
swift = SwiftResource(auth_url=a["auth_url"], user=a["user"], key=os.environ["MATOS_SWIFT_KEY"],
                      container=a["container"], prefix="kafka", retries=2)
spark = SparkResource(master=a["spark"]).spark_session
with swift.store() as store:
    archive_range(OffsetRange(**a["range"]), TopicConfig(**a["topic"]), kafka, store, spark)
print("not killed")
"""


def killed_run(r: OffsetRange, cfg: TopicConfig, kafka_server, swift, connect_server, point: str) -> None:
    """Archive `r` in a process of its own, which MATOS_FAULT=<point> kills; fails unless it was killed there."""
    args = {"bootstrap": kafka_server.bootstrap_servers, "auth_url": swift.auth_url, "user": swift.user,
            "container": swift.container, "spark": connect_server.url, "range": dict(vars(r)),
            "topic": {"name": cfg.name, "group": cfg.group}}
    # The catalog and MATOS_ICEBERG_TABLES come from this process's environment (the tables_on fixture).
    env = {**os.environ, "MATOS_SWIFT_KEY": swift.key, "MATOS_FAULT": point}
    with tempfile.TemporaryFile("w+") as out:  # a file, not a pipe: nobody reads it while the run goes on
        proc = subprocess.Popen([sys.executable, "-c", _RUN, json.dumps(args)], env=env, cwd=PROJECT_ROOT,
                                stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            code = proc.wait(300)
        finally:
            if proc.poll() is None:  # over time: ours, by its PID
                proc.kill()
                proc.wait(30)
        out.seek(0)
        assert code == -signal.SIGKILL, f"the run was not killed at {point}: exit {code}\n{out.read()[-3000:]}"


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
