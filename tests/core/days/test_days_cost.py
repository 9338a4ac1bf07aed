"""Deciding which days are complete costs what it costs on the first day: after a year of days, an
evaluation lists and reads only what was archived since the last one (on the real Swift)."""

import uuid

from matos_dagster.core.days import evaluate, windows
from matos_dagster.core.days.completeness import Rules
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store

DAY = windows.DAY_MS
START = 1_735_689_600_000  # 2025-01-01, UTC
RULES = Rules(length_ms=DAY, allowed_lateness_ms=0, idle_ms=10**12)


def put_day(store, prefix: str, topic: str, day: int, partition: int = 0) -> None:
    """Range [day, day + 1) of the partition: one record, at noon of day `day` after START."""
    r = OffsetRange(topic, partition, day, day + 1)
    ts = START + day * DAY + DAY // 2
    store.put_json(layout.manifest_name(prefix, r), {"records": 1, "hours": {str(ts - ts % windows.HOUR_MS):
                                                                                [1, 10, day, day, ts]}})


def test_an_evaluation_after_a_year_of_days_lists_and_reads_what_it_does_after_one(swift, monkeypatch):
    requests = {"list": 0, "get": 0}
    real_list, real_get = Store.list_page, Store.get_json

    def listed(store, *a, **kw):
        requests["list"] += 1
        return real_list(store, *a, **kw)

    def got(store, *a, **kw):
        requests["get"] += 1
        return real_get(store, *a, **kw)

    monkeypatch.setattr(Store, "list_page", listed)
    monkeypatch.setattr(Store, "get_json", got)
    cost, state_bytes = {}, {}
    with swift.store() as store:
        store.check()
        for days in (1, 365):
            topic = f"days-{uuid.uuid4().hex[:8]}"
            for d in range(days):
                put_day(store, store.params.prefix, topic, d)
            done = evaluate.evaluate(store, store.params.prefix, topic, RULES, {0: days + 1}, START + 400 * DAY)
            assert len(done) == days - 1  # every day but the last is passed by a later record
            put_day(store, store.params.prefix, topic, days)  # the next day's range
            before = dict(requests)
            done = evaluate.evaluate(store, store.params.prefix, topic, RULES, {0: days + 2}, START + 400 * DAY)
            assert [w.key for w in done] == [windows.key(START + (days - 1) * DAY, DAY)]
            cost[days] = (requests["list"] - before["list"], requests["get"] - before["get"])
            state_bytes[days] = len(store.get(layout.event_time_state_name(store.params.prefix, topic)))
    print(f"event-time evaluation (listing requests, GETs) after 1 day and after a year: {cost}; "
          f"state bytes: {state_bytes}")
    assert cost[1] == cost[365]
    assert state_bytes[365] < state_bytes[1] + 32  # only the days still open are kept (longer offsets only)


def test_a_long_history_is_caught_up_over_several_evaluations_each_reading_a_bounded_share(swift, monkeypatch):
    """The first evaluation of an archive with a long history must fit in one sensor tick: it reads at
    most MAX_READS ranges (shared by the partitions), writes its state, and the next goes on."""
    monkeypatch.setattr(evaluate, "MAX_READS", 14)  # 7 ranges a partition and evaluation
    reads = []
    real_get = Store.get_json
    monkeypatch.setattr(Store, "get_json", lambda store, name, *a, **kw: (
        reads.append(name), real_get(store, name, *a, **kw))[1])
    with swift.store() as store:
        store.check()
        topic = f"days-{uuid.uuid4().hex[:8]}"
        for d in range(30):
            put_day(store, store.params.prefix, topic, d)
            put_day(store, store.params.prefix, topic, d, partition=1)
        completed, evaluations = [], 0
        while True:
            reads.clear()
            done = evaluate.evaluate(store, store.params.prefix, topic, RULES, {0: 30, 1: 30}, START + 400 * DAY)
            evaluations += 1
            manifests = [n for n in reads if "/_event_time/" not in n]
            assert len(manifests) <= 14
            completed += [w.key for w in done]
            if not manifests:
                break
    assert evaluations == 6  # 30 ranges a partition, 7 an evaluation: 5 reading, one finding nothing new
    assert completed == [windows.key(START + d * DAY, DAY) for d in range(29)]  # each day once, in order
