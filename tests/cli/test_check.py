"""`matos check`, the preflight: one line per part, OK or what to change, exit status 0 or 1."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid

from helpers import user_env

from matos_dagster.resources import SwiftResource

MATOS = [sys.executable, "-m", "matos_dagster", "check"]


def check(env, cwd) -> tuple[int, dict[str, tuple[str, str]]]:
    p = subprocess.run(MATOS, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert p.stderr == "", p.stderr
    parts = {}
    for line in p.stdout.splitlines():
        part, status, text = line.split(None, 2)
        parts[part] = (status, text)
    assert list(parts) == ["settings", "topics", "kafka", "swift", "spark", "reader", "dagster"], p.stdout
    return p.returncode, parts


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_check_says_ok_for_each_part_of_a_working_setup_and_leaves_no_probe(tmp_path, kafka_server, swift_server,
                                                                            connect_server, new_topic):
    topic = new_topic(partitions=3)
    container = f"check-{uuid.uuid4().hex[:8]}"
    swift = SwiftResource(auth_url=swift_server.auth_url, user=swift_server.user, key=swift_server.key,
                          container=container)
    swift.store().close()  # the container exists, so the probe is written
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {topic}\n", container,
                   MATOS_SPARK_MASTER=connect_server.url)
    code, parts = check(env, tmp_path)
    assert code == 0, "\n".join(f"{k}: {v}" for k, v in parts.items())
    assert {status for status, _ in parts.values()} == {"OK"}, parts
    assert f"1 topic(s), 3 partitions, committed on 0: {topic} (3 partitions)" in parts["kafka"][1]
    assert f"container {container} writable (probe written, removed)" in parts["swift"][1]
    assert f"Spark Connect server {connect_server.url} answers" in parts["spark"][1]
    from matos_dagster.core.archive import native  # the same installation, asked in this process
    assert parts["reader"][1].startswith("native" if native.why_not() is None else "Python"), parts
    with swift.store() as store:
        assert list(store.list("")) == [], "the probe object was left behind"


def test_check_names_what_to_change_for_each_part_that_fails(tmp_path, kafka_server, swift_server):
    container = f"check-{uuid.uuid4().hex[:8]}"
    env = user_env(tmp_path, kafka_server, swift_server, "topics:\n  - name: no-such-topic\n", container,
                   MATOS_SWIFT_KEY="wrong", MATOS_SPARK_MASTER=f"sc://127.0.0.1:{dead_port()}")
    code, parts = check(env, tmp_path)
    assert code == 1
    assert parts["settings"][0] == parts["topics"][0] == parts["dagster"][0] == "OK", parts
    assert parts["kafka"] == ("FAIL", f"topic 'no-such-topic' of the topics file does not exist on "
                              f"{kafka_server.bootstrap_servers}: create it, or take it out of the topics file"), parts
    assert parts["swift"][0] == "FAIL" and "MATOS_SWIFT_KEY" in parts["swift"][1], parts
    assert parts["spark"][0] == "FAIL" and "MATOS_SPARK_MASTER" in parts["spark"][1], parts


def test_check_refuses_bad_settings_first_and_asks_nothing_else(tmp_path, kafka_server, swift_server):
    env = user_env(tmp_path, kafka_server, swift_server, "topics:\n  - name: demo\n", "c",
                   MATOS_KAFKA_TIMEOUT_S="abc", MATOS_SWIFT_VERIFY_TLS="yes")
    code, parts = check(env, tmp_path)
    assert code == 1
    assert parts["settings"] == ("FAIL", "MATOS_KAFKA_TIMEOUT_S is 'abc': it takes a whole number of seconds, 1 or "
                                 "more; MATOS_SWIFT_VERIFY_TLS is 'yes': it takes one of true, false")
    assert all(status == "SKIPPED" for part, (status, _) in parts.items() if part != "settings"), parts
