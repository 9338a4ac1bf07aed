"""Deciding which days are complete costs what it costs on the first day: after a year of days, an
evaluation lists and reads only what was archived since the last one (on the real Swift)."""

import uuid

import pytest

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


def catch_up(store, topic: str, log_ends: dict[int, int], now: int = START + 400 * DAY, requested=None, **kw):
    """Evaluations until one writes nothing, each told what the one before returned (`requested`, as the
    sensor's cursor does, if given): the windows written, and how many evaluations it took."""
    done, evaluations = [], 0
    while True:
        new = evaluate.evaluate(store, store.params.prefix, topic, RULES, log_ends, now, requested=requested, **kw)
        evaluations += 1
        done += new
        requested = None if requested is None else evaluate.last_cursor(new, requested)
        if not new:
            return done, evaluations


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
            done, _ = catch_up(store, topic, {0: days + 1})
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


DAYS = 15  # of the tests below


def state_size(store, topic: str) -> int:
    return len(store.get(layout.event_time_state_name(store.params.prefix, topic)))


def test_a_partition_not_begun_keeps_the_other_partitions_days_out_of_the_state_and_completes_them_when_it_begins(
        swift):
    """Partition 1 has records in Kafka (log end 5) and nothing archived yet: no day completes, and
    partition 0's days wait in objects of their own, not in the state read and written every tick."""
    with swift.store() as store:
        store.check()
        topic, sizes = f"days-{uuid.uuid4().hex[:8]}", []
        for d in range(DAYS):
            put_day(store, store.params.prefix, topic, d)
            assert evaluate.evaluate(store, store.params.prefix, topic, RULES, {0: d + 1, 1: 5},
                                     START + 400 * DAY) == []
            sizes.append(state_size(store, topic))
        assert sizes[-1] < sizes[0] + 64, sizes  # a day's worth of open windows: the state does not grow
        # Partition 1's archive begins, past offset 0 (retention deleted 0-9): its last day passes every day before.
        r = OffsetRange(topic, 1, 10, 11)
        ts = START + (DAYS - 1) * DAY + 1
        store.put_json(layout.manifest_name(store.params.prefix, r), {"records": 1, "hours": {
            str(ts - ts % windows.HOUR_MS): [1, 10, 10, 10, ts]}})
        done, _ = catch_up(store, topic, {0: DAYS, 1: 11}, log_starts={0: 0, 1: 10})
        assert [w.key for w in done] == [windows.key(START + d * DAY, DAY) for d in range(DAYS - 1)]
        assert all(evaluate.summary(w.doc)[0]["records"] == 1 for w in done)  # each day's record, kept apart


def test_a_partition_begins_at_its_first_entry_once_nothing_below_it_can_still_be_archived(swift):
    """The first entry starts at 50: with offsets 40-49 still in Kafka (log start 40) a range below it
    may yet be archived, so the partition waits, unless the group's committed offset is past it."""
    with swift.store() as store:
        store.check()
        topic, asked = f"days-{uuid.uuid4().hex[:8]}", []

        def committed(partitions):
            asked.append(list(partitions))
            return {0: None}

        for d in range(50, 52):
            put_day(store, store.params.prefix, topic, d)
        now = START + 400 * DAY
        ev = lambda **kw: evaluate.evaluate(store, store.params.prefix, topic, RULES, {0: 52}, now, **kw)  # noqa: E731
        assert ev(log_starts={0: 40}, committed=committed) == [] and asked == [[0]]
        assert ev(log_starts={0: 40}, committed=lambda ps: {0: 52})[0].key == windows.key(START + 50 * DAY, DAY)
        state = evaluate.state_from_json(store.get_json(layout.event_time_state_name(store.params.prefix, topic)))
        assert state.partitions[0].next_offset == 52


def test_an_evaluation_stopped_part_way_keeps_what_it_saved_and_its_windows_are_requested_by_the_next(
        swift, monkeypatch):
    """Dagster's sensor timeout stops a tick where it is: the state saved as it went is where the next
    evaluation goes on (what was saved is not done again), and the windows the stopped tick wrote,
    whose runs it never requested, are requested by the next (the sensor's cursor did not move)."""
    monkeypatch.setattr(evaluate, "SAVE_EVERY_S", 0.0)  # the state saved after every step
    monkeypatch.setattr(evaluate, "BATCH", 5)
    real_put, written = Store.put_json, []

    def put(store, name, doc):
        window = name.partition("/_event_time/")[2]
        if window and not window.startswith("_"):  # a window's record (not the state, not an open window)
            if len(written) == 11:
                written.append("stopped")
                raise TimeoutError("the sensor's tick timed out")
            written.append(window)
        return real_put(store, name, doc)

    monkeypatch.setattr(Store, "put_json", put)
    with swift.store() as store:
        store.check()
        topic = f"days-{uuid.uuid4().hex[:8]}"
        for d in range(DAYS):
            put_day(store, store.params.prefix, topic, d)
        with pytest.raises(TimeoutError):
            evaluate.evaluate(store, store.params.prefix, topic, RULES, {0: DAYS + 1}, START + 400 * DAY,
                              requested="")
        done, _ = catch_up(store, topic, {0: DAYS + 1}, requested="")
    assert written.index("stopped") == 11
    written.remove("stopped")
    # Every day requested, the stopped tick's too; written again, only what it wrote after its last save.
    assert sorted(w.key for w in done) == [windows.key(START + d * DAY, DAY) for d in range(DAYS - 1)]
    assert len(written) - len(set(written)) <= evaluate.BATCH
