"""Everything pending of a topic in one command (and one launch in the UI), as ONE Dagster backfill.

A `dagster dev` (what `make run` / `dg dev` run: the UI and the daemon) runs the backfills here:
the feature is the daemon's, and the UI's launch is sent to its webserver. The topic's batch thresholds are never reached, so its lag sensor
requests nothing and every range is archived by the backfill alone. Those daemon tests take
minutes (the daemon's backfill iterations, a run per range): `slow`, in `make test-all`, on both
storages of the instance (sqlite, and PostgreSQL on a real server). What the command submits, its
refusals, and the archive's offset order (a run archives the pending ranges below its own first)
are checked without a daemon in `make test`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter
from helpers import check_archive, manifests, new_instance, produce, read_archive, read_kafka, user_env
from test_daemon import Dev, dev_project, instance_on, running_dev, shows_log, wait_for

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.jobs import backfill as bf
from matos_dagster.resources import SwiftResource

BIN = Path(sys.executable).parent
LOGS = PROJECT_ROOT / "test-output" / "test_backfill"
GROUP = "matos-archiver"
MATOS = [sys.executable, "-m", "matos_dagster"]


def pytest_generate_tests(metafunc):
    """The daemon tests on both storages, as tests/end_to_end/test_daemon.py's ON_POSTGRES: the local instance
    (dagster.yaml: sqlite), then the production one (dagster.postgres.yaml) on a real PostgreSQL
    server (tests/pg_server.py). Module-scoped: every sqlite test on one `dagster dev`, then the
    PostgreSQL ones on another (test ids end in [sqlite] or [postgres])."""
    if "daemon" in metafunc.fixturenames:
        metafunc.parametrize("daemon", ["sqlite", "postgres"], indirect=True, scope="module")


@pytest.fixture(scope="module")
def daemon(request, tmp_path_factory, kafka, kafka_server, swift_server, connect_server):
    """`dagster dev` (webserver and daemon, as `make run`), for a topic whose lag sensor stays out of it."""
    storage = request.param
    with contextlib.ExitStack() as stack:
        instance_env = instance_on(stack, storage, "backfill")
        tmp = tmp_path_factory.mktemp(f"backfill-{storage}")
        topic = f"bf-{uuid.uuid4().hex[:8]}"
        # Ranges of at most 50 offsets; batch thresholds never reached: the lag sensor requests nothing.
        env = dev_project(
            tmp, f"topics:\n  - name: {topic}\n    group: {GROUP}\n"
                 "    batch: {records: 100000000, age_s: 100000000, max_range_records: 50}\n",
            f"bf-{uuid.uuid4().hex[:8]}", instance_env,
            MATOS_KAFKA_BOOTSTRAP_SERVERS=kafka_server.bootstrap_servers,
            MATOS_SWIFT_AUTH_URL=swift_server.auth_url,
            MATOS_SPARK_MASTER=connect_server.url)
        log = LOGS / ("dagster-dev.log" if storage == "sqlite" else f"dagster-dev-{storage}.log")
        d = stack.enter_context(running_dev(env, topic, log, instance_env))
        wait_for("the backfill daemon heartbeats", lambda: bf.daemon_running(d.instance), 300, d, every=2)
        yield d


def matos(d: Dev, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*MATOS, *args], env=d.env, cwd=cwd or PROJECT_ROOT, capture_output=True, text=True,
                          timeout=1200)


def backfills_of(d: Dev, topic: str):
    return [b for b in d.instance.get_backfills() if b.tags.get(bf.TOPIC_TAG) == topic]


def archived_exactly_once(d: Dev, kafka, partitions: int) -> None:
    """Every record of the topic in exactly one range, the committed offsets at the log end, and
    per topic partition the ranges archived in offset order (each manifest written after those below it)."""
    swift = SwiftResource(auth_url=d.env["MATOS_SWIFT_AUTH_URL"], user="test:tester", key="testing",
                          container=d.container)
    with swift.store() as store:
        stamps = _manifest_stamps(store, d.topic)
        assert archived_in_offset_order(stamps), sorted(stamps.items())
        committed = check_archive(kafka, store, d.topic, GROUP)
        # A partition that never had a record is never committed (None): nothing in it to archive.
        committed = {p: 0 if c is None else c for p, c in committed.items()}
        assert committed == {p: h for p, (_, h) in kafka.watermarks(d.topic, list(range(partitions))).items()}
        for p in range(partitions):
            rows = [r for m in sorted(manifests(store, d.topic), key=lambda m: m["start"]) if m["partition"] == p
                    for r in read_archive(store, m)]
            assert rows == read_kafka(kafka, d.topic, p)


@pytest.mark.slow  # the daemon's backfill iterations (every 30 s) and a run per range: minutes
def test_one_command_archives_everything_pending_as_one_backfill_the_daemon_runs(daemon, kafka):
    d = daemon
    kafka.create_topic(d.topic, 2)
    produce(kafka, d.topic, [(b"k", f"v{i}".encode(), [], 0) for i in range(80)]
            + [(b"k", f"w{i}".encode(), [], 1) for i in range(30)])
    p = matos(d, "backfill", d.topic, "--wait")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:] + d.tail()
    # Two ranges of partition 0 (at most 50 offsets each), one of partition 1.
    keys = [OffsetRange(d.topic, 0, 0, 50).key, OffsetRange(d.topic, 0, 50, 80).key, OffsetRange(d.topic, 1, 0, 30).key]
    (one,) = backfills_of(d, d.topic)
    lines = p.stdout.splitlines()
    assert lines[0] == f"backfill {one.backfill_id}: 3 range(s) of {d.topic}, {keys[0]} .. {keys[-1]}"
    assert [line for line in lines if line.startswith("archived ")] == [
        f"archived {k}: {n} records (run {r.run_id})" for k, n, r in zip(keys, (50, 30, 30), sorted(
            d.instance.get_runs(filters=RunsFilter(tags={bf.BACKFILL_TAG: one.backfill_id})),
            key=lambda r: r.tags["dagster/partition"]))]
    assert lines[-1] == f"backfill {one.backfill_id}: COMPLETED_SUCCESS"
    # One run per range, each its own partition, all in this one backfill (its page in the UI).
    runs = d.instance.get_runs(filters=RunsFilter(tags={bf.BACKFILL_TAG: one.backfill_id}))
    assert sorted(r.tags["dagster/partition"] for r in runs) == keys
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs)
    assert one.status.value == "COMPLETED_SUCCESS" and one.title == f"{d.topic}: 3 pending ranges"
    archived_exactly_once(d, kafka, 2)

    # Nothing pending now: no second backfill, nothing launched.
    again = matos(d, "backfill", d.topic)
    assert again.returncode == 0 and again.stdout.strip() == f"nothing pending in {d.topic}: no backfill"
    assert len(backfills_of(d, d.topic)) == 1


def _manifest_stamps(store, topic: str) -> dict[tuple[int, int, int], float]:
    """Swift's X-Timestamp of each range's manifest (set when it was PUT): the order ranges were archived in."""
    from matos_dagster.core.swift import layout
    _, items = store._conn.get_container(store.container, full_listing=True)
    out = {}
    for item in items:
        if item["name"].endswith("/" + layout.MANIFEST):
            doc = json.loads(store.get(item["name"]))
            if doc["topic"] == topic:
                stamp = store._conn.head_object(store.container, item["name"])["x-timestamp"]
                out[(doc["partition"], doc["start"], doc["end"])] = float(stamp)
    return out


def archived_in_offset_order(stamps: dict[tuple[int, int, int], float]) -> bool:
    """Per topic partition, each range's manifest was written after those of the ranges below it."""
    by_partition: dict[int, list[tuple[int, float]]] = {}
    for (p, start, _), t in stamps.items():
        by_partition.setdefault(p, []).append((start, t))
    return all([t for _, t in sorted(v)] == sorted(t for _, t in v) for v in by_partition.values())


