"""Property: any value of a rich Avro schema, written by fastavro and framed, decodes to Arrow and
back to exactly the value written, after the documented conversions (maps -> (key, value) pairs,
a multi-branch union -> its member struct) - decimals to their scale, timestamps to their unit."""

from __future__ import annotations

import datetime
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_support import FakeSource, avro_framed, avro_schema, column

from matos_dagster.core.schemas.decode import Side, decode

UTC = datetime.timezone.utc
COLOR = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]}
HASH = {"type": "fixed", "name": "Hash", "size": 8}
PT = {"type": "record", "name": "Pt", "fields": [{"name": "x", "type": "double"}]}
ITEM = {"type": "record", "name": "Item", "fields": [{"name": "n", "type": ["null", "int"]},
                                                     {"name": "t", "type": {"type": "map", "values": "Hash"}}]}


def decimal(precision: int, scale: int, fixed: int | None = None) -> dict:
    base = {"type": "fixed", "name": f"D{precision}", "size": fixed} if fixed else {"type": "bytes"}
    return {**base, "logicalType": "decimal", "precision": precision, "scale": scale}


SCHEMA = {"type": "record", "name": "Root", "namespace": "p", "fields": [{"name": n, "type": t} for n, t in [
    ("i", "int"), ("l", "long"), ("f", "float"), ("d", "double"), ("b", "boolean"), ("s", "string"), ("by", "bytes"),
    ("e", COLOR), ("fx", HASH), ("dec", decimal(20, 4)), ("decf", decimal(38, 2, fixed=16)), ("wide", decimal(50, 10)),
    ("day", {"type": "int", "logicalType": "date"}),
    ("tms", {"type": "long", "logicalType": "timestamp-millis"}),
    ("tus", {"type": "long", "logicalType": "timestamp-micros"}),
    ("local", {"type": "long", "logicalType": "local-timestamp-millis"}),
    ("opt", ["null", "string"]), ("multi", ["null", "long", "string", "Color", PT]),
    ("arr", {"type": "array", "items": ITEM}), ("m", {"type": "map", "values": {"type": "array", "items": "long"}}),
]]}

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=8)
DATETIMES = st.datetimes(datetime.datetime(1, 1, 2), datetime.datetime(9999, 12, 30))


def decimals(precision: int, scale: int):
    bound = 10**precision - 1
    # From text: exact whatever the digits (Decimal arithmetic would round to the context's 28).
    return st.integers(-bound, bound).map(lambda unscaled: Decimal(f"{unscaled}E-{scale}"))


ROOT = st.fixed_dictionaries({
    "i": st.integers(-2**31, 2**31 - 1), "l": st.integers(-2**63, 2**63 - 1),
    "f": st.floats(width=32, allow_nan=False), "d": st.floats(allow_nan=False), "b": st.booleans(), "s": TEXT,
    "by": st.binary(max_size=8), "e": st.sampled_from(COLOR["symbols"]), "fx": st.binary(min_size=8, max_size=8),
    "dec": decimals(20, 4), "decf": decimals(38, 2), "wide": decimals(50, 10), "day": st.dates(),
    "tms": DATETIMES.map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000, tzinfo=UTC)),
    "tus": DATETIMES.map(lambda t: t.replace(tzinfo=UTC)),
    "local": DATETIMES.map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
    "opt": st.none() | TEXT,
    "multi": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), TEXT,
                       st.sampled_from(COLOR["symbols"]).map(lambda c: ("p.Color", c)),
                       st.floats(allow_nan=False).map(lambda x: ("p.Pt", {"x": x}))),
    "arr": st.lists(st.fixed_dictionaries({
        "n": st.none() | st.integers(-2**31, 2**31 - 1),
        "t": st.dictionaries(TEXT, st.binary(min_size=8, max_size=8), max_size=3)}), max_size=3),
    "m": st.dictionaries(TEXT, st.lists(st.integers(-2**63, 2**63 - 1), max_size=3), max_size=3),
})


def expected(value: dict) -> dict:
    """The written value as Arrow gives it back: the conversions the mapping documents."""
    out = dict(value)
    multi = value["multi"]
    if multi is not None:
        members = {f"member{i}": None for i in range(4)}
        if isinstance(multi, tuple):
            members["member2" if multi[0] == "p.Color" else "member3"] = multi[1]
        else:
            members["member0" if isinstance(multi, int) else "member1"] = multi
        out["multi"] = members
    out["arr"] = [{"n": item["n"], "t": list(item["t"].items())} for item in value["arr"]]
    out["m"] = list(value["m"].items())
    return out


def exact(value):
    """Decimals compared with their scale (Decimal('1.0') == Decimal('1.00') otherwise)."""
    if isinstance(value, Decimal):
        return ("decimal", str(value))
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [exact(v) for v in value]
    return value


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROOT, min_size=1, max_size=4))
def test_any_value_round_trips_exactly(values):
    out = decode(column([avro_framed(1, SCHEMA, v) for v in values]), Side("avro", strict=True),
                 FakeSource({1: avro_schema(1, SCHEMA)}))
    assert exact(out.data.to_pylist()) == exact([expected(v) for v in values])
    assert out.decoded == len(values) and out.schema_ids.to_pylist() == [1] * len(values)
