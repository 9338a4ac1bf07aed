"""When a topic partition gets its next range: the lag sensor's decisions, without Dagster.

Per partition the sensor remembers (in its cursor) the range it last requested and how
that went. Each tick it brings the partition's offsets and the state of that range's run,
and `decide` says what to do: request a new range, request the same range again, or wait,
always with a reason. Rules (docs/design.md): ranges of one partition are archived in order, at
most one in flight; a failed range is requested again, never skipped; a backlog is cut into
ranges no larger than the topic's maximum.

A failed range whose offsets are archived already is not requested again: no run of it can
succeed. Committed past its end (another run archived it), it is done; refused for overlapping
an archived entry (an operator's range of another cut), the partition's next range is planned
from that entry: the offsets below it, or those after it. A range given up after MAX_ATTEMPTS
failures leaves its partition `stopped`: the monitor reports it, with the one command that goes
on (`stopped_reason`).
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, replace

from matos_dagster.core.archive import loss
from matos_dagster.core.offsets.ranges import OffsetRange, parse_key
from matos_dagster.core.topics import TopicConfig

MAX_ATTEMPTS = 5

IN_FLIGHT = "in_flight"  # run queued, starting or running, or not created yet
SUCCEEDED = "succeeded"
FAILED = "failed"  # failed or canceled
MISSING = "missing"  # no run with the key in run storage: not created yet, or deleted by run retention

# A requested run the daemon has not created within this long never will be: its key is judged
# by the committed offset instead (run retention deletes old runs, so runs do vanish).
VANISHED_AFTER_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class PartitionState:
    """What the cursor keeps for one partition."""

    next: int | None = None  # end of the last range archived (or requested, while in flight)
    key: str | None = None  # partition key of the range requested last
    attempt: int = 0  # runs requested for that key so far
    done: bool = True  # its run succeeded
    committed: int | None = None  # committed offset seen at the last tick
    oldest_start: int | None = None  # `start` the age below was read for
    oldest_ts_ms: int | None = None  # timestamp of the first pending record
    requested_ms: int | None = None  # when `key`'s latest run was requested (or first found missing)
    run: str | None = None  # the run key of the run that carries `key` (a batch run carries many ranges)
    stopped: bool | None = None  # True: `key` failed MAX_ATTEMPTS times and is no longer requested

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, doc: dict) -> "PartitionState":
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})


@dataclass(frozen=True)
class Offsets:
    low: int  # log start offset
    high: int  # log end offset
    committed: int | None


@dataclass(frozen=True)
class Decision:
    state: PartitionState
    request: OffsetRange | None = None
    run_key: str | None = None
    reason: str = ""
    warning: str | None = None  # something an operator should see (moved offset, data loss, give-up)


def start_of_next(state: PartitionState, offsets: Offsets) -> int:
    """Where the next range starts: the committed offset, or where our last range ended.

    Committed is the truth of what is archived. If someone moved it back, the ranges we
    archived past it still exist, so we go on after them (the next run re-commits forward);
    if someone moved it forward, we follow it (the monitor reports the gap it leaves).
    """
    committed = offsets.committed if offsets.committed is not None else offsets.low
    if state.next is not None and state.next > committed:
        return state.next
    return committed


def decide(
    topic: TopicConfig,
    partition: int,
    state: PartitionState,
    offsets: Offsets,
    run: str | None,
    now_ms: int,
    oldest_ts_ms: int | None = None,
    avg_record_bytes: float | None = None,
    archived_over: tuple[int, int] | None = None,
) -> Decision:
    """`run`: IN_FLIGHT, SUCCEEDED, FAILED or MISSING for `state.key`'s latest run (None if no key).
    `archived_over`: for a FAILED run that refused the range because offsets of it are archived
    already, the first archived entry it overlaps, `[start, end)`."""
    warning = None
    if state.committed is not None and offsets.committed != state.committed and (
        offsets.committed is None or state.next is None or offsets.committed != state.next
    ):
        warning = (
            f"{topic.name}/{partition}: the committed offset of group {topic.group} moved from "
            f"{state.committed} to {offsets.committed} by someone else"
        )
    state = replace(state, committed=offsets.committed)

    if state.key is not None and not state.done:
        vanished = run == MISSING
        if vanished:
            run, state = _missing_run(state, offsets, now_ms)
        if run == IN_FLIGHT:
            return Decision(state, reason=f"range {state.key} is in flight", warning=warning)
        if run == FAILED and offsets.committed is not None and offsets.committed >= parse_key(state.key).end:
            run = SUCCEEDED  # another run archived it since (an operator's, say after a give-up)
        elif run == FAILED and archived_over is not None:
            d = _replan(topic, partition, state, offsets, archived_over, now_ms)
            if d.request is not None:
                return replace(d, warning=_join(warning, d.warning))
            state, warning = d.state, _join(warning, d.warning)
            run = SUCCEEDED  # what is archived of it is done: the next range is planned below
        if run == FAILED:
            if state.attempt >= MAX_ATTEMPTS:
                state = replace(state, stopped=True)
                return Decision(
                    state,
                    reason=f"range {state.key} failed {state.attempt} times; waiting for an operator",
                    warning=stopped_reason(topic.name, partition, state),
                )
            state = replace(state, attempt=state.attempt + 1, requested_ms=now_ms)
            return Decision(
                state,
                request=parse_key(state.key),
                run_key=f"{state.key}#{state.attempt}",
                reason=(
                    f"range {state.key} has no run in run storage and the committed offset is below its end"
                    if vanished else f"range {state.key} failed"
                ) + f"; requested again (attempt {state.attempt} of {MAX_ATTEMPTS})",
                warning=warning,
            )
        # SUCCEEDED: the range is archived.
        state = replace(state, done=True, requested_ms=None, stopped=None)

    start = start_of_next(state, offsets)
    pending = offsets.high - start
    if pending <= 0:
        return Decision(replace(state, next=start), reason="no new records", warning=warning)
    if start < offsets.low:
        return Decision(
            state,
            reason=f"offsets [{start}, {offsets.low}) were deleted before they were archived",
            warning=f"{topic.name}/{partition}: DATA LOSS: offsets [{start}, {offsets.low}) were deleted by "
            f"retention before they were archived. To go on, acknowledge the loss: {loss.command(topic.name, partition)}",
        )

    if state.oldest_start != start:
        # No timestamp (the record has none, or the fetch found nothing in time): the age then
        # counts from now, so the batch age still bounds the wait.
        state = replace(state, oldest_start=start, oldest_ts_ms=oldest_ts_ms if oldest_ts_ms is not None else now_ms)
    age_s = (now_ms - state.oldest_ts_ms) / 1000 if state.oldest_ts_ms is not None else 0.0
    est_bytes = pending * avg_record_bytes if avg_record_bytes else 0
    if pending >= topic.batch_records:
        why = f"{pending} records waiting (batch: {topic.batch_records})"
    elif est_bytes >= topic.batch_bytes:
        why = f"about {est_bytes:.0f} bytes waiting (batch: {topic.batch_bytes})"
    elif age_s >= topic.batch_age_s:
        why = f"oldest waiting record is {age_s:.0f}s old (batch: {topic.batch_age_s:.0f}s)"
    else:
        return Decision(
            state,
            reason=f"{pending} records waiting, {age_s:.0f}s old: below the batch policy",
            warning=warning,
        )
    end = min(offsets.high, start + topic.max_range_records)
    r = OffsetRange(topic.name, partition, start, end)
    state = replace(state, next=end, key=r.key, attempt=1, done=False, oldest_start=None, oldest_ts_ms=None,
                    requested_ms=now_ms, stopped=None)
    return Decision(state, request=r, run_key=r.key, reason=why, warning=warning)


def stopped_reason(topic: str, partition: int, state: PartitionState) -> str:
    """What a stopped partition waits for, and the one command that goes on: the range archived by
    hand (a run of the asset; it archives any pending range below it first), after which the
    committed offset is past the range's end and the sensor plans the next one."""
    return (f"{topic}/{partition}: range {state.key} failed {state.attempt} times and is no longer requested "
            f"automatically: see its runs, fix the cause, then run: {sys.executable} -m matos_dagster archive "
            f"{state.key}")


