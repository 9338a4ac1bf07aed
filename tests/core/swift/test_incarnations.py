"""A topic's incarnations as the archive records them: which log is which, pure (a store in memory)."""

from __future__ import annotations

from matos_dagster.core.swift import incarnations
from matos_dagster.core.swift.incarnations import Incarnation

OLD, NEW, THIRD = "b21cxU9dT0GDsiOk/BPnAA", "KP4OXZckTgCidsZp99pVGg", "zzz"


class DictStore:
    def __init__(self):
        self.docs, self.puts = {}, 0

    def get_json(self, name):
        return self.docs.get(name)

    def put_json(self, name, doc):
        self.docs[name], self.puts = doc, self.puts + 1


def test_the_first_id_seen_adopts_the_archive_there_as_incarnation_1_under_the_topics_own_prefix():
    store = DictStore()
    inc, line = incarnations.observe(store, "p", "orders", OLD, 10)
    assert inc == Incarnation(1, OLD, 10) and line is None and inc.prefix("p") == "p"
    assert incarnations.observe(store, "p", "orders", OLD, 20) == (inc, None)
    assert store.puts == 1, "a known id costs a GET, no PUT"


def test_a_new_id_is_the_next_incarnation_under_a_prefix_of_its_own_said_in_one_line():
    store = DictStore()
    incarnations.observe(store, "p", "orders", OLD, 10)
    inc, line = incarnations.observe(store, "p", "orders", NEW, 20)
    assert inc == Incarnation(2, NEW, 20) and inc.prefix("p") == "p/incarnation=2"
    assert "deleted and created again" in line and "\n" not in line and "p/incarnation=2/topic=orders/" in line
    assert incarnations.read(store, "p", "orders") == [Incarnation(1, OLD, 10), Incarnation(2, NEW, 20)]
    assert incarnations.observe(store, "p", "orders", THIRD, 30)[0].number == 3
    assert incarnations.observe(store, "p", "orders", NEW, 40)[0] == Incarnation(2, NEW, 20)


def test_an_archive_known_to_hold_an_earlier_log_is_never_adopted_by_a_new_id():
    store = DictStore()
    inc, line = incarnations.observe(store, "p", "orders", NEW, 20, earlier=True)
    assert inc == Incarnation(2, NEW, 20) and line is not None
    assert incarnations.read(store, "p", "orders")[0] == incarnations.FIRST


def test_a_broker_without_topic_ids_records_nothing_and_gets_the_newest_incarnation():
    store = DictStore()
    assert incarnations.observe(store, "p", "orders", None, 10) == (incarnations.FIRST, None)
    incarnations.observe(store, "p", "orders", OLD, 10)
    incarnations.observe(store, "p", "orders", NEW, 20)
    assert incarnations.observe(store, "p", "orders", None, 30)[0].number == 2
    assert store.puts == 2


def test_a_reader_of_the_current_log_looks_its_incarnation_up_without_recording_it():
    store = DictStore()
    assert incarnations.looked_up(store, "p", "orders", OLD) == Incarnation(1, OLD)
    incarnations.observe(store, "p", "orders", OLD, 10)
    assert incarnations.looked_up(store, "p", "orders", OLD) == Incarnation(1, OLD, 10)
    assert incarnations.looked_up(store, "p", "orders", NEW).number == 2
    assert incarnations.looked_up(store, "p", "orders", None).number == 1
    assert store.puts == 1
