"""Bounded cost of the event-time days: after a year of days, deciding completeness costs what it
costs on day one (`python -m matos_dev.bench.days`, `make bench-days`).

Two topics of 100 partitions, each in its own container of one Swift (the compaction bench's,
on a free port): **N = 0**, one day archived (a range per partition), and **a year**, 365 days
(36,500 ranges). A range is one partition's day: 2,400 records, one every 36 s of the day, and
its manifest is the one the archive writes (`manifest.build` over an object whose `hours` are
`buckets.of_records` of those records: 24 hours each), written by 16 threads. The objects
themselves are not written: nothing that decides completeness reads them.

Each topic is first brought to its steady state: its first evaluation reads its whole history
once (timed and reported: the one-time catch-up). Then in rounds (`--repeat`, default 3), each
topic gets a new day of ranges for every partition (not timed), then is measured:

- **evaluation**: `core/days/evaluate.evaluate` as the sensor calls it (the sensor's rules, log
  ends one record past the archived ranges), which completes the previous day;
- then another new day, and the **sensor tick**: `days_<topic>_sensor` evaluated with
  `build_sensor_context` (the topic's partitions and log ends given by a stand-in for Kafka, the
  only thing not real), which requests the run of the day it completes;

in the order A B B A (evaluations, then sensor ticks), B A A B in the next round, and so on;

each with its wall time, Swift listing requests (every container GET, counted in swiftclient),
object GETs (`Store.get`) and PUTs (`Store.put`), and the state object's bytes after it. Figures are ratios year / N = 0
within a round (median and min-max over the rounds) and the ratio of the minima; the target:
time within 10%, listing requests and GETs equal.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa

from matos_dagster.core.days import buckets, evaluate, windows
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.store import Store, SwiftParams
from matos_dagster.core.topics import TopicConfig
from matos_dev.bench.history import ListingCounter, _cell, _ratio, spread

DAY = windows.DAY_MS
PER_DAY = 2400  # records of a partition's day: one every 36 s
RECORD_BYTES = 120
THREADS = 16
SENSOR_TIMEOUT_S = 60  # Dagster's default for a sensor evaluation
FIGURES = ["evaluation_s", "sensor_s"]
COUNTS = ["evaluation_listings", "evaluation_gets", "evaluation_puts", "sensor_listings", "sensor_gets",
          "sensor_puts", "state_bytes"]


def day_hours(day: int, t0: int) -> tuple[dict, int, int]:
    """The `hours` of a partition's range of day `day` (each partition's the same), its first and
    last timestamp."""
    ts = t0 + day * DAY + np.arange(PER_DAY, dtype=np.int64) * (DAY // PER_DAY)
    offsets = pa.array(np.arange(day * PER_DAY, (day + 1) * PER_DAY, dtype=np.int64))
    b, _ = buckets.of_records(pa.array(ts), offsets, np.full(PER_DAY, RECORD_BYTES))
    return buckets.to_json(b), int(ts[0]), int(ts[-1])


def range_manifest(prefix: str, r: OffsetRange, fmt: str, hours: dict, first_ts: int, last_ts: int) -> dict:
    name = layout.object_name(layout.range_dir(prefix, r), r.start, fmt)
    obj = {"name": name, "records": r.end - r.start, "bytes": (r.end - r.start) * RECORD_BYTES // 3,
           "md5": "0" * 32, "first_offset": r.start, "last_offset": r.end - 1, "min_timestamp": first_ts,
           "max_timestamp": last_ts, "record_bytes": (r.end - r.start) * RECORD_BYTES,
           "largest_record_bytes": RECORD_BYTES, "hours": hours}
    return manifest.build(r, fmt, [obj])


@contextmanager
def counting_requests():
    """`Store.get` and `Store.put` calls (every object GET and PUT of the evaluation: the state,
    manifests, open windows, window records)."""
    real_get, real_put, seen = Store.get, Store.put, {"gets": 0, "puts": 0}

    def get(store, name):
        seen["gets"] += 1
        return real_get(store, name)

    def put(store, name, *a, **kw):
        seen["puts"] += 1
        return real_put(store, name, *a, **kw)

    Store.get, Store.put = get, put
    try:
        yield seen
    finally:
        Store.get, Store.put = real_get, real_put


class FakeKafka:
    """The sensor's Kafka: the topic's partitions and their log ends, as the bench sets them."""

    def __init__(self, case: Case):
        self.case = case

    def partitions(self, topic: str) -> list[int]:
        return list(range(self.case.partitions))

    def watermarks(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        return {p: (0, self.case.log_end) for p in partitions}


class Case:
    """One topic: its container, its history (`history` days before the rounds; `days`: archived
    so far), measured in rounds."""

    def __init__(self, server, history: int, partitions: int, t0: int, say):
        self.days, self.history, self.partitions, self.t0, self.say = 0, history, partitions, t0, say
        self.cfg = TopicConfig(f"bench-days-{history}-{uuid.uuid4().hex[:6]}")
        self.params = SwiftParams(auth_url=server.auth_url, container=f"bench-days-{uuid.uuid4().hex[:6]}",
                                  user=server.user, key=server.key, prefix="kafka", retries=3, timeout_s=120)
        self.prefix = layout.join(self.params.prefix, self.cfg.prefix)
        self.rounds: list[dict] = []
        self.cursor: str | None = None  # the sensor's, from tick to tick

    @property
    def log_end(self) -> int:
        """One record past the archived ranges: the partitions are not idle, so the last day
        archived is still open and each new day completes the one before."""
        return self.days * PER_DAY + 1

    def archive_days(self, count: int) -> float:
        """The next `count` days, a range per partition each, written by THREADS threads."""
        t = time.monotonic()
        days = range(self.days, self.days + count)
        hours = {d: day_hours(d, self.t0) for d in days}
        jobs = [(p, d) for d in days for p in range(self.partitions)]

        def put(chunk: list[tuple[int, int]]) -> None:
            with Store(self.params) as store:
                for p, d in chunk:
                    r = OffsetRange(self.cfg.name, p, d * PER_DAY, (d + 1) * PER_DAY)
                    store.put_json(layout.manifest_name(self.prefix, r),
                                   range_manifest(self.prefix, r, self.cfg.format, *hours[d]))

        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(put, [jobs[k::THREADS] for k in range(THREADS)]))
        self.days += count
        return time.monotonic() - t

    def evaluate(self, store: Store, counter: ListingCounter) -> tuple[dict, list]:
        from matos_dagster.assets.windows import rules

        os.sync()  # no writeback of the new day's objects pending in the timed part
        log_ends = {p: self.log_end for p in range(self.partitions)}
        with counting_requests() as seen:
            before, t = counter.count, time.monotonic()
            done = evaluate.evaluate(store, self.prefix, self.cfg.name, rules(self.cfg), log_ends,
                                     int(time.time() * 1000))
            s = time.monotonic() - t
        return {"s": s, "listings": counter.count - before, **seen}, done

    def caught_up(self, store: Store) -> bool:
        state = store.get_json(layout.event_time_state_name(self.prefix, self.cfg.name))
        return all(v[0] >= self.log_end - 1 for v in state["partitions"].values())

    def state_bytes(self, store: Store) -> int:
        return len(store.get(layout.event_time_state_name(self.prefix, self.cfg.name)))

    def setup(self, counter: ListingCounter) -> dict:
        with Store(self.params) as store:
            store.check()
        out = {"days": self.history, "partitions": self.partitions}
        out["manifests_s"] = self.archive_days(self.history)
        out["manifests"] = self.history * self.partitions
        with Store(self.params) as store:
            # The history is read once, over as many evaluations (sensor ticks) as evaluate.MAX_READS
            # makes it: until one reads nothing new.
            first, done, longest, ticks = {"s": 0.0, "listings": 0, "gets": 0, "puts": 0}, [], 0.0, 0
            while True:
                one, new = self.evaluate(store, counter)
                ticks += 1
                longest = max(longest, one["s"])
                first = {k: first[k] + one[k] for k in first}
                done += new
                if self.caught_up(store):
                    break
            out.update({f"first_{k}": v for k, v in first.items()}, first_windows=len(done),
                       first_state_bytes=self.state_bytes(store), first_evaluations=ticks, first_longest_s=longest)
        if len(done) != self.history - 1:  # every day but the last is passed by a later one
            raise RuntimeError(f"the first evaluations of {self.history} days completed {len(done)}")
        self.sensor_tick(counter)  # Dagster's first call, not timed: nothing new, it requests nothing
        self.setup_figures = out
        self.say(f"days {self.history}: {out['manifests']:,} manifests in {out['manifests_s']:.0f}s, first "
                 f"evaluation {first['s']:.1f}s ({first['gets']:,} GETs, {first['listings']:,} listings)")
        return out

    def sensor_tick(self, counter: ListingCounter):
        """`days_<topic>_sensor` evaluated once, as the daemon does (with the cursor of its tick
        before): its result, and the call's wall time, listing requests, GETs and PUTs (the context
        built before)."""
        from dagster import build_sensor_context

        from matos_dagster.assets.windows import windows_job, windows_sensor
        from matos_dagster.resources import SwiftResource

        p = self.params
        sensor = windows_sensor(self.cfg, windows_job(self.cfg), 30)
        swift = SwiftResource(auth_url=p.auth_url, user=p.user, key=p.key, container=p.container, prefix=p.prefix,
                              retries=3)
        context = build_sensor_context(resources={"kafka": FakeKafka(self), "swift": swift}, cursor=self.cursor)
        with counting_requests() as seen:
            before, t = counter.count, time.monotonic()
            result = sensor(context)
            s = time.monotonic() - t
        self.cursor = result.cursor
        return result, {"s": s, "listings": counter.count - before, **seen}

    def measure_evaluation(self, counter: ListingCounter) -> None:
        """A new day, then the evaluation (a round's first half)."""
        out: dict = {"round": len(self.rounds), "loadavg": os.getloadavg()[0]}
        self.archive_days(1)
        with Store(self.params) as store:
            e, done = self.evaluate(store, counter)
            out.update({f"evaluation_{k}": v for k, v in e.items()}, state_bytes=self.state_bytes(store))
        self.check("evaluation", [w.key for w in done])
        self.rounds.append(out)

    def measure_sensor(self, counter: ListingCounter) -> None:
        """Another new day, then the sensor tick (the round's second half)."""
        out = self.rounds[-1]
        self.archive_days(1)
        os.sync()
        result, tick = self.sensor_tick(counter)
        out.update({f"sensor_{k}": v for k, v in tick.items()})
        self.check("sensor", [r.partition_key for r in getattr(result, "run_requests", None) or []])
        self.say(f"days {self.history} round {out['round'] + 1}: "
                 + json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))

    def check(self, what: str, keys: list[str]) -> None:
        """Each new day completes the one before it, and only that one."""
        expect = windows.key(self.t0 + (self.days - 2) * DAY, DAY)
        if keys != [expect]:
            raise RuntimeError(f"days {self.history}: the {what} completed {keys}, not {expect}")


