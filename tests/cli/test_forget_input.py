"""`matos forget` on the real stack: bad input is one line and changes nothing; a key the archive
does not hold is erased zero times, said, and recorded."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from helpers import produce, user_env

from matos_dagster.core.archive.range_run import archive_range
from matos_dagster.core.erase import keys
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.topics import TopicConfig

SECRET = "an erasure key for the tests, 32b"
MATOS = [sys.executable, "-m", "matos_dagster", "forget"]


def archived(kafka, swift, spark, topic: str) -> TopicConfig:
    cfg = TopicConfig(name=topic, group=f"g-{uuid.uuid4().hex[:8]}")
    produce(kafka, topic, [(f"k{i}".encode(), b"v", []) for i in range(10)], partition=0)
    with swift.store() as store:
        archive_range(OffsetRange(topic, 0, 0, 10), cfg, kafka, store, spark)
    return cfg


def everything(swift) -> list[tuple[str, str]]:
    with swift.store() as store:
        return sorted((o["name"], o["hash"]) for o in store.list(store.params.prefix + "/"))


@pytest.mark.slow  # four CLI processes; each refusal's line is tested without them (tests/core/erase/test_erase_keys.py)
def test_an_unknown_topic_an_empty_keys_file_a_malformed_key_or_a_key_value_of_raw_keys_is_one_line_and_changes_nothing(
        kafka, swift, spark, new_topic, kafka_server, swift_server, tmp_path):
    cfg = archived(kafka, swift, spark, new_topic())
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {cfg.name}\n    group: {cfg.group}\n",
                   container=swift.container, **{keys.SETTING: SECRET})
    (tmp_path / "empty.txt").write_text("\n\n")
    (tmp_path / "bad.txt").write_text("customer-1\nbase64:not*base64\n")
    before = everything(swift)
    cases = {
        "no-such-topic": (["--topic", "no-such-topic", "--key", "customer-1"],
                          "--topic no-such-topic: no topic of the topics file that Kafka has matches it"),
        "empty": (["--topic", cfg.name, "--keys-file", str(tmp_path / "empty.txt")],
                  f"{tmp_path / 'empty.txt'} holds no key"),
        "malformed": (["--topic", cfg.name, "--keys-file", str(tmp_path / "bad.txt")],
                      f"{tmp_path / 'bad.txt'} line 2: after `base64:` give standard base64"),
        "raw keys": (["--topic", cfg.name, "--key-value", '{"id": 4711}'],
                     f"--key-value: topic {cfg.name!r} has key_format none, not registry-encoded"),
    }
    running = {name: subprocess.Popen([*MATOS, *args, "--reason", "t"], env=env, cwd=tmp_path, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for name, (args, _) in cases.items()}  # at once: each is a process start
    for name, proc in running.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and out == "", (name, out, err)
        assert err.splitlines() == [f"python -m matos_dagster forget: {err.split('forget: ', 1)[1].strip()}"], name
        assert cases[name][1] in err, (name, err)
        assert "4711" not in err and "not*base64" not in err  # a refusal never repeats a key
    assert everything(swift) == before  # no request, no ledger, no object changed


def test_a_key_the_archive_does_not_hold_is_erased_zero_times_said_and_recorded(
        kafka, swift, spark, new_topic, kafka_server, swift_server, tmp_path):
    cfg = archived(kafka, swift, spark, new_topic())
    env = user_env(tmp_path, kafka_server, swift_server, f"topics:\n  - name: {cfg.name}\n    group: {cfg.group}\n",
                   container=swift.container, **{keys.SETTING: SECRET})
    data = [o for o in everything(swift) if "/_" not in o[0][len("kafka"):]]

    p = subprocess.run([*MATOS, "--topic", cfg.name, "--key", "nobody", "--reason", "ticket 12"], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)

    assert p.returncode == 0, p.stderr[-3000:]
    assert ": 0 record(s) erased" in p.stdout
    with swift.store() as store:
        (record,) = [o["name"] for o in store.list(layout.join(store.params.prefix, "_erasure", "records") + "/")]
        doc = json.loads(store.get(record))
        assert doc["records_erased"] == 0 and doc["reason"] == "ticket 12"
        assert doc["topics"][cfg.name]["0"]["records_erased"] == 0
        assert list(store.list(layout.join(store.params.prefix, "_erasure", "requests") + "/")) == []
    assert [o for o in everything(swift) if o in data] == data  # every object as it was
