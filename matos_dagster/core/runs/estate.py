"""The lag sensor's bookkeeping for an estate of topics, without Dagster.

One sensor watches every partition of every topic (sensors/lag.py); per partition it keeps a
`policy.PartitionState` and decides with `policy.decide`, as a sensor per topic did. What is new
is the scale: the cursor holds a thousand partitions and more, so it keeps only what cannot be
asked again (a partition at rest is its committed offset, one number), and the ranges a tick
finds due go to as few runs as `most` allows (`batches`), each named by what it carries so that
a tick evaluated twice asks for the same runs (Dagster drops a run key it has seen).

Per topic the cursor also keeps Kafka's topic id (`TopicIds`): a topic deleted and created again
under the same name has another id, and its partitions' states, which count the earlier log's
offsets, start again from the new log (`created_again`, `restart`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from dataclasses import dataclass, field, replace

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.runs.policy import Offsets, PartitionState

TP = tuple[str, int]
VERSION = 2
_PACKED = "z:"  # a cursor compressed with zlib, then base64
_PACK_ABOVE = 4096  # characters: Dagster keeps the cursor of every tick


@dataclass
class TopicIds:
    """What the cursor keeps per topic: Kafka's topic id last seen (kept while the topic is missing, so
    that its coming back is told from its first sight), and the topics seen created again (`earlier`:
    their archive holds an earlier log, which a run must never adopt as the new log's)."""

    ids: dict[str, str] = field(default_factory=dict)
    earlier: set[str] = field(default_factory=set)


def created_again(known: TopicIds, now: dict[str, str | None]) -> dict[str, tuple[str, str]]:
    """The topics whose id `now` is not the one the cursor kept: `{topic: (id before, id now)}`. A topic
    the broker gives no id (None), or seen for the first time, is not one."""
    return {t: (known.ids[t], i) for t, i in sorted(now.items()) if i is not None and known.ids.get(t) not in (None, i)}


def waiting(known: TopicIds, now: dict[str, str | None]) -> set[str]:
    """The topics whose id the cursor knows but Kafka gives none now: being created (again), left for
    the next tick as `many.topics` leaves a topic being created (their states kept as they were)."""
    return {t for t, i in now.items() if i is None and t in known.ids}


def seen(known: TopicIds, now: dict[str, str | None], again: dict[str, tuple[str, str]]) -> TopicIds:
    """The cursor's topic ids after a tick that saw `now` (a topic missing now keeps its last id)."""
    return TopicIds({**known.ids, **{t: i for t, i in now.items() if i is not None}}, known.earlier | set(again))


def restart(states: dict[TP, PartitionState], topics) -> dict[TP, PartitionState]:
    """`states` without those of `topics`' partitions: a log created again starts from its own start."""
    return {tp: s for tp, s in states.items() if tp[0] not in topics}


def _doc(text: str | None) -> dict:
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
    return doc


def read_topics(text: str | None) -> TopicIds:
    """The topic ids a cursor holds (none in a cursor written before they were kept)."""
    doc = _doc(text)
    return TopicIds(dict(doc.get("t", {})), set(doc.get("e", [])))


def read_cursor(text: str | None) -> dict[TP, PartitionState]:
    """The states a cursor holds; an empty map for no cursor, or one of another version."""
    doc = _doc(text)
    out = {}
    for topic, parts in doc.get("p", {}).items():
        for p, state in parts.items():
            out[(topic, int(p))] = (PartitionState() if state is None
                                    else PartitionState(next=state, committed=state) if isinstance(state, int)
                                    else PartitionState.from_json(state))
    return out


def read_look(text: str | None) -> float | None:
    """When the tick that wrote the cursor last asked Kafka (`write_cursor`'s `look`), in seconds since
    the epoch; None if it did not say."""
    look = _doc(text).get("l")
    return float(look) if isinstance(look, (int, float)) else None


def watched(states: dict[TP, PartitionState]) -> list[PartitionState]:
    """The states whose range a run is to archive: in flight, not given up (that one waits for an
    operator, not for a run)."""
    return [s for s in states.values() if in_flight(s) and not waits_for_operator(s)]


def write_cursor(states: dict[TP, PartitionState], lows: dict[TP, int], topics: TopicIds | None = None,
                 look: float | None = None) -> str:
    """The cursor of `states`: a partition at rest (nothing in flight, nothing waiting, its next range
    starting where the committed offset, or else the log start in `lows`, says) as its committed
    offset (null if none), `topics`' ids, and `look` (`read_look`), compressed when long."""
    doc: dict[str, dict[str, object]] = {}
    for (topic, p), s in sorted(states.items()):
        base = s.committed if s.committed is not None else lows.get((topic, p))
        at_rest = s.done and s.oldest_start is None and s.next in (None, base)
        doc.setdefault(topic, {})[str(p)] = s.committed if at_rest else _lean(s).to_json()
    out: dict = {"v": VERSION, "p": doc}
    if topics is not None and topics.ids:
        out["t"] = dict(sorted(topics.ids.items()))
    if topics is not None and topics.earlier:
        out["e"] = sorted(topics.earlier)
    if look is not None:
        out["l"] = round(look, 3)
    text = json.dumps(out, separators=(",", ":"))
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


def batch_key(ranges: list[tuple[OffsetRange, int]], ids: dict[str, str] | None = None) -> str:
    """A run key naming what the run carries: the same ranges and attempts give the same key. `ids`: the
    topic ids of topics created again, which name their ranges' log: the new log's range [0, 100)
    is not the earlier one's, whose run key Dagster has seen (and would drop)."""
    ids = ids or {}
    digest = hashlib.sha256("\n".join(f"{r.key}#{a}" + (f"@{ids[r.topic]}" if r.topic in ids else "")
                                      for r, a in sorted(ranges, key=lambda x: x[0].key)).encode())
    first = min(r.key for r, _ in ranges)
    return f"ranges:{len(ranges)}:{first}:{digest.hexdigest()[:16]}"


def in_flight(state: PartitionState) -> bool:
    """Whether the partition has a range requested and not yet archived (what others read of a cursor:
    the metrics exporter)."""
    return state.key is not None and not state.done


def waits_for_operator(state: PartitionState) -> bool:
    """Whether the sensor gave the partition up (policy.decide: its range failed every attempt) and no
    longer requests it by itself: the monitor warns of it, and the operator's command goes on."""
    return bool(state.stopped)
