"""The typed manifest (manifest.Manifest): every manifest reads and writes back to the same bytes."""

import json

import pytest
from hypothesis import given, strategies as st

from matos_dagster import manifest
from matos_dagster.ranges import OffsetRange
from matos_dagster.store import canonical_json

ts = st.one_of(st.none(), st.integers(0, 2**63 - 1))


@st.composite
def objects(draw, start: int, end: int, largest: bool):
    out, pos = [], start
    while pos < end and draw(st.booleans()):
        last = draw(st.integers(pos, end - 1))
        o = {"name": f"x/part-{pos:020d}.parquet", "records": draw(st.integers(0, last - pos + 1)),
             "bytes": draw(st.integers(0, 2**40)), "md5": "0" * 32, "first_offset": pos, "last_offset": last,
             "min_timestamp": draw(ts), "max_timestamp": draw(ts), "record_bytes": draw(st.integers(0, 2**40))}
        if largest:
            o["largest_record_bytes"] = draw(st.integers(0, 2**31))
        out.append(o)
        pos = last + 1
    return out


@given(st.integers(0, 2**62), st.integers(1, 1000), st.booleans(), st.data())
def test_every_built_manifest_reads_and_writes_back_to_the_same_bytes(start, span, largest, data):
    r = OffsetRange("orders", 3, start, start + span)
    doc = manifest.build(r, "parquet", data.draw(objects(r.start, r.end, largest)))
    m = manifest.Manifest.from_json(json.loads(canonical_json(doc)))
    assert canonical_json(m.to_json()) == canonical_json(doc)
    assert m.range == r and len(m.objects) == len(doc["objects"])


def test_a_manifest_written_before_largest_record_bytes_keeps_its_bytes():
    doc = manifest.build(OffsetRange("t", 0, 0, 10), "jsonl", [
        {"name": "a", "records": 10, "bytes": 5, "md5": "m", "first_offset": 0, "last_offset": 9,
         "min_timestamp": None, "max_timestamp": 7}])
    old = {k: v for k, v in doc.items() if k != "largest_record_bytes"}
    assert "largest_record_bytes" not in old["objects"][0]
    assert canonical_json(manifest.Manifest.from_json(old).to_json()) == canonical_json(old)


@pytest.mark.parametrize("doc, why", [
    ([], "a manifest is a JSON object"),
    ({"topic": "t"}, "lacks its list of objects"),
    ({"objects": [], "topic": "t"}, "not of version"),
    ({"objects": [], "surprise": 1}, "keys no manifest has: ['surprise']"),
])
def test_what_is_not_a_manifest_is_refused_naming_what_is_wrong(doc, why):
    with pytest.raises(manifest.ManifestError, match=__import__("re").escape(why)):
        manifest.Manifest.from_json(doc)


def test_a_wrong_type_or_range_is_refused():
    good = manifest.build(OffsetRange("t", 0, 0, 10), "parquet", [])
    with pytest.raises(manifest.ManifestError, match="start must be an integer"):
        manifest.Manifest.from_json({**good, "start": "0"})
    with pytest.raises(manifest.ManifestError, match="does not name a range: .*needs start < end"):
        manifest.Manifest.from_json({**good, "start": 10})


def test_a_compacted_ranges_manifest_keeps_what_it_replaces():
    doc = {**manifest.build(OffsetRange("t", 0, 0, 20), "parquet", []), "replaces": [[0, 10], [10, 20]]}
    m = manifest.Manifest.from_json(doc)
    assert m.replaces == [[0, 10], [10, 20]] and canonical_json(m.to_json()) == canonical_json(doc)


def test_a_version_1_manifest_still_reads_back_to_its_bytes_and_a_newer_version_is_refused_naming_the_fix():
    # Version 2 changed only how Parquet objects are cut into row groups (records.ROW_GROUP_BYTES):
    # manifests of version 1 are read as they are, and keep their bytes.
    doc = manifest.build(OffsetRange("t", 0, 0, 10), "parquet", [
        {"name": "a", "records": 10, "bytes": 5, "md5": "m", "first_offset": 0, "last_offset": 9,
         "min_timestamp": 1, "max_timestamp": 7, "largest_record_bytes": 3, "record_bytes": 20}])
    assert doc["version"] == manifest.VERSION == 2
    old = {**doc, "version": 1}
    m = manifest.Manifest.from_json(old)
    assert m.version == 1 and canonical_json(m.to_json()) == canonical_json(old)
    with pytest.raises(manifest.ManifestError, match="manifest version 3 is not one this matos-dagster reads "
                                                     r"\(1, 2\): upgrade matos-dagster"):
        manifest.Manifest.from_json({**doc, "version": 3})
