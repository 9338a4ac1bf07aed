"""Topics by pattern: which of the cluster's topics a topics file archives, and with which settings."""

import pytest

from matos_dagster.core.topics import TopicsFileError, parse


def topic_set(*entries, defaults=None):
    return parse({"topics": list(entries), **({"defaults": defaults} if defaults else {})}, registry_url="")


def names(resolved):
    return [t.name for t in resolved.topics]


def test_a_pattern_matches_whole_topic_names_and_not_its_excludes():
    s = topic_set({"pattern": r"orders\..*", "exclude": [r"orders\.test\..*"]})
    r = s.resolve(["orders.eu", "orders.us", "orders.test.a", "xorders.eu", "orders", "payments"])
    assert names(r) == ["orders.eu", "orders.us"]


def test_kafkas_internal_topics_and_the_registrys_are_never_matched():
    s = topic_set({"pattern": ".*"})
    assert names(s.resolve(["__consumer_offsets", "__transaction_state", "_schemas", "a"])) == ["a"]


def test_a_named_topic_wins_over_a_pattern_and_the_first_matching_pattern_wins_over_later_ones():
    s = topic_set({"pattern": "a.*", "format": "jsonl"}, {"name": "ab", "group": "named"},
                  {"pattern": "a.*|b.*", "group": "second"}, defaults={"batch": {"age_s": 5}})
    r = {t.name: t for t in s.resolve(["ab", "ac", "bc"]).topics}
    assert (r["ab"].group, r["ab"].format) == ("named", "parquet")
    assert (r["ac"].format, r["ac"].group) == ("jsonl", "matos-archiver")
    assert r["bc"].group == "second"
    assert {t.batch_age_s for t in r.values()} == {5.0}, "defaults apply to what patterns match"


def test_any_topic_is_found_by_name_whether_named_or_matched_later():
    s = topic_set({"name": "named"}, {"pattern": "logs-.*", "slice_records": 7})
    assert s.get("named").name == "named"
    assert s.get("logs-created-later").slice_records == 7
    assert s.get("other") is None
    assert [t.name for t in s] == ["named"], "as a sequence, the file's named topics"


def test_a_named_topic_kafka_does_not_have_is_kept_and_said_missing():
    r = topic_set({"name": "gone"}, {"pattern": "x.*"}).resolve(["x1"])
    assert names(r) == ["gone", "x1"] and r.missing == ["gone"]


def test_a_matched_topic_whose_asset_name_is_taken_is_left_out_saying_what_to_do():
    r = topic_set({"name": "a-b"}, {"pattern": "a.b"}).resolve(["a-b", "a_b", "a.b"])
    assert names(r) == ["a-b"]
    assert len(r.clashes) == 2 and all("exclude one of them" in line for line in r.clashes)


@pytest.mark.parametrize("entry, says", [
    ({"pattern": "orders(("}, "pattern 'orders((' is not a valid regex"),
    ({"pattern": "a.*", "exclude": ["(("]}, "exclude '((' is not a valid regex"),
    ({"pattern": ""}, "pattern must be a non-empty regex"),
    ({"pattern": "a.*", "name": "a"}, "a `name` or a `pattern`, not both"),
    ({"pattern": "a.*", "exclude": 3}, "exclude must be a regex or a list of them"),
    ({"pattern": "a.*", "slice_records": 0}, "slice_records must be > 0"),
    ({"pattern": "a.*", "formatt": "jsonl"}, "unknown key 'formatt'"),
    ({"group": "g"}, "every entry needs a `name` (a topic) or a `pattern`"),
])
def test_a_bad_pattern_entry_is_refused_in_one_line_naming_it(entry, says):
    with pytest.raises(TopicsFileError) as e:
        topic_set(entry)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert "topics[0]" in str(e.value)
