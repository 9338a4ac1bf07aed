"""Expiry by age over a year of daily ranges: what a daily run reads, on day 31 and on day 365, with
the per-partition cursor (`python -m matos_dev.bench.expiry`, `make bench-expiry`).

One topic of `--partitions` partitions, `archive_retention_days` 30, in its own Swift (on a free
port; no Kafka: expiry reads Swift only, and the archive is written straight into Swift as
bench/erasure.py writes it: the product's encoder, `manifest.build`, `hours`, `min_timestamp` and
`max_timestamp` as a slice task gives them). Each partition gets one range a day of `--records`
records, stamped through their day; the run of day d is at the end of day d, once that day's range
is archived: its cutoff is the end of day d - 30, so day 31's run is the first to expire (day 1's
range), and each run after expires one range a partition, by its manifest alone.

Every daily run from day 1 on would take too long to simulate, and the runs before the measured
ones only move the cursor, so the same state is reached quicker: `--warm` days before a measured day
the archive is written in one go (`days - warm` days, no run yet), a first run expires what is due
and leaves the cursor where daily runs would have (it looks at every range once: the cost of the
first run over an old archive, or of a run without a cursor); then each day its range is added and
the product's `expire_topics` runs with `now` that day, as the daily schedule does. Twice: up to
day 31 + `--after` (a topic of a month), and up to `--days` (a topic of a year; the first run there
is over an archive of `days - warm` days).

Each run's manifests read, objects read and deleted, ranges expired, Swift requests and wall time,
and what a run without the cursor would look at (every range archived: partitions x days). Targets:
the day-365 run's manifests read and time at most twice the day-31 run's (bounded by the
retention, not growing with the archive's age).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import time
import uuid
from pathlib import Path

import numpy as np

from matos_dagster.core.erase import key_index
from matos_dagster.core.expire.run import DAY_MS, expire_topics
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout
from matos_dagster.core.swift.store import Store, SwiftParams
from matos_dagster.core.topics import TopicConfig
from matos_dev.bench.erasure import SECRET, T0, THREADS, write_range

RETENTION_DAYS = 30
FIRST_EXPIRING = RETENTION_DAYS + 1


def stamps_of(per_range: int):
    """Range i (day i + 1) holds offsets [i * per_range, (i + 1) * per_range), stamped evenly through its day."""
    def stamps(first: int, n: int) -> np.ndarray:
        day, k = divmod(first, per_range)
        return T0 + day * DAY_MS + ((np.arange(k, k + n) + 0.5) * DAY_MS / per_range).astype(np.int64)
    return stamps


def write_days(params: SwiftParams, cfg: TopicConfig, partitions: int, days: range, per_range: int) -> None:
    """Each partition's ranges of `days` (1 = the first day), one object each, THREADS at a time."""
    prefix = layout.join(params.prefix, cfg.prefix)
    indexer = key_index.indexer(SECRET)
    work = [(p, d) for d in days for p in range(partitions)]

    def put(part: list[tuple[int, int]]) -> None:
        with Store(params) as store:
            for p, d in part:
                r = OffsetRange(cfg.name, p, (d - 1) * per_range, d * per_range)
                write_range(store, prefix, cfg, indexer, r, per_range, {}, 1000 * p + d, stamps_of(per_range))

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(put, [work[k::THREADS] for k in range(THREADS)]))


def counted(store: Store) -> dict[str, int]:
    """The Swift requests `store` makes from now on, by kind."""
    n = {"get": 0, "put": 0, "list": 0, "delete": 0, "head": 0}
    for kind, method in (("get", "get"), ("put", "put"), ("list", "list_page"), ("delete", "delete"), ("head", "head")):
        real = getattr(store, method)

        def wrapped(*a, _real=real, _kind=kind, **kw):
            n[_kind] += 1
            return _real(*a, **kw)
        setattr(store, method, wrapped)
    return n


def expire_on(params: SwiftParams, cfg: TopicConfig, day: int, partitions: int, first: bool) -> dict:
    """The product's expiry run at the end of `day`, timed."""
    with Store(params) as store:
        requests = counted(store)
        t = time.monotonic()
        done = expire_topics(store, [cfg], "bench", say=lambda _: None, now=lambda: (T0 + day * DAY_MS) / 1000)
        took = time.monotonic() - t
    parts = done.partitions
    return {"day": day, "first_run": first, "s": took, "archived_ranges": partitions * day,
            "manifests_read": sum(p.manifests_read for p in parts), "objects_read": sum(p.objects_read for p in parts),
            "objects_deleted": sum(p.deleted for p in parts), "ranges_expired": sum(len(p.spans) for p in parts),
            "objects_rewritten": sum(len(p.rewritten) for p in parts), "records_expired": done.records,
            "swift_requests": sum(requests.values())}


def simulate(params: SwiftParams, partitions: int, per_range: int, first_day: int, last_day: int, say) -> list[dict]:
    """A topic's archive up to `first_day` written at once, its first run, then a day's range and a run a day."""
    cfg = TopicConfig(f"bench-expiry-{uuid.uuid4().hex[:6]}", archive_retention_days=RETENTION_DAYS)
    t = time.monotonic()
    write_days(params, cfg, partitions, range(1, first_day + 1), per_range)
    say(f"{cfg.name}: {partitions * first_day} ranges written in {time.monotonic() - t:.0f} s")
    runs = [expire_on(params, cfg, first_day, partitions, first=True)]
    say(f"first run, day {first_day}: {runs[-1]}")
    for day in range(first_day + 1, last_day + 1):
        write_days(params, cfg, partitions, range(day, day + 1), per_range)
        runs.append(expire_on(params, cfg, day, partitions, first=False))
        say(f"day {day}: {runs[-1]}")
    return runs


def run(partitions: int, days: int, per_range: int, warm: int, after: int, say=print) -> dict:
    from matos_dev.bench.compaction import swift_only

    results: dict = {"partitions": partitions, "days": days, "records_a_range": per_range,
                     "retention_days": RETENTION_DAYS, "warm": warm, "cores": os.cpu_count(),
                     "loadavg_start": os.getloadavg()}
    with swift_only() as server:
        params = SwiftParams(auth_url=server.auth_url, container=f"bench-expiry-{uuid.uuid4().hex[:6]}",
                             user=server.user, key=server.key, prefix="kafka", retries=3, timeout_s=120)
        with Store(params) as store:
            store.check()
        results["month"] = simulate(params, partitions, per_range, FIRST_EXPIRING - warm, FIRST_EXPIRING + after, say)
        results["year"] = simulate(params, partitions, per_range, days - warm, days, say)
    results["loadavg_end"] = os.getloadavg()
    day31 = next(r for r in results["month"] if r["day"] == FIRST_EXPIRING)
    last = results["year"][-1]
    if day31["ranges_expired"] != partitions or last["ranges_expired"] != partitions:
        raise SystemExit(f"bench expiry: the runs of day {FIRST_EXPIRING} and {days} expired "
                         f"{day31['ranges_expired']} and {last['ranges_expired']} ranges, not {partitions} each")
    results["manifests_ratio"] = last["manifests_read"] / day31["manifests_read"]
    results["time_ratio"] = last["s"] / day31["s"]
    return results


def markdown(res: dict) -> str:
    rows = ["| run | ranges archived | manifests read | without the cursor | objects read | objects deleted | "
            "ranges expired | Swift requests | time |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["month"] + res["year"]:
        label = f"first run, day {r['day']}" if r["first_run"] else f"day {r['day']}"
        if r["day"] in (FIRST_EXPIRING, res["days"]) and not r["first_run"]:
            label = f"**{label}**"
        rows.append(f"| {label} | {r['archived_ranges']:,} | {r['manifests_read']:,} | {r['archived_ranges']:,} | "
                    f"{r['objects_read']:,} | {r['objects_deleted']:,} | {r['ranges_expired']:,} | "
                    f"{r['swift_requests']:,} | {r['s']:.2f} s |")
    verdict = lambda ok: "met" if ok else "**not met**"  # noqa: E731
    return "\n".join([
        f"{res['partitions']} partitions, a range a day of {res['records_a_range']} records each, "
        f"`archive_retention_days` {res['retention_days']}; each run at the end of its day, once that day's range "
        f"is archived (\"without the cursor\": every range archived, what a run reading every manifest looks at).",
        "",
        *rows,
        "",
        f"- Manifests read on day {res['days']}: {res['manifests_ratio']:.2f} times day {FIRST_EXPIRING}'s "
        f"(target at most 2: {verdict(res['manifests_ratio'] <= 2)}).",
        f"- Time on day {res['days']}: {res['time_ratio']:.2f} times day {FIRST_EXPIRING}'s "
        f"(target at most 2: {verdict(res['time_ratio'] <= 2)}).",
        "",
    ])


def say(msg: str) -> None:
    print(f"bench expiry [{time.strftime('%H:%M:%S')}]: {msg}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4: a few minutes)")
    ap.add_argument("--days", type=int, default=365, help="the last day simulated (default 365)")
    ap.add_argument("--records", type=int, default=100, help="records a range (default 100)")
    ap.add_argument("--warm", type=int, default=3, help="daily runs before a measured day, after the first (default 3)")
    ap.add_argument("--after", type=int, default=2, help=f"daily runs after day {FIRST_EXPIRING} (default 2)")
    ap.add_argument("--out", default=".bench", help="folder for expiry.json and expiry.md (.bench/)")
    a = ap.parse_args()
    if a.days <= FIRST_EXPIRING + a.after or not 0 < a.warm < FIRST_EXPIRING:
        ap.error(f"--days must be over {FIRST_EXPIRING + a.after} and --warm between 1 and {RETENTION_DAYS}")
    results = run(a.partitions, a.days, a.records, a.warm, a.after, say)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "expiry.json").write_text(json.dumps(results, indent=1) + "\n")
    md = markdown(results)
    (out / "expiry.md").write_text(md)
    print(md)


if __name__ == "__main__":
    from matos_dev.bench import unwind_on_sigterm

    unwind_on_sigterm()
    main()
