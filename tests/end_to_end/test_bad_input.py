"""Bad input: every case fails with a clear, actionable error, writes no manifest, commits no offset.

Most cases go through the archive asset, as the UI, the sensor and the CLI run it (the key
is added as a dynamic partition first: Dagster itself refuses keys it does not know), or
through the `add_ranges` job. After each failure the test's Swift container holds no
manifest (usually nothing at all) and the consumer group has committed no offset on any
topic. Wrong SASL credentials and TLS failures are in tests/end_to_end/test_security.py, which has the
secured listeners.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from dagster import DagsterInstance, instance_for_test, materialize
from helpers import produce, read_archive, read_kafka
from matos_dev.stack.process import free_port
from matos_dev.stack.swift import SwiftServer
from swiftclient.exceptions import ClientException

from matos_dagster.assets.archive import archive_asset
from matos_dagster.cli.common import failure
from matos_dagster.core import topics as topics_file
from matos_dagster.core.archive.range_run import RangeRefused, archive_range
from matos_dagster.core.kafka.errors import UnknownTopic
from matos_dagster.core.offsets.ranges import KEY_FORM, OffsetRange
from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.topics import TopicConfig, TopicsFileError
from matos_dagster.jobs.ranges import add_ranges_job
from matos_dagster.resources import KafkaResource, SwiftResource

CACHE = Path(os.environ.get("MATOS_DEVSTACK_DIR", PROJECT_ROOT / ".devstack")) / "cache"

pytestmark = pytest.mark.timeout(600)

READER = "test:reader"  # a tempauth user of AUTH_test without .admin: only ACLs let it in
READER_KEY = "reader-" + uuid.uuid4().hex[:8]


def config(topic: str, **kw) -> TopicConfig:
    return TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}", **kw)


def changed(swift: SwiftResource, **kw) -> SwiftResource:
    fields = dict(auth_url=swift.auth_url, user=swift.user, key=swift.key, container=swift.container,
                  prefix=swift.prefix, retries=swift.retries)
    return SwiftResource(**{**fields, **kw})


def key(topic: str, partition: int, start: int, end: int) -> str:
    return f"{topic}:p{partition:05d}:{start:020d}-{end:020d}"


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance


# -- what a failure must leave behind: nothing -----------------------------------------------


def committed(kafka, cfg: TopicConfig) -> dict[int, int]:
    """The group's committed offsets on the topic, where it has any (a topic Kafka lacks has none)."""
    try:
        parts = kafka.partitions(cfg.name)
    except UnknownTopic:
        return {}
    return {p: o for p, o in kafka.committed(cfg.name, parts, cfg.group).items() if o is not None}


def swift_names(swift: SwiftResource, as_user: tuple[str, str] | None = None) -> list[str] | None:
    """Every object in the resource's container; None when the container does not exist."""
    params = swift.params()
    if as_user:
        params = dataclasses.replace(params, user=as_user[0], key=as_user[1])
    conn = params.connect()
    try:
        _, items = conn.get_container(swift.container, full_listing=True)
    except ClientException as e:
        if e.http_status == 404:
            return None
        raise
    finally:
        conn.close()
    return [i["name"] for i in items]


def assert_nothing_written(kafka, swift, cfg: TopicConfig, objects_allowed: bool = False, as_user=None):
    names = swift_names(swift, as_user) or []
    assert not [n for n in names if n.endswith("/_manifest.json")], names
    if not objects_allowed:
        assert names == [], names
    assert committed(kafka, cfg) == {}


def failure_text(error) -> str:
    """The messages of a Dagster step failure and its causes, outermost first."""
    parts = []
    while error is not None:
        parts.append(error.message)
        error = error.cause
    return "\n".join(parts)


def materialize_key(instance, cfg: TopicConfig, partition_key: str, kafka, swift, spark_resource,
                    result_of: list | None = None) -> str:
    """Materialise the archive asset for `partition_key`; it must fail. Returns the error text
    (and appends the run's result to `result_of`, if given)."""
    instance.add_dynamic_partitions(cfg.partitions_name, [partition_key])
    result = materialize(
        [archive_asset(cfg)], partition_key=partition_key, instance=instance, raise_on_error=False,
        resources={"kafka": kafka, "swift": swift, "spark": spark_resource},
    )
    if result_of is not None:
        result_of.append(result)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    return failure_text(failure.step_failure_data.error)


