"""One archive run at a time per topic partition: the bakery rule, pure (the Dagster side is in
tests/test_turns_on_an_instance.py; the real stack in tests/end_to_end/test_one_run_per_range.py)."""

from __future__ import annotations

import itertools

from matos_dagster.core.runs.turns import CHOOSING, Claim, Seen, ahead, in_the_way, number_after, seen

# -- the rule ---------------------------------------------------------------------------------


def test_a_run_waits_for_the_runs_numbered_before_it_and_for_any_run_still_choosing():
    mine = Claim(5, "b")
    others = [Seen("a", 4), Seen("c", 6), Seen("d", None), Seen("b", 1)]
    assert ahead(mine, others) == [Seen("d", None), Seen("a", 4)]


def test_two_runs_with_the_same_number_agree_on_one_order_by_run_id():
    a, b = Claim(3, "run-a"), Claim(3, "run-b")
    # Exactly one of the two goes first.
    assert not in_the_way(a, Seen("run-b", 3)) and in_the_way(b, Seen("run-a", 3))


def test_a_run_takes_a_number_above_every_number_it_sees_and_ignores_choosing_runs():
    assert number_after([]) == 1
    assert number_after([Seen("a", 4), Seen("b", None), None, Seen("c", 2)]) == 5


def test_a_turn_tag_reads_back_and_an_unreadable_one_takes_no_part():
    assert seen(Claim(7, "r", since=1.5).tag, "r") == Seen("r", 7)
    assert seen(CHOOSING, "r") == Seen("r", None) and seen(CHOOSING, "r").choosing
    assert [seen(v, "x") for v in (None, "", "yesterday", "0", "-3", "1795469615.12")] == [None] * 6
    assert ahead(Claim(1, "a"), [None, Seen("a", None)]) == []  # nor does a run wait for itself


# -- two runs' steps, in every interleaving, against a tag store in memory --------------------
#
# Each run is a generator that yields after every step that touches the shared store (a write of
# its tag, a read of the other's); a schedule says which run takes its next step. Every schedule
# is tried; a run waiting for its turn reads again at each step it is given, a bounded number of
# times. The store, like Dagster's run storage, shows a write to every read that begins after it.

POLLS = 4  # reads a waiting run makes before the schedule gives up on it (it would keep waiting)


def clock_claims(me: str, store: dict, clock: list, in_turn: set):
    """The claim as it was: the time taken, then written, then every earlier claim waited for."""
    clock[0] += 1
    mine = (clock[0], me)  # the time is taken here ...
    yield
    store[me] = mine  # ... and is visible only from here
    yield
    for _ in range(POLLS):
        if not [c for run, c in store.items() if run != me and c < mine]:
            in_turn.add(me)
            return
        yield


def bakery_claims(me: str, store: dict, clock: list, in_turn: set):
    """core/runs/turns.py's steps 1 to 4, each read and write one step."""
    store[me] = CHOOSING
    yield
    number = number_after(seen(v, run) for run, v in list(store.items()) if run != me)
    yield
    store[me] = Claim(number, me).tag
    mine = Claim(number, me)
    yield
    for _ in range(POLLS):
        if not ahead(mine, [seen(v, run) for run, v in store.items()]):
            in_turn.add(me)
            return
        yield


def both_in_their_turn(claims) -> list[tuple[str, ...]]:
    """The schedules of two runs' claims after which both runs are in their turn."""
    found = []
    steps = 3 + POLLS  # at most, per run
    for schedule in {s for s in itertools.product("ab", repeat=2 * steps)}:
        store, clock, in_turn = {}, [0], set()
        runs = {r: claims(r, store, clock, in_turn) for r in "ab"}
        going = set(runs)
        taken = []
        for r in schedule:
            if r not in going:
                continue
            taken.append(r)
            try:
                next(runs[r])
            except StopIteration:
                going.discard(r)
            if in_turn == {"a", "b"}:
                found.append(tuple(taken))
                break
    return found


def test_claims_ordered_by_a_time_taken_before_they_are_visible_let_two_runs_in():
    # a takes its time; b takes a later one, writes, reads (a's claim not visible yet) and goes;
    # a writes its earlier time, reads b's later one and goes too.
    races = both_in_their_turn(clock_claims)
    assert ("a", "b", "b", "b", "a", "a") in races


def test_in_no_interleaving_of_their_steps_are_two_runs_in_their_turn_at_once():
    assert both_in_their_turn(bakery_claims) == []
    # Not by letting nobody in: a run alone, and the first of two in a row, take their turn.
    store, in_turn = {}, set()
    for r in "ab":
        for _ in bakery_claims(r, store, [0], in_turn):
            pass
    assert in_turn == {"a"} and store == {"a": "1", "b": "2"}
