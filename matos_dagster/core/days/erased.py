"""The windows (days, hours) that held records an erasure removed, counted again.

A window's record holds, per partition, each range's share of it (counts, bytes, offsets), read
once when the range was archived (evaluate.py): an erasure that rewrites a range afterwards must
change the shares it held, or the window would go on counting records that are gone, with the
same data version. So the erasure (core/erase/run.py) leaves a marker per request under the
topic's `_event_time/_erased/`, written before each range's manifest switches: per partition the
erased records' offset, timestamp and bytes (no key, no value). The next evaluation of the topic,
once the erasure is done (its record in `_erasure/records/`), recounts each such window's shares
of those records and writes the window again: a new data version, and a run of the window like
a late record's. Then the marker is deleted.

A share is recounted from its range's manifest as it is now (its hours: what the range holds of
each hour), so applying a marker twice, or to a share read after the range was rewritten, counts
the same. A share whose range is gone (compacted, then cleaned) or that does not cover its whole
range has the erased records subtracted instead, each offset once (the window's `erased`).
No Dagster imports.
"""

from __future__ import annotations

from typing import Callable

from matos_dagster.core.days import buckets as hours
from matos_dagster.core.days import windows
from matos_dagster.core.days.completeness import LOST, TopicTime
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store

FOLDER = "_erased"


def marker_name(prefix: str, topic: str, request_id: str) -> str:
    return layout.join(layout.topic_dir(prefix, topic), "_event_time", FOLDER, f"{request_id}.json")


class Marks:
    """The erasure's side: told a range's erased records before its manifest switches (rewrite.py's
    `before_switch`), it adds them to the request's marker for the topic (one writer: the erasure's run)."""

    def __init__(self, store: Store, prefix: str, topic: str, request_id: str, record_name: str, partition: int):
        self.store, self.partition = store, partition
        self.name = marker_name(prefix, topic, request_id)
        self.record_name = record_name

    def __call__(self, rows: list[tuple[int, int | None, int]]) -> None:
        if not rows:
            return
        doc = self.store.get_json(self.name) or {"record": self.record_name, "partitions": {}}
        part = doc["partitions"].setdefault(str(self.partition), {})
        for offset, ts, nbytes in rows:
            part[str(offset)] = [ts, nbytes]
        self.store.put_json(self.name, doc)


def pending(store: Store, prefix: str, topic: str) -> bool:
    """Whether a marker waits for the topic's days (one small listing): the days sensor evaluates a
    closed incarnation again for it."""
    return next(iter(store.list(_folder(prefix, topic))), None) is not None


def _folder(prefix: str, topic: str) -> str:
    return layout.join(layout.topic_dir(prefix, topic), "_event_time", FOLDER) + "/"


def apply(store: Store, prefix: str, topic: str, state: TopicTime, length_ms: int,
          rewrite: Callable[[str, dict], None]) -> list[str]:
    """Recount the windows the markers of finished erasures name; `rewrite(key, doc)`: a complete
    window's record changed (the caller writes it and journals it). The markers applied: the caller
    deletes them once its state is saved. Records of ranges the evaluation has not read yet are left
    to it (it reads the manifests as they are now), those without a timestamp are in no window."""
    applied = []
    for o in store.list(_folder(prefix, topic)):
        doc = store.get_json(o["name"])
        if doc is None or store.head(doc["record"]) is None:
            continue  # the erasure is still going on: its ranges may not all be rewritten yet
        changes: dict[int, dict[str, dict[int, int]]] = {}  # window start -> partition -> {offset: bytes}
        for p, rows in doc["partitions"].items():
            t = state.partitions.get(int(p))
            read_to = t.next_offset if t is not None else None
            for offset, (ts, nbytes) in rows.items():
                if ts is None or read_to is None or int(offset) >= read_to:
                    continue
                w = windows.start_of(ts, length_ms)
                changes.setdefault(w, {}).setdefault(p, {})[int(offset)] = nbytes
        for w, parts in sorted(changes.items()):
            key = windows.key(w, length_ms)
            complete = layout.window_name(prefix, topic, key)
            for name in (complete, layout.open_window_name(prefix, topic, key)):
                win = store.get_json(name)
                if win is None:
                    continue
                if recount(store, win, parts, length_ms):
                    if name == complete:
                        rewrite(key, win)
                    else:
                        store.put_json(name, win)
                break
        applied.append(o["name"])
    return applied


def recount(store: Store, win: dict, parts: dict[str, dict[int, int]], length_ms: int) -> bool:
    """The window's shares that held these erased records ({partition: {offset: bytes}}) recounted, in
    place; whether anything changed."""
    changed = False
    for p, gone in parts.items():
        shares = win["partitions"].get(p, {})
        done = win.setdefault("erased", {}).setdefault(p, [])
        for name in [n for n in shares if not n.startswith(LOST)]:
            old = shares[name]
            mine = {o: b for o, b in gone.items() if old[2] <= o <= old[3]}
            if not mine:
                continue
            new = _from_manifest(store, name, win["start"], length_ms, old)
            if new is None:  # no manifest to count from: subtract, each offset once
                new = list(old)
                for o, b in mine.items():
                    if o not in done:
                        new[0], new[1] = new[0] - 1, new[1] - b
            new[4] = new[0] if old[4] and old[4] >= old[0] else min(old[4], new[0])  # late: all or as before
            done.extend(o for o in sorted(mine) if o not in done)
            if new != old:
                changed = True
                if new[0] > 0:
                    shares[name] = new
                else:
                    del shares[name]
    return changed


def _from_manifest(store: Store, range_dir: str, start: int, length_ms: int, old: list[int]) -> list[int] | None:
    """The range's share of the window by its manifest's hours now, or None: no manifest with hours,
    or a share of part of the range (its manifest holds records of the window below the share's)."""
    doc = store.get_json(layout.join(range_dir, layout.MANIFEST))
    if doc is None or "hours" not in doc:
        return None
    mine = [v for h, v in hours.from_json(doc["hours"]).items() if start <= h < start + length_ms]
    if not mine:
        return [0, 0, old[2], old[3], 0]
    lo = min(v[2] for v in mine)
    if lo < old[2]:
        return None
    return [sum(v[0] for v in mine), sum(v[1] for v in mine), lo, max(v[3] for v in mine), 0]
