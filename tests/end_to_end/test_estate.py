"""An estate under the daemon (`make test-all`): 200 topics that one pattern of the topics file
matches, kept archived by one `dagster dev` at the default policy for a few minutes: every record
committed and archived exactly once, by a handful of runs, not a run per topic."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import NewTopic
from dagster import DagsterRunStatus
from helpers import check_archive, produce
from test_daemon import LOGS, dev_project, running_dev, shows_log, wait_for

from matos_dagster.core.kafka import many
from matos_dagster.resources import SwiftResource

TOPICS = 200
GROUP = "matos-archiver"


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_two_hundred_topics_under_the_daemon_have_every_record_committed_by_a_few_runs(
        tmp_path, kafka, kafka_server, swift_server, connect_server):
    prefix = f"estate-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i:03d}" for i in range(TOPICS)]
    admin = kafka.admin()  # must outlive the futures
    for f in admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names]).values():
        f.result(timeout=60)
    for n in names:
        produce(kafka, n, [(b"k", b"before the daemon", [])] * 20)
    container = f"estate-{uuid.uuid4().hex[:8]}"
    env = dev_project(tmp_path, f'topics:\n  - pattern: "{prefix}-.*"\n    time_window: none\n', container,
                      MATOS_KAFKA_BOOTSTRAP_SERVERS=kafka_server.bootstrap_servers,
                      MATOS_SWIFT_AUTH_URL=swift_server.auth_url, MATOS_SPARK_MASTER=connect_server.url)
    tps = [(n, 0) for n in names]

    def all_committed():
        ends = many.watermarks(kafka, tps)
        return many.committed(kafka, GROUP, tps) == {tp: high for tp, (_, high) in ends.items()}

    with running_dev(env, names[0], LOGS / "dagster-dev-estate.log") as dev, shows_log(dev):
        wait_for("the first backlog of every topic committed", all_committed, 900, dev, every=5)
        # Then traffic: a record into every topic every 20 s, for two minutes.
        for _ in range(6):
            for n in names:
                produce(kafka, n, [(b"k", b"while the daemon runs", [])])
            time.sleep(20)
        wait_for("every record committed", all_committed, 600, dev, every=5)
        runs = wait_for("the archive runs end", lambda: (rs := dev.instance.get_runs()) and all(
            r.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
            for r in rs) and rs, 300, dev)
    archive_runs = [r for r in runs if r.job_name == "archive_ranges"]
    assert all(r.status == DagsterRunStatus.SUCCESS for r in archive_runs), [(r.run_id, r.status) for r in archive_runs]
    assert len(archive_runs) < TOPICS // 5, f"{len(archive_runs)} runs for {TOPICS} topics"
    assert [r.job_name for r in runs if r.job_name != "archive_ranges"] == [], "only archive runs were launched"
    swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key=swift_server.key,
                          container=container)
    with swift.store() as store:
        for n in names:  # every offset in exactly one manifest, every object as the manifest says
            assert check_archive(kafka, store, n, GROUP) == {0: 26}