def test_a_run_archives_the_pending_ranges_below_its_own_first_in_offset_order(
        tmp_path, kafka, new_topic, swift, spark_resource):
    """Issue 18.4's "in offset order per partition" whatever order Dagster starts a backfill's runs in:
    the run of range 3, first to have its turn, archives 1 and 2 (registered, pending) and then 3;
    the runs of 1 and 2 that come later only verify theirs, with the range's metadata from its manifest."""
    from dagster import materialize

    from matos_dagster.assets.archive import archive_asset
    from matos_dagster.core.swift import layout
    from matos_dagster.core.topics import TopicConfig
    from matos_dagster.core.verify import verify_topic
    from matos_dagster.resources import SparkResource

    topic = new_topic()
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(30)])
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    one, two, three = (OffsetRange(topic, 0, a, a + 10) for a in (0, 10, 20))
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        instance.add_dynamic_partitions(cfg.partitions_name, [one.key, two.key, three.key])
        result = materialize([archive_asset(cfg)], partition_key=three.key, instance=instance,
                             resources={"kafka": kafka, "swift": swift, "spark": spark_resource})
        (mat,) = result.asset_materializations_for_node(cfg.asset_name)
        assert mat.metadata["archived_first"].value == [one.key, two.key]
        assert mat.metadata["archived_first_records"].value == 20
        assert mat.metadata["records_written"].value == 10 and mat.metadata["committed_offset"].value == 30
        with swift.store() as store:
            stamps = _manifest_stamps(store, topic)
            assert sorted(stamps) == [(0, 0, 10), (0, 10, 20), (0, 20, 30)]
            assert stamps[(0, 0, 10)] < stamps[(0, 10, 20)] < stamps[(0, 20, 30)]  # 1, 2, 3: offset order
            docs = {(d["start"], d["end"]): d for d in manifests(store, topic)}

        # The runs of 1 and 2, when the queue starts them: archived already, so only verified (no Spark).
        nowhere = SparkResource(master="sc://127.0.0.1:9")
        for r in (one, two):
            later = materialize([archive_asset(cfg)], partition_key=r.key, instance=instance,
                                resources={"kafka": kafka, "swift": swift, "spark": nowhere}, raise_on_error=False)
            assert later.success, [e.message for e in later.all_events if e.is_failure]
            (m,) = later.asset_materializations_for_node(cfg.asset_name)
            doc = docs[(r.start, r.end)]
            assert m.metadata["already_archived"].value is True and m.metadata["records_written"].value == 0
            assert "archived_first" not in m.metadata  # nothing below it was pending
            assert {k: m.metadata[k].value for k in ("records", "bytes", "record_bytes", "objects", "start", "end",
                                                      "first_offset", "last_offset", "manifest")} == {
                "records": doc["records"], "bytes": doc["bytes"], "record_bytes": doc["record_bytes"],
                "objects": len(doc["objects"]), "start": r.start, "end": r.end, "first_offset": doc["first_offset"],
                "last_offset": doc["last_offset"], "manifest": layout.manifest_name(
                    layout.join(swift.prefix, cfg.prefix), r)}
    with swift.store() as store:
        assert _manifest_stamps(store, topic) == stamps, "a manifest was written twice"
        assert check_archive(kafka, store, topic, cfg.group) == {0: 30}
        report = verify_topic(kafka, store, layout.join(store.params.prefix, cfg.prefix), cfg, sample=None)
        assert report.ok, report.render()