def add_ranges(instance, cfg: TopicConfig, kafka, **config):
    job = add_ranges_job([cfg])
    result = job.execute_in_process(
        run_config={"ops": {"add_range_keys": {"config": {"topic": cfg.name, **config}}}},
        # These refusals come before add_ranges reads the archive: a Swift that is nowhere shows it.
        instance=instance, resources={"kafka": kafka, "swift": SwiftResource(
            auth_url=f"http://127.0.0.1:{free_port()}/auth/v1.0", container="never-asked", retries=0)},
        raise_on_error=False,
    )
    logs = [e.user_message for e in instance.all_logs(result.run_id)]
    return result, logs


def add_ranges_refused(instance, cfg: TopicConfig, kafka, **config) -> str:
    before = instance.get_dynamic_partitions(cfg.partitions_name)
    result, _ = add_ranges(instance, cfg, kafka, **config)
    assert not result.success
    assert instance.get_dynamic_partitions(cfg.partitions_name) == before  # no key added
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    return failure_text(failure.step_failure_data.error)


# -- partition keys -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad, why", [
    ("not-a-key", "malformed"),
    ("{t}:p0:0-10", "malformed"),  # digits not padded
    ("{t}:p00000:-0000000000000000001-00000000000000000005", "malformed"),  # a negative offset
    ("{t}:p00000:00000000000000000010-00000000000000000005", "needs start < end, got [10, 5)"),
    ("{t}:p00000:00000000000000000005-00000000000000000005", "needs start < end, got [5, 5)"),
])
def test_a_malformed_key_is_refused_through_the_asset_showing_the_form(
    kafka, swift, spark_resource, instance, new_topic, bad, why
):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 20)
    cfg = config(topic)
    bad = bad.format(t=topic)
    text = materialize_key(instance, cfg, bad, kafka, swift, spark_resource)
    assert repr(bad) in text and KEY_FORM in text and why in text, text
    assert swift_names(swift) is None  # refused before Swift was even asked
    assert_nothing_written(kafka, swift, cfg)


def test_a_key_of_another_topic_is_refused(kafka, swift, spark_resource, instance, new_topic):
    topic, other = new_topic(), new_topic()
    produce(kafka, other, [(b"k", b"v", [])] * 5)
    cfg = config(topic)
    text = materialize_key(instance, cfg, key(other, 0, 0, 5), kafka, swift, spark_resource)
    assert f"is not of topic {topic!r}" in text, text
    assert_nothing_written(kafka, swift, cfg)


# -- offsets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("start, end, message", [
    (10, 5, "an offset range needs start < end, got [10, 5)"),
    (5, 5, "an offset range needs start < end, got [5, 5)"),
    (-5, -1, "offsets must be >= 0 (or -1), got start=-5 end=-1"),
    (0, -7, "offsets must be >= 0 (or -1), got start=0 end=-7"),
    (0, 21, "end 21 is past the log end offset 20"),
])
def test_add_ranges_refuses_bad_offsets_and_adds_no_key(kafka, instance, new_topic, start, end, message):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 20)
    cfg = config(topic)
    text = add_ranges_refused(instance, cfg, kafka, partition=0, start=start, end=end)
    assert message in text, text
    assert committed(kafka, cfg) == {}


def test_a_range_past_the_log_end_is_refused_through_the_asset(kafka, swift, spark_resource, instance, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 20)
    cfg = config(topic)
    text = materialize_key(instance, cfg, key(topic, 0, 10, 25), kafka, swift, spark_resource)
    assert "ends past the log end offset 20" in text and "nothing can be archived beyond 20 yet" in text, text
    assert_nothing_written(kafka, swift, cfg)


# -- topics and partitions --------------------------------------------------------------------------


