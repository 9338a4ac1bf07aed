"""The lag sensor's bookkeeping for an estate of topics, without Dagster.

One sensor watches every partition of every topic (sensors/lag.py); per partition it keeps a
`policy.PartitionState` and decides with `policy.decide`, as a sensor per topic did. What is new
is the scale: the cursor holds a thousand partitions and more, so it keeps only what cannot be
asked again (a partition at rest is its committed offset, one number), and the ranges a tick
finds due go to as few runs as `most` allows (`batches`), each named by what it carries so that
a tick evaluated twice asks for the same runs (Dagster drops a run key it has seen).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from dataclasses import replace

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.policy import Offsets, PartitionState

TP = tuple[str, int]
VERSION = 2
_PACKED = "z:"  # a cursor compressed with zlib, then base64
_PACK_ABOVE = 4096  # characters: Dagster keeps the cursor of every tick


def read_cursor(text: str | None) -> dict[TP, PartitionState]:
    """The states a cursor holds; an empty map for no cursor, or one of another version."""
    if not text:
        return {}
    if text.startswith(_PACKED):
        text = zlib.decompress(base64.b64decode(text[len(_PACKED):])).decode()
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(doc, dict) or doc.get("v") != VERSION:
        return {}  # a sensor per topic's cursor, or another version's: start afresh from Kafka
    out = {}
    for topic, parts in doc.get("p", {}).items():
        for p, state in parts.items():
            out[(topic, int(p))] = (PartitionState() if state is None
                                    else PartitionState(next=state, committed=state) if isinstance(state, int)
                                    else PartitionState.from_json(state))
    return out


def write_cursor(states: dict[TP, PartitionState], lows: dict[TP, int]) -> str:
    """The cursor of `states`: a partition at rest (nothing in flight, nothing waiting, its next range
    starting where the committed offset, or else the log start in `lows`, says) as its committed
    offset (null if none), compressed when long."""
    doc: dict[str, dict[str, object]] = {}
    for (topic, p), s in sorted(states.items()):
        base = s.committed if s.committed is not None else lows.get((topic, p))
        at_rest = s.done and s.oldest_start is None and s.next in (None, base)
        doc.setdefault(topic, {})[str(p)] = s.committed if at_rest else _lean(s).to_json()
    text = json.dumps({"v": VERSION, "p": doc}, separators=(",", ":"))
    if len(text) > _PACK_ABOVE:
        text = _PACKED + base64.b64encode(zlib.compress(text.encode(), 9)).decode()
    return text


def _lean(s: PartitionState) -> PartitionState:
    """What a settled range's fields no longer need to say."""
    return replace(s, key=None, attempt=0, requested_ms=None, run=None) if s.done else s


def needs_age(state: PartitionState, offsets: Offsets, start: int, run: str | None) -> bool:
    """Whether the tick must read the timestamp of the first record waiting at `start`: once per start,
    when nothing is in flight or the range in flight has just succeeded (a failed one is retried)."""
    from matos_dagster.core.runs.policy import SUCCEEDED

    return run in (None, SUCCEEDED) and start < offsets.high and state.oldest_start != start


def batches(ranges: list[tuple[OffsetRange, int]], most: int) -> list[list[tuple[OffsetRange, int]]]:
    """`(range, attempt)` pairs cut into runs of at most `most` ranges, in order."""
    return [ranges[i:i + most] for i in range(0, len(ranges), most)]


def batch_key(ranges: list[tuple[OffsetRange, int]]) -> str:
    """A run key naming what the run carries: the same ranges and attempts give the same key."""
    digest = hashlib.sha256("\n".join(f"{r.key}#{a}" for r, a in sorted(ranges, key=lambda x: x[0].key)).encode())
    first = min(r.key for r, _ in ranges)
    return f"ranges:{len(ranges)}:{first}:{digest.hexdigest()[:16]}"


def in_flight(state: PartitionState) -> bool:
    """Whether the partition has a range requested and not yet archived (what others read of a cursor:
    the metrics exporter)."""
    return state.key is not None and not state.done


def may_wait_for_operator(state: PartitionState) -> bool:
    """Whether the partition's range may be one the sensor no longer requests by itself: its last attempt
    was the last allowed (policy.decide gives up once that attempt's run has failed)."""
    from matos_dagster.core.runs.policy import MAX_ATTEMPTS

    return in_flight(state) and state.attempt >= MAX_ATTEMPTS
