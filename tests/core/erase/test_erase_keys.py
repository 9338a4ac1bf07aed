"""Keys as an operator gives them, their keyed hash, and the refusals: one line, never repeating a key."""

from __future__ import annotations

import pyarrow as pa
import pytest

from matos_dagster.cli.common import Refused
from matos_dagster.cli.forget import chosen_topics, gather_keys
from matos_dagster.core.erase import keys, ledger, versions
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.topic_set import TopicSet
from matos_dagster.core.topics import TopicConfig

SECRET = b"a test erasure key of 32 bytes.."


def test_a_key_is_its_text_or_the_bytes_of_its_hex_or_base64_form():
    assert keys.parse_key("customer-42") == b"customer-42"
    assert keys.parse_key("hex:00ff10") == b"\x00\xff\x10"
    assert keys.parse_key("base64:AP8Q") == b"\x00\xff\x10"


@pytest.mark.parametrize("given", ["hex:0g", "hex:abc", "base64:not base64!", ""])
def test_a_key_in_a_malformed_encoding_is_refused_in_one_line_that_does_not_repeat_it(given):
    with pytest.raises(keys.BadKey) as e:
        keys.parse_key(given)
    assert "\n" not in str(e.value) and (not given or given.split(":", 1)[1] not in str(e.value))


def test_an_empty_keys_file_is_refused(tmp_path):
    (tmp_path / "keys.txt").write_text("\n  \n")
    with pytest.raises(Refused, match="holds no key"):
        gather_keys([], str(tmp_path / "keys.txt"))
    with pytest.raises(Refused, match="no such file"):
        gather_keys([], str(tmp_path / "none.txt"))
    (tmp_path / "keys.txt").write_text("a\nhex:00\n\nbase64:AQ==\n")
    assert gather_keys(["b"], str(tmp_path / "keys.txt")) == [b"b", b"a", b"\x00", b"\x01"]


def test_the_erasure_key_is_required_and_long_enough():
    with pytest.raises(keys.BadKey, match="MATOS_ERASURE_KEY is not set"):
        keys.erasure_key("")
    with pytest.raises(keys.BadKey, match="give at least 16"):
        keys.erasure_key("short")
    assert keys.erasure_key("hex:" + "ab" * 16) == b"\xab" * 16


def test_the_keyed_hash_is_hmac_sha256_and_matches_only_its_keys():
    import hashlib
    import hmac

    assert keys.keyed_hash(SECRET, b"k") == hmac.new(SECRET, b"k", hashlib.sha256).hexdigest()
    m = keys.Matcher(SECRET, frozenset({keys.keyed_hash(SECRET, b"alice")}))
    assert m.mask(pa.array([b"alice", None, b"bob", b"alice"], pa.binary())).to_pylist() == [True, False, False, True]
    assert "alice" not in repr(m) and repr(SECRET) not in repr(m)


def test_a_writer_leaves_out_a_ledger_key_only_below_the_log_end_of_the_request():
    h = keys.keyed_hash(SECRET, b"alice")
    doc = {"topic": "t", "requests": {"r": {"key_id": keys.key_id(SECRET), "hashes": [h], "log_ends": {"0": 10}}}}
    assert ledger.leave(doc, 1, 0, SECRET.decode()) is None  # another partition
    assert ledger.leave(doc, 0, 10, SECRET.decode()) is None  # a range from the log end on
    leave = ledger.leave(doc, 0, 5, SECRET.decode())
    out = leave.mask(pa.array([b"alice", b"alice", b"bob", None], pa.binary()), pa.array([9, 10, 3, 4], pa.int64()))
    assert out.tolist() == [True, False, False, False]
    assert leave.hit(b"alice", 9) and not leave.hit(b"alice", 10) and not leave.hit(None, 1)
    with pytest.raises(ledger.LedgerError, match="another MATOS_ERASURE_KEY"):
        ledger.leave(doc, 0, 5, "x" * 32)


def test_a_topic_pattern_chooses_the_topics_of_the_topics_file_that_kafka_has():
    topics = TopicSet([TopicConfig(name="orders"), TopicConfig(name="orders-eu"), TopicConfig(name="clicks")])
    assert chosen_topics(["orders.*"], topics, ["clicks", "orders", "orders-eu", "other"]) == ["orders", "orders-eu"]
    with pytest.raises(Refused, match="--topic nope"):
        chosen_topics(["nope"], topics, ["orders"])


def test_an_erased_object_gets_a_name_no_archive_run_writes():
    d = layout.range_dir("kafka", OffsetRange("t", 0, 0, 10))
    first = layout.object_name(d, 3, "parquet")
    assert layout.erased_object_name(first) == first.replace(".parquet", ".e1.parquet")
    assert layout.erased_object_name(layout.erased_object_name(first)) == first.replace(".parquet", ".e2.parquet")
    assert layout.erased_object_name(layout.object_name(d, 3, "jsonl")).endswith(".e1.jsonl.gz")


def test_a_version_4_manifest_names_its_erased_offsets_inside_its_range():
    r = OffsetRange("t", 0, 0, 10)
    doc = manifest.build(r, "parquet", [], erased=[7, 2, 2])
    assert doc["version"] == 4 and doc["erased"] == [2, 7]
    assert manifest.Manifest.from_json(doc).to_json() == doc
    with pytest.raises(manifest.ManifestError, match="not all inside"):
        manifest.build(r, "parquet", [], erased=[10])
    with pytest.raises(manifest.ManifestError, match="list of offsets"):
        manifest.Manifest.from_json({**doc, "erased": ["2"]})


@pytest.mark.parametrize("headers, kept", [
    ({"x-versions-enabled": "True"}, "X-Versions-Enabled: true"),
    ({"x-versions-location": "old"}, "X-Versions-Location: old"),
    ({"x-history-location": "hist"}, "X-History-Location: hist"),
    ({"x-versions-enabled": "false", "x-container-object-count": "3"}, None),
    ({}, None),
])
def test_each_of_swifts_versioning_headers_is_what_keeps_old_versions(headers, kept):
    assert versions.versioning(headers) == kept