def test_the_command_records_one_backfill_of_exactly_the_pending_ranges(tmp_path, kafka, kafka_server, swift_server):
    """No daemon here (make test): what the command submits; the daemon's part is the slow test above."""
    topic = f"bfs-{uuid.uuid4().hex[:8]}"
    env = user_env(tmp_path, kafka_server, swift_server,
                   f"topics:\n  - name: {topic}\n    batch: {{max_range_records: 50}}\n",
                   container=f"bfs-{uuid.uuid4().hex[:8]}")
    kafka.create_topic(topic, 1)
    produce(kafka, topic, [(b"k", f"v{i}".encode(), [], 0) for i in range(80)])
    p = subprocess.run([*MATOS, "backfill", topic], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    keys = [OffsetRange(topic, 0, 0, 50).key, OffsetRange(topic, 0, 50, 80).key]
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        (one,) = instance.get_backfills()
        assert p.stdout.splitlines() == [
            f"backfill {one.backfill_id}: 2 range(s) of {topic}, {keys[0]} .. {keys[1]}",
            f"  progress in the UI: Runs -> Backfills -> {one.backfill_id}",
            f"  no Dagster daemon runs for {env['DAGSTER_HOME']} now: the backfill starts when one does "
            "(make run, or dg dev)"]
        assert one.status.value == "REQUESTED" and one.title == f"{topic}: 2 pending ranges"
        assert one.tags[bf.TOPIC_TAG] == topic
        asset = "archive_" + topic.replace("-", "_")
        assert instance.get_dynamic_partitions(f"{asset}_ranges") == keys
        target = one.asset_backfill_data.target_subset
        assert [k.to_user_string() for k in target.asset_keys] == [asset]
        assert sorted(target.get_partitions_subset(AssetKey(asset)).get_partition_keys()) == keys
        # Only the command's own run (the backfill job), no archive run: the daemon launches those.
        assert [r.job_name for r in instance.get_runs()] == [bf.JOB]


@pytest.mark.slow  # a second backfill through the daemon: minutes on a loaded 2-core machine
def test_the_ui_launch_of_the_backfill_job_archives_what_came_since(daemon, kafka):
    """The Launchpad's `backfill` job (here by `dg launch`, as the UI's Launch does): the same backfill."""
    d = daemon
    if not backfills_of(d, d.topic):
        kafka.create_topic(d.topic, 2)
    produce(kafka, d.topic, [(b"k", f"x{i}".encode(), [], 1) for i in range(40)])
    config = d.log.parent / "backfill.yaml"
    config.write_text(f"ops: {{add_range_keys: {{config: {{topic: {d.topic}}}}}}}\n")
    before = {b.backfill_id for b in backfills_of(d, d.topic)}
    p = subprocess.run([str(BIN / "dg"), "launch", "--job", "backfill", "-c", str(config)], env=d.env,
                       cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (new,) = [b for b in backfills_of(d, d.topic) if b.backfill_id not in before]
    ended = wait_for("the backfill ends", lambda: bf.backfill_status(d.instance, new.backfill_id)[1] or None,
                     900, d, every=2)
    assert ended
    assert d.instance.get_backfill(new.backfill_id).status.value == "COMPLETED_SUCCESS"
    archived_exactly_once(d, kafka, 2)


# What the asset page sends (dagster-webserver's bundle): the partitions' statuses, from which
# Materialize... -> "Missing" selects, and LaunchPartitionBackfill with the asset and those keys.
PARTITION_STATUSES = """
query AssetPartitionStatuses($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode { assetPartitionStatuses { ... on DefaultPartitionStatuses {
      materializedPartitions unmaterializedPartitions failedPartitions materializingPartitions } } }
  }
}"""
LAUNCH_BACKFILL = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PartitionKeysNotFoundError { message }
    ... on UnauthorizedError { message }
    ... on PythonError { message }
  }
}"""


@pytest.mark.slow  # a backfill through the daemon: minutes on a loaded 2-core machine
def test_the_uis_backfill_of_the_missing_ranges_archives_each_once_as_one_backfill(daemon, kafka):
    """Issue 18.4's one click: Assets -> archive_<topic> -> Materialize... -> "Missing" -> Launch
    backfill, as the webserver of `dagster dev` receives it, for the ranges `add-ranges` added."""
    d = daemon
    kafka.create_topic(d.topic, 2)  # False (and nothing done) after the tests above
    produce(kafka, d.topic, [(b"k", f"u{i}".encode(), [], 0) for i in range(70)]
            + [(b"k", f"t{i}".encode(), [], 1) for i in range(20)])
    known = set(d.instance.get_dynamic_partitions(f"{d.asset}_ranges"))
    added = matos(d, "add-ranges", d.topic)
    assert added.returncode == 0, added.stdout[-3000:] + added.stderr[-3000:]
    new_keys = sorted(set(d.instance.get_dynamic_partitions(f"{d.asset}_ranges")) - known)
    assert len(new_keys) >= 3, new_keys  # 70 records in partition 0 (ranges of at most 50), 20 in 1

    statuses = d.graphql(PARTITION_STATUSES, {"key": {"path": [d.asset]}})
    statuses = statuses["assetNodeOrError"]["assetPartitionStatuses"]
    missing = sorted(statuses["unmaterializedPartitions"] + statuses["failedPartitions"])
    assert missing == new_keys, statuses  # what was archived before is materialised
    before = {b.backfill_id for b in d.instance.get_backfills()}
    params = {"tags": [], "assetSelection": [{"path": [d.asset]}], "partitionNames": missing, "fromFailure": False}
    got = d.graphql(LAUNCH_BACKFILL, {"backfillParams": params})["launchPartitionBackfill"]
    assert got["__typename"] == "LaunchBackfillSuccess", got
    backfill_id = got["backfillId"]
    assert {b.backfill_id for b in d.instance.get_backfills()} - before == {backfill_id}  # one backfill

    with shows_log(d):
        wait_for("the backfill ends", lambda: bf.backfill_status(d.instance, backfill_id)[1], 1200, d, every=2)
    assert d.instance.get_backfill(backfill_id).status.value == "COMPLETED_SUCCESS"
    runs = d.instance.get_runs(filters=RunsFilter(tags={bf.BACKFILL_TAG: backfill_id}))
    # One run per range, each range once, every one succeeded.
    assert sorted(r.tags["dagster/partition"] for r in runs) == missing
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs), [(r.run_id, r.status) for r in runs]
    archived_exactly_once(d, kafka, 2)
    statuses = d.graphql(PARTITION_STATUSES, {"key": {"path": [d.asset]}})["assetNodeOrError"]
    assert not statuses["assetPartitionStatuses"]["unmaterializedPartitions"], statuses  # nothing missing now


def _ui_backfill(d: Dev, keys: list[str]) -> str:
    """The asset page's Launch backfill of these keys, sent to the webserver; waits until it ends; its id."""
    params = {"tags": [], "assetSelection": [{"path": [d.asset]}], "partitionNames": keys, "fromFailure": False}
    got = d.graphql(LAUNCH_BACKFILL, {"backfillParams": params})["launchPartitionBackfill"]
    assert got["__typename"] == "LaunchBackfillSuccess", got
    with shows_log(d):
        wait_for("the backfill ends", lambda: bf.backfill_status(d.instance, got["backfillId"])[1], 1200, d, every=2)
    assert d.instance.get_backfill(got["backfillId"]).status.value == "COMPLETED_SUCCESS"
    return got["backfillId"]