def test_an_unknown_topic_is_refused(kafka, swift, spark_resource, instance):
    cfg = config(f"no-such-topic-{uuid.uuid4().hex[:8]}")
    text = materialize_key(instance, cfg, key(cfg.name, 0, 0, 10), kafka, swift, spark_resource)
    assert f"Kafka topic {cfg.name!r} does not exist" in text, text
    assert_nothing_written(kafka, swift, cfg)

    assert f"Kafka topic {cfg.name!r} does not exist" in add_ranges_refused(instance, cfg, kafka)
    text = add_ranges_refused(instance, cfg, kafka, topic="not-in-the-topics-file")
    assert "topic 'not-in-the-topics-file' is not in the topics file" in text and cfg.name in text, text


def test_an_unknown_partition_is_refused(kafka, swift, spark_resource, instance, new_topic):
    topic = new_topic(partitions=2)
    cfg = config(topic)
    text = materialize_key(instance, cfg, key(topic, 7, 0, 10), kafka, swift, spark_resource)
    assert f"Kafka topic {topic!r} has no partition 7: it has partitions 0..1" in text, text
    assert_nothing_written(kafka, swift, cfg)
    assert f"topic {topic!r} has no partition 7; it has [0, 1]" in add_ranges_refused(instance, cfg, kafka, partition=7)


# -- unreachable or refusing services -----------------------------------------------------------------


def test_an_unreachable_broker_fails_in_bounded_time_naming_the_setting(kafka, swift, spark, spark_resource,
                                                                        instance, new_topic):
    # `spark`: the session is up before the clock starts (the asset opens it before asking Kafka).
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 5)
    cfg = config(topic)
    nowhere = KafkaResource(bootstrap_servers=f"127.0.0.1:{free_port()}", timeout_s=3)
    text = materialize_key(instance, cfg, key(topic, 0, 0, 5), nowhere, swift, spark_resource)
    # Bounded by the resource's timeout: the error is the end of that wait, naming it.
    assert "did not answer within 3s" in text and "Connection refused" in text, text
    assert "check MATOS_KAFKA_BOOTSTRAP_SERVERS and that the brokers run" in text
    assert_nothing_written(kafka, swift, cfg)

    text = add_ranges_refused(instance, cfg, nowhere)
    assert "MATOS_KAFKA_BOOTSTRAP_SERVERS" in text and "did not answer within 3s" in text, text


def test_an_unreachable_swift_fails_in_bounded_time_naming_the_setting(kafka, spark_resource, instance, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 5)
    cfg = config(topic)
    nowhere = SwiftResource(auth_url=f"http://127.0.0.1:{free_port()}/auth/v1.0", user="test:tester",
                            key="testing", retries=1, timeout_s=5)
    text = materialize_key(instance, cfg, key(topic, 0, 0, 5), kafka, nowhere, spark_resource)
    assert "could not be reached: check MATOS_SWIFT_AUTH_URL and that Swift runs" in text, text
    assert committed(kafka, cfg) == {}  # Kafka was not even asked


def test_wrong_swift_credentials_name_the_settings(kafka, swift, spark_resource, instance, new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 5)
    cfg = config(topic)
    wrong = changed(swift, key="not-the-key")
    text = materialize_key(instance, cfg, key(topic, 0, 0, 5), kafka, wrong, spark_resource)
    assert "the credentials were refused: check MATOS_SWIFT_USER and MATOS_SWIFT_KEY" in text, text
    assert "not-the-key" not in text
    assert_nothing_written(kafka, swift, cfg)  # looked at with the right key: no container


@pytest.fixture(scope="module")
def acl_swift(tmp_path_factory):
    """A Swift whose tempauth also has test:reader, a user of AUTH_test without .admin.

    SwiftServer's `users` are all admins; tempauth reads `user_<account>_<user>` from the
    proxy's [DEFAULT] too, which is where `extra_proxy_conf` goes, so that is how a plain
    user is made. Such a user gets only what container ACLs grant it.
    """
    server = SwiftServer(tmp_path_factory.mktemp("swift-acl"), CACHE, proxy_port=free_port(),
                         extra_proxy_conf={"user_test_reader": READER_KEY})
    server.start()
    yield server
    server.stop()


