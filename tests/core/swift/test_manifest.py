"""The typed manifest (manifest.Manifest): every manifest reads and writes back to the same bytes."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import manifest
from matos_dagster.core.swift.store import canonical_json

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
    assert doc["version"] == manifest.VERSION == 4
    old = {**doc, "version": 1}
    m = manifest.Manifest.from_json(old)
    assert m.version == 1 and canonical_json(m.to_json()) == canonical_json(old)
    with pytest.raises(manifest.ManifestError, match="manifest version 5 is not one this matos-dagster reads "
                                                     r"\(1, 2, 3, 4\): upgrade matos-dagster"):
        manifest.Manifest.from_json({**doc, "version": 5})


# -- build's refusals: an object set that would put an offset twice, or outside its range, in a manifest --


def obj(first: int, last: int, name: str | None = None) -> dict:
    return {"name": name or f"x/part-{first:020d}.parquet", "records": max(last - first + 1, 0), "bytes": 1,
            "md5": "0" * 32, "first_offset": first, "last_offset": last, "min_timestamp": None,
            "max_timestamp": None}


# The range is [10, 20) throughout; objects are (first offset, last offset), in the order given.
@pytest.mark.parametrize("spans", [
    pytest.param([(10, 14), (14, 19)], id="sharing-one-offset"),
    pytest.param([(10, 19), (12, 15)], id="one-inside-another"),
    pytest.param([(10, 14), (10, 14)], id="the-same-slice-twice"),
    pytest.param([(15, 19), (10, 16)], id="overlapping-listed-out-of-order"),
    pytest.param([(10, 11), (12, 13), (13, 19)], id="the-last-two-of-three"),
])
def test_build_refuses_objects_that_share_an_offset(spans):
    """A manifest never lists two objects holding one offset: that would be a slice archived twice,
    and a reader taking every object once would return its records twice."""
    objects = [obj(a, b, f"o{i}") for i, (a, b) in enumerate(spans)]
    with pytest.raises(manifest.ManifestError, match="overlap: a slice was archived twice"):
        manifest.build(OffsetRange("t", 0, 10, 20), "parquet", objects)


@pytest.mark.parametrize("first, last", [
    pytest.param(9, 15, id="starting-before-the-range"),
    pytest.param(15, 20, id="ending-at-the-range-end"),  # end is exclusive
    pytest.param(20, 25, id="wholly-after-the-range"),
    pytest.param(0, 5, id="wholly-before-the-range"),
    pytest.param(15, 14, id="last-before-first"),
])
def test_build_refuses_an_object_holding_offsets_outside_the_range(first, last):
    """Every object's offsets lie in the manifest's [start, end): the entry claims exactly its
    range, so an offset outside would be in two entries, or in one that does not claim it."""
    with pytest.raises(manifest.ManifestError, match=r"object bad holds offsets outside t/0\[10, 20\)"):
        manifest.build(OffsetRange("t", 0, 10, 20), "parquet", [obj(first, last, "bad")])


@pytest.mark.parametrize("spans", [
    pytest.param([(10, 19)], id="one-object-filling-the-range"),
    pytest.param([(10, 14), (15, 19)], id="adjacent-objects"),
    pytest.param([(15, 19), (10, 14)], id="adjacent-objects-listed-out-of-order"),
    pytest.param([(11, 12), (17, 18)], id="holes-at-both-ends-and-between"),  # markers, aborted records
    pytest.param([], id="no-object-at-all"),  # a range of only markers and aborted records
])
def test_build_takes_disjoint_objects_inside_the_range_in_offset_order(spans):
    """The refusals stop at the edges: disjoint objects within the range, holes included, make a manifest."""
    doc = manifest.build(OffsetRange("t", 0, 10, 20), "parquet", [obj(a, b) for a, b in spans])
    assert [(o["first_offset"], o["last_offset"]) for o in doc["objects"]] == sorted(spans)