def summarise(base: list[dict], year: list[dict]) -> dict:
    """Each figure's spread per case, its ratio year / N = 0 round by round, the ratio of the
    minima, and the counts (sorted distinct values over the rounds)."""
    out: dict = {"summary": {}, "ratios": {}, "min_ratios": {}, "counts": {}}
    for name, rounds in (("0", base), ("year", year)):
        out["summary"][name] = {f: spread([r[f] for r in rounds]) for f in FIGURES}
        out["counts"][name] = {c: sorted({r[c] for r in rounds}) for c in COUNTS}
    for f in FIGURES:
        out["ratios"][f] = spread([y[f] / b[f] for b, y in zip(base, year)])
        out["min_ratios"][f] = out["summary"]["year"][f]["min"] / out["summary"]["0"][f]["min"]
    return out


def _count(values: list[int]) -> str:
    return f"{values[0]:,}" if len(values) == 1 else f"{values[0]:,}-{values[-1]:,}"


def _compare(base: list[int], year: list[int]) -> str:
    """`equal`, or the difference of the largest values (the state's offsets have more digits)."""
    if base == year:
        return "equal"
    return f"{year[-1] - base[-1]:+,} ({year[-1] / base[-1]:.3f}×)"


def _history(days: int) -> str:
    return f"a year ({days} days)" if days == 365 else f"{days} days"


