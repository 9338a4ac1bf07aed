"""The monitor's mark in the archive (matos_dagster/core/monitor/marks.py): written as read, and an
unusable one is no mark (the monitor then reads the partition whole once and writes it anew)."""

import json

import pytest

from matos_dagster.core.monitor.marks import mark_name, read_mark, write_mark
from matos_dagster.core.monitor.report import Known


class DictStore:
    def __init__(self):
        self.objects = {}

    def put_json(self, name, doc):
        self.objects[name] = json.dumps(doc).encode()

    def get(self, name):
        return self.objects.get(name)


def test_a_mark_is_read_as_it_was_written_beside_the_audit_marks():
    store, k = DictStore(), Known(5, 300, 3, 250, ((100, 150),))
    write_mark(store, "kafka", "orders", 2, k)
    assert list(store.objects) == ["kafka/topic=orders/_monitor/partition=2.json"] == [mark_name("kafka", "orders", 2)]
    assert read_mark(store, "kafka", "orders", 2) == k
    assert read_mark(store, "kafka", "orders", 1) is None


@pytest.mark.parametrize("raw", [
    b"not json",
    b'{"topic": "orders", "partition": 2}',
    b'{"topic": "orders", "partition": 2, "known": "junk"}',
    b'{"topic": "orders", "partition": 3, "known": [0, 300, 3, 300, []]}',  # another partition's
    b'{"topic": "other", "partition": 2, "known": [0, 300, 3, 300, []]}',
    b'{"topic": "orders", "partition": 2, "known": [300, 300, 0, 0, []]}',  # knows nothing
])
def test_an_unusable_mark_is_no_mark(raw):
    store = DictStore()
    store.objects[mark_name("kafka", "orders", 2)] = raw
    assert read_mark(store, "kafka", "orders", 2) is None