def test_a_container_the_user_may_only_read_is_refused_naming_the_acl(kafka, spark_resource, instance, new_topic,
                                                                      acl_swift):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"v", [])] * 20)
    cfg = config(topic)
    admin = (acl_swift.user, acl_swift.key)
    reader = SwiftResource(auth_url=acl_swift.auth_url, user=READER, key=READER_KEY,
                           container=f"ro-{uuid.uuid4().hex[:8]}", retries=1)

    # No container and no ACL: the reader may not even look.
    text = materialize_key(instance, cfg, key(topic, 0, 0, 20), kafka, reader, spark_resource)
    assert "the user may not read container" in text and reader.container in text, text
    assert "MATOS_SWIFT_CONTAINER" in text
    assert swift_names(reader, as_user=admin) is None

    # Readable but not writable (an ACL of the kind an operator sets): the first object is refused.
    conn = acl_swift.connection()
    conn.put_container(reader.container, headers={"X-Container-Read": READER})
    conn.close()
    text = materialize_key(instance, cfg, key(topic, 0, 0, 10), kafka, reader, spark_resource)
    assert "the user may not write object" in text and f"ACLs on container {reader.container!r}" in text, text
    assert_nothing_written(kafka, reader, cfg, as_user=admin)


# -- records and topics --------------------------------------------------------------------------------


def test_a_record_above_max_record_bytes_fails_its_range_naming_the_offset(kafka, swift, spark_resource, instance,
                                                                           new_topic):
    topic = new_topic()
    produce(kafka, topic, [(b"k", b"small", [])] * 3 + [(b"k", b"x" * 5000, [])] + [(b"k", b"small", [])] * 3)
    cfg = config(topic, object_bytes=4096, max_record_bytes=2048)
    runs: list = []
    text = materialize_key(instance, cfg, key(topic, 0, 0, 7), kafka, swift, spark_resource, runs)
    assert f"record {topic}/0@3 is 5001 bytes, above the topic's max_record_bytes (2048)" in text, text
    assert "raise it in the topics file" in text
    # What `matos archive` prints of the failed run: the refusal, one line, no Spark worker's traceback.
    assert failure(runs[0]) == (f"record {topic}/0@3 is 5001 bytes, above the topic's max_record_bytes (2048); "
                                "raise it in the topics file to archive it")
    assert_nothing_written(kafka, swift, cfg)


def test_an_empty_topic_adds_no_range_and_says_so_and_refuses_any_range(kafka, swift, spark_resource, instance,
                                                                       new_topic):
    topic = new_topic(partitions=2)
    cfg = config(topic)
    result, logs = add_ranges(instance, cfg, kafka)  # start -1, end -1: everything pending
    assert result.success and result.output_for_node("add_range_keys") == []
    assert instance.get_dynamic_partitions(cfg.partitions_name) == []
    assert f"{topic}/0: nothing pending at offset 0" in logs and f"{topic}/1: nothing pending at offset 0" in logs
    assert f"no range added: nothing is pending in {topic}, partitions [0, 1]" in logs

    assert "end 1 is past the log end offset 0" in add_ranges_refused(instance, cfg, kafka, partition=0, start=0, end=1)
    text = materialize_key(instance, cfg, key(topic, 0, 0, 1), kafka, swift, spark_resource)
    assert "ends past the log end offset 0" in text, text
    assert_nothing_written(kafka, swift, cfg)