LABELS = {"evaluation_s": "evaluation after a new day (s)", "sensor_s": "sensor tick after a new day (s)",
          "evaluation_listings": "evaluation: listing requests", "evaluation_gets": "evaluation: object GETs",
          "evaluation_puts": "evaluation: object PUTs", "sensor_listings": "sensor tick: listing requests",
          "sensor_gets": "sensor tick: object GETs", "sensor_puts": "sensor tick: object PUTs",
          "state_bytes": "state object (bytes)"}


def markdown(results: dict) -> str:
    s, c, b, y = results["summary"], results["counts"], results["setup"][0], results["setup"][1]
    rows = [
        "# Event-time days: a year costs what a day costs",
        "",
        ("Whether deciding which days of a topic are complete grows with the archive's history. "
         f"Two topics of {b['partitions']} partitions: one with {b['days']} day archived (a range per "
         f"partition), one with {y['days']} days ({y['manifests']:,} ranges); each evaluated once to its "
         "steady state, then in rounds a new day of ranges for every partition and the evaluation that "
         "follows, timed with its Swift requests (`make bench-days`, `bench/days.py`)."),
        "",
        f"| | N = 0 ({b['days']} day) | {_history(y['days'])} | {_history(y['days']).split(' (')[0]} / N = 0 |",
        "| --- | ---: | ---: | ---: |",
    ]
    for f in FIGURES:
        rows.append(f"| {LABELS[f]} | {_cell(s['0'][f])} | {_cell(s['year'][f])} | {_ratio(results['ratios'][f])} "
                    f"(of the minima {results['min_ratios'][f]:.2f}×) |")
    for k in COUNTS:
        a, z = c["0"][k], c["year"][k]
        rows.append(f"| {LABELS[k]} | {_count(a)} | {_count(z)} | {_compare(a, z)} |")
    rows.append(f"| the history read once: evaluations (sensor ticks) | {b['first_evaluations']} | "
                f"{y['first_evaluations']} | |")
    rows.append(f"| their time in all / the longest one (s) | {b['first_s']:.2f} / {b['first_longest_s']:.2f} | "
                f"{y['first_s']:.2f} / {y['first_longest_s']:.2f} | |")
    rows.append(f"| their object GETs / PUTs / listing requests | {b['first_gets']:,} / {b['first_puts']:,} / "
                f"{b['first_listings']:,} | {y['first_gets']:,} / {y['first_puts']:,} / {y['first_listings']:,} | |")
    longest = max(b["first_longest_s"], y["first_longest_s"])
    rows += ["", (f"An evaluation reads at most {results.get('max_reads', '?'):,} ranges (`MAX_READS`, shared by the "
                  f"partitions) and writes about {results.get('max_writes', '?'):,} windows at most (`MAX_WRITES`), "
                  f"so the first ones catch a long history up tick by tick; the longest took "
                  f"{longest:.1f} s, {'within' if longest < SENSOR_TIMEOUT_S else '**beyond**'} Dagster's default "
                  f"sensor timeout ({SENSOR_TIMEOUT_S} s, `DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS`).")]
    rows += ["", (f"{results['repeats']} round(s) on {results.get('cores', '?')} cores, the topics in the order "
                  "A B B A, then B A A B (a trend in the machine's business falls on both alike); medians (min-max) "
                  "over the rounds, ratios per round, and of the minima over the rounds. Listing requests: every "
                  "container GET; object GETs and PUTs: `Store.get`, `Store.put`. The state object holds per "
                  "partition what is known (next offset, largest timestamp, counts): the year's offsets have more "
                  "digits; the day still open is an object of its own. The sensor tick's Kafka is a stand-in giving "
                  "the partitions' log ends; everything else is the product's code on a real Swift.")]
    return "\n".join(rows) + "\n"


