"""The topics file: what it may say, and the errors when it says something else."""

import dataclasses
import pickle

import pytest

from matos_dagster.core.topics import TopicsFileError, load, parse


def test_defaults_apply_to_every_topic_and_a_topic_overrides_them():
    topics = parse(
        {
            "defaults": {"format": "jsonl", "batch": {"records": 10}},
            "topics": ["plain", {"name": "orders.v2", "format": "parquet", "batch": {"age_s": 5}}],
        }
    )
    assert [t.name for t in topics] == ["plain", "orders.v2"]
    assert topics[0].format == "jsonl" and topics[0].batch_records == 10
    assert topics[1].format == "parquet" and topics[1].batch_records == 10 and topics[1].batch_age_s == 5.0
    assert topics[1].asset_name == "archive_orders_v2"
    assert topics[1].partitions_name == "archive_orders_v2_ranges"


def test_the_projects_own_topics_file_is_valid(tmp_path):
    from matos_dagster.core.settings import PROJECT_ROOT

    assert [t.name for t in load(PROJECT_ROOT / "topics.yaml")] == ["demo"]


@pytest.mark.parametrize(
    "doc, message",
    [
        (None, "non-empty list `topics:`"),
        ({"topics": []}, "non-empty list `topics:`"),
        ({"topics": [{"format": "parquet"}]}, "needs a `name`"),
        ({"topics": ["bad name"]}, "invalid Kafka topic name"),
        ({"topics": [{"name": "t", "fromat": "parquet"}]}, "unknown key 'fromat'"),
        ({"topics": [{"name": "t", "format": "csv"}]}, "format must be one of"),
        ({"topics": [{"name": "t", "slice_records": 0}]}, "slice_records must be > 0"),
        ({"topics": [{"name": "t", "slice_records": "many"}]}, "must be a whole number"),
        ({"topics": [{"name": "t", "batch": {"recs": 1}}]}, "unknown key 'recs'"),
        ({"topics": [{"name": "t", "prefix": "../up"}]}, "without '..'"),
        ({"topics": [{"name": "t", "object_bytes": 4 * 1024**3}]}, "5 GiB"),
        ({"topics": [{"name": "t", "max_record_bytes": 10, "object_bytes": 5}]}, "must not exceed object_bytes"),
        ({"topics": ["a.b", "a-b"]}, "same asset name"),
        ({"topics": ["t"], "extra": 1}, "unknown top-level keys"),
        ({"topics": [{"name": "t", "windows_start": "1969-12-31"}]}, "windows_start must be a date from 1970-01-01"),
        ({"topics": [{"name": "t", "windows_start": "2024-02-30"}]}, "windows_start must be a date from 1970-01-01"),
        ({"topics": [{"name": "t", "windows_summary": "yes"}]}, "windows_summary must be true or false"),
    ],
)
def test_an_invalid_topics_file_is_refused_with_what_to_fix(doc, message):
    with pytest.raises(TopicsFileError, match=message):
        parse(doc)


def test_a_missing_or_broken_file_names_the_file_and_the_setting(tmp_path):
    with pytest.raises(TopicsFileError, match="MATOS_TOPICS_FILE"):
        load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("topics: [unclosed")
    with pytest.raises(TopicsFileError, match="bad.yaml is not valid YAML"):
        load(bad)


def test_a_topic_config_is_immutable_data_that_survives_pickling():
    cfg = parse({"topics": [{"name": "t", "format": "jsonl", "slice_records": 7}]})[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.format = "parquet"  # a run cannot change the settings other code relies on
    copy = pickle.loads(pickle.dumps(cfg))  # as Spark tasks and Dagster's run workers get it
    assert copy == cfg and hash(copy) == hash(cfg)
    assert (copy.format, copy.slice_records) == ("jsonl", 7)
    for change in ({"name": "u"}, {"group": "other"}, {"format": "parquet"}, {"slice_records": 8},
                   {"batch_age_s": 1.0}, {"stall_s": 1.0}):  # equality looks at the fields
        assert dataclasses.replace(cfg, **change) != cfg, change