def _materialization(d: Dev, key: str):
    from dagster import AssetRecordsFilter

    (rec,) = d.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(d.asset), asset_partitions=[key]), limit=1).records
    return rec.asset_materialization


@pytest.mark.slow  # two backfills through the daemon: minutes
def test_under_the_daemon_the_run_of_a_later_range_archives_the_pending_ones_below_it_first(daemon, kafka):
    """The order the queue starts runs in cannot put a later range into Swift before an earlier one:
    here the later range's run is the only one started (a backfill of that key alone), with the
    earlier ranges registered and pending; it archives them first, and their own runs (a second
    backfill) only verify them."""
    d = daemon
    kafka.create_topic(d.topic, 2)  # False (and nothing done) after the tests above
    produce(kafka, d.topic, [(b"k", f"o{i}".encode(), [], 1) for i in range(120)])
    known = set(d.instance.get_dynamic_partitions(f"{d.asset}_ranges"))
    added = matos(d, "add-ranges", d.topic, "--partition", "1")
    assert added.returncode == 0, added.stdout[-3000:] + added.stderr[-3000:]
    new_keys = sorted(set(d.instance.get_dynamic_partitions(f"{d.asset}_ranges")) - known)
    assert len(new_keys) == 3, new_keys  # 120 records, ranges of at most 50 offsets
    *below, last = new_keys

    _ui_backfill(d, [last])
    mat = _materialization(d, last)
    assert mat.metadata["archived_first"].value == below, mat.metadata
    _ui_backfill(d, below)
    for key in below:
        meta = _materialization(d, key).metadata
        assert meta["already_archived"].value is True and meta["records_written"].value == 0, meta
    archived_exactly_once(d, kafka, 2)


def test_an_unknown_topic_or_waiting_without_a_daemon_is_refused_in_one_line_and_nothing_is_recorded(tmp_path):
    (tmp_path / "topics.yaml").write_text("topics:\n  - name: demo\n")
    home = new_instance(tmp_path / "dagster_home")
    env = {**os.environ, "DAGSTER_HOME": str(home), "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml")}
    p = subprocess.run([*MATOS, "backfill", "nosuch"], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stdout == ""
    assert p.stderr.strip() == (f"python -m matos_dagster backfill: topic 'nosuch' is not in the topics file "
                                f"{tmp_path / 'topics.yaml'} (MATOS_TOPICS_FILE): no name or pattern matches it; it has demo")
    # --wait with no daemon for the instance: the backfill would never start, so none is made.
    p = subprocess.run([*MATOS, "backfill", "demo", "--wait"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert p.stderr.strip() == (f"python -m matos_dagster backfill: no Dagster daemon runs for the instance in {home}, "
                                "so the backfill would never start; start one (make run, or dg dev) and run this again")
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == [] and instance.get_backfills() == []