def run(repeats: int = 3, partitions: int = 100, days: int = 365, say=print) -> dict:
    from matos_dev.bench.compaction import swift_only

    if repeats < 1:
        raise ValueError("--repeat must be at least 1")
    now = int(time.time() * 1000)
    t0 = now - now % DAY - (days + 2 * repeats + 10) * DAY  # every day of the run in the past
    counter = ListingCounter()
    results: dict = {"repeats": repeats, "cores": os.cpu_count(), "loadavg_start": os.getloadavg(),
                     "max_reads": evaluate.MAX_READS, "max_writes": evaluate.MAX_WRITES}
    with swift_only() as server, counter.installed():
        cases = [Case(server, n, partitions, t0, say) for n in (1, days)]
        results["setup"] = [case.setup(counter) for case in cases]
        for r in range(repeats):
            # A B B A, then B A A B: a trend in the machine's load falls on both topics alike.
            order = cases if r % 2 == 0 else cases[::-1]
            for case in order:
                case.measure_evaluation(counter)
            for case in order[::-1]:
                case.measure_sensor(counter)
    results["rounds"] = [case.rounds for case in cases]
    results["loadavg_end"] = os.getloadavg()
    results.update(summarise(*results["rounds"]))
    return results


def say(msg: str) -> None:
    print(f"bench days [{time.strftime('%H:%M:%S')}]: {msg}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--partitions", type=int, default=100, help="partitions of each topic (default 100)")
    ap.add_argument("--days", type=int, default=365, help="days of the long history (default 365)")
    ap.add_argument("--out", default=".bench", help="folder for days.json and days.md (.bench/)")
    a = ap.parse_args()
    results = run(a.repeat, a.partitions, a.days, say)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "days.json").write_text(json.dumps(results, indent=1) + "\n")
    md = markdown(results)
    (out / "days.md").write_text(md)
    print(md)


if __name__ == "__main__":
    from matos_dev.bench import unwind_on_sigterm

    unwind_on_sigterm()
    main()
