"""The archive, the reader and the restore on a Spark Connect server, as `make run` uses them.

Runs then are thin clients of one long-lived Spark: the same Spark tasks as on a classic
session (spark_tasks.py), without a driver JVM started per run.
"""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import check_archive, dagster, manifests, produce, read_archive, read_kafka, user_env
from samples import awkward_rows, config, fields

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.reader import read_dataframe, read_table
from matos_dagster.core.restore.plan import Request
from matos_dagster.core.restore.run import restore
from matos_dagster.resources import SparkResource, SwiftResource


@pytest.fixture
def connect(connect_server):
    resource = SparkResource(master=connect_server.url)
    yield resource.spark_session
    resource.teardown_after_execution(None)


def test_ranges_archived_over_spark_connect_equal_kafkas_records(kafka, swift, connect, new_topic):
    assert type(connect).__module__.startswith("pyspark.sql.connect")
    topic = new_topic(partitions=2)
    produce(kafka, topic, awkward_rows(400, 2))
    cfg = config(topic, slice_records=60, object_bytes=1024)  # several tasks, several objects a task
    with swift.store() as store:
        for p in range(2):
            done = archive_range(OffsetRange(topic, p, 0, 200), cfg, kafka, store, connect)
            assert done.slices == 4 and len(done.manifest["objects"]) > 4
            assert read_archive(store, done.manifest) == read_kafka(kafka, topic, p)
        assert check_archive(kafka, store, topic, cfg.group) == {0: 200, 1: 200}


def test_the_reader_and_the_restore_run_over_spark_connect(kafka, swift, connect, new_topic):
    topic = new_topic(partitions=2)
    produce(kafka, topic, awkward_rows(80, 2))
    cfg = config(topic, slice_records=10, object_bytes=512)
    with swift.store() as store:
        for p in range(2):
            archive_range(OffsetRange(topic, p, 0, 40), cfg, kafka, store, connect)
        df = read_dataframe(connect, swift.params(), "kafka", topic, start=5, end=35)
        rows = df.collect()
        expected = read_table(store, "kafka", topic, start=5, end=35)
        assert [(r["partition"], r["offset"], r["value"]) for r in rows] == list(
            zip(expected["partition"].to_pylist(), expected["offset"].to_pylist(), expected["value"].to_pylist()))

        target = new_topic(partitions=2)
        report = restore(Request(topic, "kafka", target=target), kafka, store, connect)
    assert report.records == 80
    for p in range(2):
        assert fields(read_kafka(kafka, target, p)) == fields(read_kafka(kafka, topic, p))


# Slow (make test-all): tests/end_to_end/test_dg.py's `dg launch` of a range, in `make test`, runs on
# this server and checks its log the same way; this one is the `dagster asset materialize` spelling.
@pytest.mark.slow
def test_a_dagster_cli_materialisation_runs_on_the_server(tmp_path, kafka, new_topic, kafka_server, swift_server,
                                                         connect_server):
    topic = new_topic()
    asset = "archive_" + topic.replace("-", "_")
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {topic}\n",
                   container=f"connect-{uuid.uuid4().hex[:8]}", MATOS_SPARK_MASTER=connect_server.url)
    produce(kafka, topic, ((b"k", b"v%d" % i, [], 0) for i in range(50)))
    (tmp_path / "ranges.yaml").write_text(json.dumps({"ops": {"add_range_keys": {"config": {"topic": topic}}}}))
    dagster(env, tmp_path, "job", "execute", "-m", "matos_dagster.definitions", "-j", "add_ranges", "-c", "ranges.yaml")
    jobs_before = connect_server.log_file.read_text().count("INFO DAGScheduler: Got job")

    dagster(env, tmp_path, "asset", "materialize", "-m", "matos_dagster.definitions", "--select", asset,
            "--partition", f"{topic}:p00000:{0:020d}-{50:020d}")

    server_log = connect_server.log_file.read_text()
    assert server_log.count("INFO DAGScheduler: Got job") > jobs_before  # the tasks ran on the server
    # The tasks' closures carry the clients' settings; the server's log must not show them.
    assert swift_server.auth_url not in server_log and kafka_server.bootstrap_servers not in server_log
    swift = SwiftResource(auth_url=env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                          container=env["MATOS_SWIFT_CONTAINER"])
    with swift.store() as store:
        assert [m["records"] for m in manifests(store, topic)] == [50]
        assert check_archive(kafka, store, topic, "matos-archiver") == {0: 50}
