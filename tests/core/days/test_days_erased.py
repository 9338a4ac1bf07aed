"""A window's shares recounted after an erasure (core/days/erased.py): the rules, on window records
in memory. From the range's manifest as it is now when it can be, so counting again changes
nothing; else each erased offset subtracted once."""

from matos_dagster.core.days import buckets, erased, windows
from matos_dagster.core.days.completeness import Part, PartitionTime, TopicTime
from matos_dagster.core.swift import layout

DAY = windows.DAY_MS
RANGE = "kafka/topic=t/partition=0/00000000000000000000-00000000000000000010"


class Memory:
    """The few Store calls erased.py makes, on a dict."""

    def __init__(self):
        self.docs: dict[str, dict] = {}

    def get_json(self, name):
        return self.docs.get(name)

    def put_json(self, name, doc):
        self.docs[name] = doc

    def head(self, name):
        return {} if name in self.docs else None

    def list(self, prefix):
        return [{"name": n} for n in sorted(self.docs) if n.startswith(prefix)]


def window(share: list[int]) -> dict:
    return {"topic": "t", "window": "1970-01-01", "start": 0, "end": DAY, "partitions": {"0": {RANGE: share}}}


def test_a_share_is_recounted_from_its_range_manifest_now_so_recounting_again_changes_nothing():
    store = Memory()
    # The range now: offsets 0-9 less the erased 2 and 7, one an hour, 100 bytes each.
    left = [o for o in range(10) if o not in (2, 7)]
    store.put_json(layout.join(RANGE, layout.MANIFEST), {"hours": buckets.to_json(
        {o * 3_600_000: [1, 100, o, o, o * 3_600_000] for o in left})})
    win = window([10, 1000, 0, 9, 0])

    assert erased.recount(store, win, {"0": {2: 100, 7: 100}}, DAY)
    assert win["partitions"]["0"][RANGE] == [8, 800, 0, 9, 0]
    assert not erased.recount(store, win, {"0": {2: 100, 7: 100}}, DAY)
    assert Part(win["partitions"]["0"]).records == 8


def test_without_a_manifest_each_erased_offset_is_subtracted_once_and_a_share_left_empty_goes():
    store = Memory()  # the range compacted since and its folder deleted: no manifest to count from
    win = window([2, 200, 3, 4, 2])  # both records late

    assert erased.recount(store, win, {"0": {3: 100}}, DAY)
    assert win["partitions"]["0"][RANGE] == [1, 100, 3, 4, 1]
    assert not erased.recount(store, win, {"0": {3: 100}}, DAY)
    assert erased.recount(store, win, {"0": {3: 100, 4: 100}}, DAY)
    assert win["partitions"]["0"] == {} and win["erased"] == {"0": [3, 4]}


def test_a_marker_is_applied_once_its_erasure_is_done_and_only_to_what_the_evaluation_has_read():
    store = Memory()
    marker = erased.marker_name("kafka", "t", "r1")
    record = layout.erasure_record_name("kafka", "r1")
    erased.Marks(store, "kafka", "t", "r1", record, 0)([(3, 1000, 100), (12, 2000, 100), (5, None, 100)])
    store.put_json(layout.window_name("kafka", "t", "1970-01-01"), window([2, 200, 3, 4, 0]))
    state = TopicTime({0: PartitionTime(next_offset=10)})
    rewritten = []

    assert erased.apply(store, "kafka", "t", state, DAY, lambda k, d: rewritten.append(k)) == []  # not done yet
    store.put_json(record, {})
    assert erased.apply(store, "kafka", "t", state, DAY, lambda k, d: rewritten.append((k, d))) == [marker]
    # Offset 12 is past what the evaluation read (it reads the rewritten range), 5 has no timestamp.
    assert rewritten == [("1970-01-01", {**window([1, 100, 3, 4, 0]), "erased": {"0": [3]}})]
