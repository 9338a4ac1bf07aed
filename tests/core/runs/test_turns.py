"""One archive run at a time per topic partition: the order of claims (pure; the real stack is in
tests/end_to_end/test_one_run_per_range.py)."""

from matos_dagster.core.runs.turns import Claim, ahead


def test_a_run_waits_only_for_claims_made_before_its_own():
    mine = Claim(100.0, "b")
    assert ahead(mine, [Claim(99.5, "a"), Claim(100.5, "c"), mine]) == [Claim(99.5, "a")]


def test_two_claims_at_the_same_instant_agree_on_one_order():
    a, b = Claim(100.0, "run-a"), Claim(100.0, "run-b")
    # Exactly one of the two goes first, whichever reads first.
    assert ahead(a, [b]) == [] and ahead(b, [a]) == [a]


def test_a_run_never_waits_for_itself_or_for_an_unreadable_claim():
    mine = Claim(100.0, "a")
    assert ahead(mine, [Claim(50.0, "a"), None, Claim.from_tag("yesterday", "x")]) == []


def test_claims_round_trip_through_their_tag():
    c = Claim(1795469615.123456, "r")
    assert Claim.from_tag(c.tag, "r") == c


def test_the_sensor_sees_partitions_that_other_runs_are_archiving():
    from matos_dagster.core.offsets.ranges import OffsetRange
    from matos_dagster.core.runs.turns import busy_partitions

    runs = [
        ("cli", [OffsetRange("demo", 0, 0, 10).key]),
        ("batch-by-hand", [OffsetRange("demo", 1, 0, 10).key, OffsetRange("demo2", 2, 0, 10).key]),
        ("ui-typo", ["demo:p3 oops"]),
        ("monitor", []),
    ]
    assert busy_partitions(runs) == {
        ("demo", 0): "run cli is archiving demo/0[0, 10); waiting for it",
        ("demo", 1): "run batch-by-hand is archiving demo/1[0, 10); waiting for it",
        ("demo2", 2): "run batch-by-hand is archiving demo2/2[0, 10); waiting for it"}