def _replan(topic: TopicConfig, partition: int, state: PartitionState, offsets: Offsets,
            archived: tuple[int, int], now_ms: int) -> Decision:
    """The range `state.key`, refused because `archived` (an entry of the archive) overlaps it, planned
    anew from what the archive holds: the offsets below the entry as a range of their own, requested
    now (they were due already); or, the entry holding its start, no request and `next` after the
    entry (the caller plans from there, under the batch policy)."""
    r = parse_key(state.key)
    a, b = archived
    start = max(r.start, offsets.committed if offsets.committed is not None else offsets.low)
    said = (f"{topic.name}/{partition}: range {state.key} was refused: offsets [{a}, {b}) of it are archived "
            "already (by another run); ")
    if a > start:
        new = OffsetRange(topic.name, partition, start, min(a, start + topic.max_range_records))
        state = replace(state, next=new.end, key=new.key, attempt=1, done=False, requested_ms=now_ms, stopped=None)
        return Decision(state, request=new, run_key=new.key, reason=f"range {r.key} refused as archived in part; "
                        f"the offsets below the archived [{a}, {b})", warning=said + f"requesting {new} instead")
    state = replace(state, next=max(b, start), done=True, requested_ms=None, stopped=None)
    return Decision(state, warning=said + f"the partition goes on from offset {state.next}")


def _join(*warnings: str | None) -> str | None:
    return "; ".join(w for w in warnings if w) or None


def _missing_run(state: PartitionState, offsets: Offsets, now_ms: int) -> tuple[str, PartitionState]:
    """What a requested key with no run in storage means: IN_FLIGHT, SUCCEEDED or FAILED.

    Just requested, the daemon may not have created the run yet. Long after, the run was
    deleted (run retention) or never created: whether it archived its range is then read from
    the committed offset, which a successful run moves to at least the range's end (ranges of a
    partition are archived in order). Below it, the range is requested again: a run of an
    archived range rewrites the same objects byte for byte, so a wrong guess costs a run, never
    a gap or a duplicate.
    """
    if state.requested_ms is None:  # a cursor written before this field: start the clock now
        return IN_FLIGHT, replace(state, requested_ms=now_ms)
    if now_ms - state.requested_ms < VANISHED_AFTER_MS:
        return IN_FLIGHT, state
    end = parse_key(state.key).end
    if offsets.committed is not None and offsets.committed >= end:
        return SUCCEEDED, state
    return FAILED, state
