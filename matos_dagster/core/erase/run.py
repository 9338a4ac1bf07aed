"""An erasure request carried out, then recorded: the order that makes a re-run end in the same state.

1. the request's entry in each topic's ledger (ledger.py): from then on every writer leaves the
   records out, whatever this run does next;
2. each partition of each topic rewritten without the records (rewrite.py), in its turn
   (`in_turn`: the Dagster shell makes the partition's archive runs wait); the days that held them
   marked to be counted again (core/days/erased.py); then, still in its turn, its Iceberg table
   brought in step (table.py: the erased ranges' files swapped, older snapshots expired);
3. the erasure's record (`_erasure/records/<id>.json`): when, by which run, the reason, the
   topics, per partition the records erased and the objects rewritten; keyed hashes, never a key;
4. the request deleted.

Killed anywhere, the same request run again finds the ledger entry there, rewrites what is left,
and writes the record once all is done. No Dagster imports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Callable, Iterable

from matos_dagster.core import faults
from matos_dagster.core.days import erased as erased_days
from matos_dagster.core.erase import keys, ledger, request, versions
from matos_dagster.core.erase.rewrite import PartitionErased, erase_partition
from matos_dagster.core.erase.table import forget_in_table
from matos_dagster.core.swift import incarnations, layout
from matos_dagster.core.swift.archived import archived_partitions
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

log = logging.getLogger(__name__)

# (topic, partitions, erase one partition) -> each partition's outcome, each erased in its turn.
InTurn = Callable[[str, list[int], Callable[[int], PartitionErased]], list[PartitionErased]]


def one_by_one(topic: str, partitions: list[int], erase: Callable[[int], PartitionErased]) -> list[PartitionErased]:
    """No turns: for the core's callers that are alone on the archive (tests, a maintenance window)."""
    return [erase(p) for p in partitions]


@dataclass
class Forgotten:
    record: dict
    record_name: str
    partitions: list[PartitionErased]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)


def carry_out(request_id: str, store: Store, topics: dict[str, TopicConfig], secret_setting: str, run_id: str = "",
              in_turn: InTurn = one_by_one, say: Callable[[str], None] = log.info) -> Forgotten:
    """Carry out the request `request_id` (steps above). `topics`: the configs of its topics (their
    prefixes); `secret_setting`: MATOS_ERASURE_KEY's value. A request already carried out (its
    record there, the request gone) is refused in one line."""
    base = store.params.prefix
    req = request.read(store, base, request_id)
    if req is None:
        done = layout.erasure_record_name(base, request_id)
        raise request.RequestError(
            f"no erasure request {request_id}" + (f": it was carried out, see {done}" if store.head(done) else
                                                  "; make one with `matos forget`"))
    name = layout.erasure_record_name(base, req.id)
    known = store.get_json(name)
    if known is not None:  # killed after its record: only the request is left to delete
        request.delete(store, base, req.id)
        return Forgotten(known, name, [])
    secret = keys.erasure_key(secret_setting)
    if keys.key_id(secret) != req.key_id:
        raise request.RequestError(f"request {req.id} was hashed with another {keys.SETTING} (key id {req.key_id}): "
                                   "run it with the key `matos forget` had")
    missing = sorted(set(req.topics) - set(topics))
    if missing:
        raise request.RequestError(f"request {req.id} names topics the topics file lacks: {', '.join(missing)}")
    kept = versions.refusal(store)  # before the ledger: a refused erasure changes nothing
    if kept is not None:
        raise request.RequestError(f"request {req.id}: {kept}")
    matcher = keys.Matcher(secret, frozenset(req.hashes))
    for t in sorted(req.topics):
        ledger.add(store, _prefix(store, topics[t]), t, req)
    faults.at("forget-after-ledger")
    progress = {k: set(v) for k, v in (req.progress or {}).items()}

    def erase(t: str, prefix: str, p: int, n: int = 1) -> PartitionErased:
        where = f"{t}/{p}" if n == 1 else f"{t}/incarnation={n}/{p}"

        def on_range(span: tuple[int, int], offsets: list[int]) -> None:
            progress.setdefault(where, set()).update(offsets)
            request.write(store, base, replace(req, progress={k: sorted(v) for k, v in progress.items()}))

        # The days to count again (a topic without windows has none).
        marks = erased_days.Marks(store, prefix, t, req.id, name, p) if topics[t].time_window != "none" else None
        done = erase_partition(store, prefix, t, p, matcher, say, progress.get(where, ()), on_range, marks)
        done.incarnation = n
        forget_in_table(store, prefix, topics[t], p, done.offsets, n, f"run the forget job again with request {req.id}",
                        say)
        return done

    outcomes: list[PartitionErased] = []
    for t, ends in sorted(req.topics.items()):
        prefix = _prefix(store, topics[t])
        *earlier, now = incarnations.read(store, prefix, t)
        # Every log that carried the name holds the key's records: the earlier ones are closed (no
        # writer but this one reaches them), Kafka's log now is erased in each partition's turn.
        for inc in earlier:
            mine = inc.prefix(prefix)
            for p in archived_partitions(store, mine, t):
                outcomes.append(erase(t, mine, p, inc.number))
        mine = now.prefix(prefix)
        parts = sorted(set(ends) | set(archived_partitions(store, mine, t)))
        outcomes += in_turn(t, parts, lambda p, t=t, mine=mine, n=now.number: erase(t, mine, p, n))
    record = record_of(req, run_id, outcomes)
    store.put_json(name, record)
    faults.at("forget-after-record")
    request.delete(store, base, req.id)
    say(f"erasure {req.id}: {sum(p.records for p in outcomes)} record(s) erased from {len(req.topics)} topic(s); "
        f"recorded in {name}")
    return Forgotten(record, name, outcomes)


def record_of(req: request.Request, run_id: str, outcomes: Iterable[PartitionErased]) -> dict:
    """The erasure's record: keyed hashes, never a key (docs/operations/forgetting.md shows it)."""
    topics: dict[str, dict] = {}
    for p in outcomes:
        label = p.topic if p.incarnation == 1 else f"{p.topic}/incarnation={p.incarnation}"  # an earlier log's
        topics.setdefault(label, {})[str(p.partition)] = {
            "log_end_at_request": req.topics.get(p.topic, {}).get(p.partition),
            "records_erased": p.records,
            "objects_rewritten": p.rewritten,
            "objects_deleted": p.deleted,
            "objects_read": p.objects_read,
            "objects_skipped": p.objects_skipped,  # their key index says they hold none of the keys
            "bytes_read": p.bytes_read,
            "bytes_written": p.bytes_written,
        }
    return {"id": req.id, "requested_at": req.requested_at,
            "done_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "run_id": run_id,
            "reason": req.reason, "key_id": req.key_id, "hashes": list(req.hashes),
            "records_erased": sum(v["records_erased"] for ps in topics.values() for v in ps.values()),
            **{k: sum(v[k] for ps in topics.values() for v in ps.values())
               for k in ("objects_read", "objects_skipped", "bytes_read", "bytes_written")},
            "topics": {t: dict(sorted(ps.items(), key=lambda kv: int(kv[0]))) for t, ps in sorted(topics.items())}}


def _prefix(store: Store, topic: TopicConfig) -> str:
    return layout.join(store.params.prefix, topic.prefix)