@pytest.mark.parametrize("text, message", [
    ("topics: [", "is not valid YAML"),
    ("topics: []", "expected a mapping with a non-empty list `topics:`"),
    ("topics:\n  - name: a/b\n", "invalid Kafka topic name 'a/b': use 1-249 of the characters a-z A-Z 0-9 . _ -"),
    ("topics:\n  - name: '.'\n", "invalid Kafka topic name '.'"),
    ("topics:\n  - name: '..'\n", "invalid Kafka topic name '..'"),
    ("topics:\n  - name: caf\u00e9\n", "invalid Kafka topic name"),
    (f"topics:\n  - name: {'t' * 250}\n", "invalid Kafka topic name"),
    ("topics:\n  - name: t\n    colour: red\n", "unknown key 'colour'"),
    ("topics:\n  - name: t\n    slice_records: 0\n", "slice_records must be > 0, got 0"),
    ("topics:\n  - name: t\n    format: csv\n", "format must be one of ('parquet', 'jsonl'), got 'csv'"),
    ("topics:\n  - name: t\n    object_bytes: 1024\n    max_record_bytes: 2048\n",
     "max_record_bytes (2048) must not exceed object_bytes (1024)"),
    ("topics:\n  - name: t\n    prefix: ../elsewhere\n", "must be a relative path without '..' or '//'"),
    (f"topics:\n  - name: t\n    prefix: {'p' * 950}\n", "above Swift's limit of 1024 (before MATOS_SWIFT_PREFIX)"),
    ("topics:\n  - name: t\n  - name: t\n", "gives the same asset name"),
])
def test_an_invalid_topics_file_is_refused_at_load_naming_the_file_and_entry(tmp_path, text, message):
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    with pytest.raises(TopicsFileError) as e:
        topics_file.load(path)
    assert str(e.value).startswith(f"{path}") and message in str(e.value), str(e.value)


# -- names Swift cannot hold -----------------------------------------------------------------------------


def test_the_longest_kafka_topic_name_archives_and_names_too_long_for_swift_are_refused_first(
    kafka, swift, spark_resource, instance
):
    # Every name Kafka allows ([a-zA-Z0-9._-]{1,249}, not "." or "..") is a valid Swift path
    # segment; what Swift can refuse is the length of the whole object name (1024 bytes).
    topic = ("long-" + uuid.uuid4().hex).ljust(249, "x")
    admin = kafka.admin()
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    produce(kafka, topic, [(b"k", f"v{i}".encode(), []) for i in range(5)])
    cfg = config(topic)
    assert cfg.asset_name == "archive_" + topic.replace("-", "_")

    instance.add_dynamic_partitions(cfg.partitions_name, [key(topic, 0, 0, 5)])
    result = materialize([archive_asset(cfg)], partition_key=key(topic, 0, 0, 5), instance=instance,
                         resources={"kafka": kafka, "swift": swift, "spark": spark_resource})
    assert result.success
    with swift.store() as store:
        (name,) = [n for n in swift_names(swift) if n.endswith("_manifest.json")]
        assert len(name) < 1024
        assert read_archive(store, store.get_json(name)) == read_kafka(kafka, topic, 0)

        # Swift does refuse a longer name...
        with pytest.raises(ClientException) as e:
            store._conn.put_object(store.container, "n" * 1025, b"x")
        assert e.value.http_status == 400

    # ...so a prefix that would make one is refused before Kafka or Swift is touched.
    long_prefix = changed(swift, prefix="p" * 700, container=f"long-{uuid.uuid4().hex[:8]}")
    other = config(topic)
    with long_prefix.store() as store:
        with pytest.raises(RangeRefused, match=r"would be \d+ bytes long, above Swift's limit of 1024") as e:
            archive_range(OffsetRange(topic, 0, 0, 5), other, kafka, store, spark_resource.spark_session)
        assert "shorten MATOS_SWIFT_PREFIX or the topic's prefix" in str(e.value)
    assert_nothing_written(kafka, long_prefix, other)


def test_the_cli_refuses_a_topic_name_swift_cannot_take_before_any_run(tmp_path):
    (tmp_path / "topics.yaml").write_text("topics:\n  - name: orders/eu\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "MATOS_TOPICS_FILE": str(tmp_path / "topics.yaml")}
    (tmp_path / "ranges.yaml").write_text("ops: {add_range_keys: {config: {topic: orders/eu}}}\n")
    p = subprocess.run([str(Path(sys.executable).parent / "dagster"), "job", "execute", "-m",
                        "matos_dagster.definitions", "-j", "add_ranges", "-c", "ranges.yaml"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert (f"{tmp_path / 'topics.yaml'}: topics[0] (orders/eu): invalid Kafka topic name 'orders/eu'"
            in p.stdout + p.stderr), p.stderr[-3000:]
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == []
