"""Growth benchmark: does day 365 cost what day 1 costs? (`python -m matos_dev.bench --history`)

For each N (0, 10,000, 100,000; `--quick`: 0 and 10,000; `--history-n` to choose), one topic
partition gets N ranges already archived (ranges of one offset each, and the group's offset
committed after them) and N Dagster partition keys. The most recent `KEEP_REAL` ranges are real
manifest objects (written by 16 threads through the proxy); the history below them is written
straight into the container's listing with Swift's own `ContainerBroker` (`history_rows.py`),
rows with no object behind them. No recurring path may read an old range's objects: every
object GET and HEAD is watched (`DeepReads`), and the benchmark fails if one touched a range
below the real ones. Then, with the product's own code, as it is in this checkout, in rounds
(`--repeat`, default 3; each round measures every N, alternating the order, so drift in the
machine's load falls on every N alike):

- **archive run**: the archive asset materialised in process for the next 1,000 offsets (Spark
  local, warmed up first), as the sensor requests it (without the check);
- **monitor**: the monitor check's job executed on the instance (Dagster's evaluation included).
  In the first round first as the very first evaluation of the archive (no `Known` anywhere: it
  reads the partition whole, once, and leaves its mark in Swift); in every round on the instance
  itself (the recurring cost), then on a fresh SQLite instance, as a new DAGSTER_HOME's first
  evaluation finds the archive (the mark present: the first one after a whole read, ever);
- **sensor tick**: the lag sensor evaluated with `build_sensor_context` (median of 3);
- **reader**: `read_table` of the 1,000 offsets just archived;
- **Swift listing requests** of each of those (every container GET, counted in swiftclient);
- **partitions query**: the instance call the asset's Partitions page makes for its keys.

Figures are ratios to N = 0 within one round (median and spread over the rounds), and the ratio
of the minima over the rounds (the minimum is what the code costs; the rest is the machine's
load); the target is within 10% at N = 100,000 with the listing requests constant.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import statistics
import tempfile
import time
import uuid
from contextlib import contextmanager

from swiftclient import client as swift_client

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig
from matos_dev.bench import history_rows

NEW_RANGE = 1000
THREADS = 16
KEEP_REAL = 2000  # most recent ranges written as real objects: far more than any path's neighbours
KEY_BATCH = 10_000  # Dagster keys added per call


class ListingCounter:
    """Counts container listings (GET on a container) made by any swiftclient connection."""

    def __init__(self):
        self.count = 0
        self._real = swift_client.Connection.get_container

    @contextmanager
    def installed(self):
        counter = self

        def get_container(conn, container, *args, **kwargs):
            counter.count += 1
            return counter._real(conn, container, *args, **kwargs)

        swift_client.Connection.get_container = get_container
        try:
            yield self
        finally:
            swift_client.Connection.get_container = self._real

    @contextmanager
    def measure(self, into: dict, name: str):
        before, t = self.count, time.monotonic()
        yield
        into[f"{name}_s"] = time.monotonic() - t
        into[f"{name}_listings"] = self.count - before


def deep_range_start(name: str, partition_dir: str) -> int | None:
    """Start offset of the range folder `name` lies in, if it is under `partition_dir`."""
    if not name.startswith(partition_dir + "/"):
        return None
    span = layout.parse_range_dir(name.rpartition("/")[0])
    return span[0] if span else None


class DeepReads:
    """Object GETs and HEADs of ranges that exist only as listing rows (they would get a 404).

    `watch(container, partition_dir, below)`: ranges starting below `below` in that partition
    are listing-only. Every read of one is recorded; `check()` fails loudly if there was any.
    """

    def __init__(self):
        self.watched: dict[str, tuple[str, int]] = {}
        self.reads: list[str] = []
        self._real = {m: getattr(swift_client.Connection, m) for m in ("get_object", "head_object")}

    def watch(self, container: str, partition_dir: str, below: int) -> None:
        self.watched[container] = (partition_dir, below)

    def _see(self, container: str, name: str) -> None:
        w = self.watched.get(container)
        if w is not None:
            start = deep_range_start(name, w[0])
            if start is not None and start < w[1]:
                self.reads.append(f"{container}/{name}")

    @contextmanager
    def installed(self):
        guard = self

        def wrap(real):
            def method(conn, container, obj, *args, **kwargs):
                guard._see(container, obj)
                return real(conn, container, obj, *args, **kwargs)
            return method

        for m, real in self._real.items():
            setattr(swift_client.Connection, m, wrap(real))
        try:
            yield self
        finally:
            for m, real in self._real.items():
                setattr(swift_client.Connection, m, real)

    def check(self, doing: str) -> None:
        if self.reads:
            raise RuntimeError(
                f"{doing} read {len(self.reads)} object(s) of the listing-only history (e.g. {self.reads[:3]}): "
                f"a recurring path reads old ranges, so its cost grows with the history; the benchmark's "
                f"figures would be wrong (404s), so it stops here")


def write_synthetic_history(params, cfg: TopicConfig, starts: range) -> float:
    """Real manifests of ranges [i, i+1) for i in `starts`, with no records (as compaction or
    aborted transactions leave)."""
    prefix = layout.join(params.prefix, cfg.prefix)
    t = time.monotonic()
    if not len(starts):
        return 0.0

    def put(chunk: range) -> None:
        with Store(params) as store:
            for i in chunk:
                r = OffsetRange(cfg.name, 0, i, i + 1)
                store.put_json(layout.manifest_name(prefix, r), manifest.build(r, cfg.format, []))

    step = max(1, len(starts) // (THREADS * 8))
    chunks = [range(a, min(starts.stop, a + step)) for a in range(starts.start, starts.stop, step)]
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(put, chunks))
    return time.monotonic() - t


def _produce(kafka, topic: str, count: int) -> None:
    p = kafka.producer(**{"linger.ms": 50})
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=b"v" * 20, key=b"k", partition=0)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("records left unsent")


class Case:
    """One N: its topic, container and Dagster instance, set up once and measured in rounds."""

    def __init__(self, stack, spark_resource, instance, n: int, counter: ListingCounter, deep: DeepReads,
                 say, keep_real: int = KEEP_REAL, keep_keys: int | None = None):
        self.stack, self.spark, self.instance, self.n = stack, spark_resource, instance, n
        self.counter, self.deep, self.say, self.keep_real = counter, deep, say, keep_real
        # None: a key per range (no retention); else the newest keep_keys, as the retention job leaves them.
        self.keys = n if keep_keys is None else min(n, keep_keys)
        self.rounds: list[dict] = []
        self.cursor = None

    def setup(self, rounds: int) -> dict:
        from dagster import Definitions

        from matos_dagster.assets.archive import archive_asset, ranges_partitions
        from matos_dagster.assets.monitor import MONITOR_JOB, monitor_check, monitor_job
        from matos_dagster.resources import SwiftResource
        from matos_dagster.sensors.lag import lag_sensor

        n, stack = self.n, self.stack
        self.name = name = f"bench-history-{n}-{uuid.uuid4().hex[:6]}"
        stack.create_topic(name, 1)
        self.kafka = kafka = stack.kafka()
        self.cfg = cfg = TopicConfig(name, group=f"bench-{uuid.uuid4().hex[:6]}", batch_records=1_000_000,
                                     batch_age_s=3600)
        self.container = f"bench-history-{uuid.uuid4().hex[:6]}"
        self.params = params = stack.swift_params(self.container)
        out: dict = {"n": n}
        t = time.monotonic()
        _produce(kafka, name, n + rounds * NEW_RANGE + 10)
        out["setup_produce_s"] = time.monotonic() - t
        with Store(params) as store:
            store.check()
        below = max(0, n - self.keep_real)
        out["real_ranges"] = n - below
        out["setup_manifests_s"] = write_synthetic_history(params, cfg, range(below, n))
        if below:
            prefix = layout.join(params.prefix, cfg.prefix)
            merged = history_rows.merge_history(stack.swift_server, self.container, prefix, name, 0,
                                                range(0, below), cfg.format)
            out["listing_rows"] = merged["merged"]
            out["setup_rows_s"] = merged["wall_s"]
            with Store(params) as store:
                # The proxy's listing sees them: the count, and a reverse listing from the real part down.
                count = int(store._conn.head_container(self.container)["x-container-object-count"])
                pdir = layout.partition_dir(prefix, name, 0)
                under = store.list_page(pdir + "/", marker=layout.range_dir(prefix, OffsetRange(name, 0, below, below + 1)),
                                        reverse=True, limit=1)
            expect = layout.manifest_name(prefix, OffsetRange(name, 0, below - 1, below))
            if count != n or [i["name"] for i in under] != [expect]:
                raise RuntimeError(f"the proxy's listing of {self.container} does not show the merged rows: "
                                   f"{count} objects (expected {n}), below the real ones {under[:1]}")
            self.deep.watch(self.container, pdir, below)
        if n:
            kafka.commit(name, {0: n}, cfg.group)
        t = time.monotonic()
        keys = [OffsetRange(name, 0, i, i + 1).key for i in range(n - self.keys, n)]
        for a in range(0, len(keys), KEY_BATCH):
            self.instance.add_dynamic_partitions(cfg.partitions_name, keys[a:a + KEY_BATCH])
        out["setup_keys_s"] = time.monotonic() - t
        self.say(f"history N={n:,}: {out['real_ranges']:,} manifests in {out['setup_manifests_s']:.0f}s, "
                 f"{out.get('listing_rows', 0):,} listing rows in {out.get('setup_rows_s', 0):.0f}s, "
                 f"{self.keys:,} keys in {out['setup_keys_s']:.0f}s")

        swift = SwiftResource(auth_url=params.auth_url, user=params.user, key=params.key,
                              container=self.container, prefix=params.prefix, retries=3)
        self.check = monitor_check(cfg)
        self.asset = archive_asset(cfg)
        self.resources = {"kafka": kafka, "swift": swift, "spark": self.spark}
        defs = Definitions(assets=[self.asset], asset_checks=[self.check], jobs=[monitor_job([self.check])],
                           resources=self.resources)
        self.job = defs.resolve_job_def(MONITOR_JOB)
        self.sensor = lag_sensor(cfg, ranges_partitions(cfg), 30)
        self.setup_figures = out
        return out

    def measure(self) -> dict:
        from dagster import AssetSelection, build_sensor_context, instance_for_test, materialize

        from matos_dagster.core.reader import read_table

        n, r, counter, instance = self.n, len(self.rounds), self.counter, self.instance
        start = n + r * NEW_RANGE
        out: dict = {"n": n, "round": r, "loadavg": os.getloadavg()[0]}
        new = OffsetRange(self.name, 0, start, start + NEW_RANGE)
        instance.add_dynamic_partitions(self.cfg.partitions_name, [new.key])
        # The archive run as Dagster runs it (the asset alone, as the sensor requests it), in process.
        with counter.measure(out, "archive_run"):
            run = materialize([self.asset], partition_key=new.key, instance=instance, resources=self.resources,
                              selection=AssetSelection.assets(self.asset).without_checks())
        meta = run.asset_materializations_for_node(self.asset.op.name)[0].metadata
        out["archive_duration_s"] = meta["duration_s"].value
        assert meta["committed_offset"].value == new.end, meta["committed_offset"]
        out["archive_run_id"] = run.run_id
        self.deep.check(f"the archive run at N={n:,}")

        if r == 0:
            # The very first evaluation of the archive reads each partition's history once and
            # leaves its mark in Swift (monitor/marks.py); the recurring cost is the next ones.
            with counter.measure(out, "monitor_first"):
                self.job.execute_in_process(instance=instance)
        with counter.measure(out, "monitor"):
            result = self.job.execute_in_process(instance=instance)
        evaluations = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        out["monitor_status"] = evaluations[-1].event_specific_data.metadata["status"].value if evaluations else None
        out["monitor_run_id"] = result.run_id
        self.deep.check(f"the monitor at N={n:,}")
        # A new DAGSTER_HOME (or one whose old evaluations were removed): a SQLite instance with
        # no Known of its own, which starts from the mark the evaluation above left in Swift.
        with instance_for_test() as fresh:
            with counter.measure(out, "monitor_fresh"):
                fresh_result = self.job.execute_in_process(instance=fresh)
        started = [e.event_specific_data.metadata["started_from"].value for e in fresh_result.all_events
                   if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        if started != [{"0": "mark"}]:
            raise RuntimeError(f"the fresh instance's evaluation at N={n:,} did not start from the mark: {started}")
        self.deep.check(f"the fresh instance's monitor at N={n:,}")

        _produce(self.kafka, self.name, 5)  # a few records below the batch policy: the tick reads Kafka, requests nothing
        ticks = []
        for _ in range(4):
            context = build_sensor_context(instance=instance, cursor=self.cursor, sensor_name=self.sensor.name,
                                           resources={"kafka": self.kafka})
            before, t = counter.count, time.monotonic()
            res = self.sensor(context)
            ticks.append(time.monotonic() - t)
            out["sensor_listings"] = counter.count - before
            self.cursor = res.cursor
        out["sensor_tick_s"] = statistics.median(ticks[1:])

        with counter.measure(out, "reader"):
            table = read_table(self.params, "kafka", self.name, partitions=[0], start=new.start, end=new.end)
        assert table.num_rows == NEW_RANGE, table.num_rows
        self.deep.check(f"the reader at N={n:,}")

        with counter.measure(out, "partitions_query"):
            keys = instance.get_dynamic_partitions(self.cfg.partitions_name)
        assert len(keys) == self.keys + r + 1, len(keys)
        self.say(f"history N={n:,} round {r + 1}: "
                 + json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))
        self.rounds.append(out)
        return out


FIGURES = ["archive_run_s", "archive_duration_s", "monitor_first_s", "monitor_fresh_s", "monitor_s", "sensor_tick_s",
           "reader_s", "partitions_query_s"]
LISTINGS = ["archive_run_listings", "monitor_first_listings", "monitor_fresh_listings", "monitor_listings",
            "sensor_listings", "reader_listings"]


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def summarise(cases: list[dict]) -> dict:
    """Median and spread of each figure per N, and of its ratio to N = 0 in the same round.

    `cases`: `{"n", "rounds": [figures of each round]}`, the first of them the base (N = 0).
    The first evaluation of the monitor exists in round 1 only, so its ratio is that round's.
    """
    base = cases[0]["rounds"]
    summary, ratios, listings, min_ratios = {}, {}, {}, {}
    for case in cases:
        n = str(case["n"])
        summary[n] = {f: spread([r[f] for r in case["rounds"] if f in r]) for f in FIGURES
                      if any(f in r for r in case["rounds"])}
        listings[n] = {f: sorted({r[f] for r in case["rounds"] if f in r}) for f in LISTINGS}
        if case is cases[0]:
            continue
        ratios[n], min_ratios[n] = {}, {}
        for f in FIGURES:
            if f in summary[n] and f in summary[str(cases[0]["n"])] and summary[str(cases[0]["n"])][f]["min"]:
                min_ratios[n][f] = summary[n][f]["min"] / summary[str(cases[0]["n"])][f]["min"]
            pairs = [(r[f], b[f]) for r, b in zip(case["rounds"], base) if f in r and f in b and b[f]]
            if pairs:
                ratios[n][f] = spread([x / y for x, y in pairs])
    return {"summary": summary, "ratios": ratios, "min_ratios": min_ratios, "listings": listings}


def run(stack, sizes: list[int], say, month: bool = True, repeats: int = 3, keep_real: int = KEEP_REAL,
        keep_keys: int | None = None) -> dict:
    """`keep_keys`: None gives each N a Dagster key per range; a number, only the newest that many
    (what the retention job leaves at MATOS_KEEP_KEYS)."""
    from dagster import instance_for_test

    from matos_dagster.resources import SparkResource

    if repeats < 1:
        raise ValueError("--repeat must be at least 1")
    spark_resource = SparkResource(master="local[2]", conf="spark.ui.enabled=false")
    counter, deep = ListingCounter(), DeepReads()
    results: dict = {"sizes": sizes, "repeats": repeats, "keep_real": keep_real, "keep_keys": keep_keys,
                     "loadavg_start": os.getloadavg()}
    try:
        with counter.installed(), deep.installed(), contextlib.ExitStack() as stack_of_homes:
            cases = []
            for n in sizes:
                # A fresh instance per N, so N keys and N's runs are all it holds.
                home = stack_of_homes.enter_context(tempfile.TemporaryDirectory(prefix="matos-bench-home-"))
                instance = stack_of_homes.enter_context(instance_for_test(temp_dir=home))
                case = Case(stack, spark_resource, instance, n, counter, deep, say, keep_real, keep_keys)
                case.home = home
                case.setup(repeats)
                cases.append(case)
            # Warm up Spark (JVM, Python workers) and Dagster's imports: not timed. After the setup,
            # which takes minutes at a million: the first round then finds Spark as warm as the next.
            with instance_for_test() as instance:
                warm = Case(stack, spark_resource, instance, 0, counter, deep, say, keep_real)
                warm.setup(1)
                warm.measure()
            for r in range(repeats):
                # Alternate the order, so a trend in the machine's load does not favour one N.
                for case in (cases if r % 2 == 0 else cases[::-1]):
                    case.measure()
            results["by_n"] = [{"n": c.n, "setup": c.setup_figures, "rounds": c.rounds} for c in cases]
            if month:
                from matos_dev.bench.dagster_home import simulate_month

                first = cases[0]
                results["dagster_home"] = simulate_month(first.instance, first.home, first.rounds[0]["archive_run_id"],
                                                         first.rounds[0]["monitor_run_id"], say)
    finally:
        if spark_resource._session is not None:
            spark_resource._session.stop()
    results["loadavg_end"] = os.getloadavg()
    results.update(summarise(results["by_n"]))
    return results


def _cell(s: dict) -> str:
    """`median` alone from one round, `median (min-max)` from several."""
    if len(s["values"]) == 1:
        return f"{s['median']:.3f}"
    return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"


def _counts(values: list[int]) -> str:
    """Listing requests over the rounds: one number when constant, else `min-max`."""
    if not values:
        return ""
    return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"


def _ratio(s: dict) -> str:
    if len(s["values"]) == 1:
        return f"{s['median']:.2f}×"
    return f"{s['median']:.2f}× ({s['min']:.2f}-{s['max']:.2f})"


LABELS = {
    "archive_run_s": "archive run (wall)", "archive_duration_s": "its `duration_s`",
    "monitor_first_s": "monitor, first ever (no mark: one whole read)",
    "monitor_fresh_s": "monitor, fresh instance's first (from the mark)", "monitor_s": "monitor, next evaluations",
    "sensor_tick_s": "sensor tick", "reader_s": "reader, 1,000 offsets", "partitions_query_s": "partitions query",
}


def markdown(results: dict) -> str:
    figs = FIGURES
    rows = ["| N ranges archived | " + " | ".join(LABELS[f] for f in figs)
            + " | listing requests: archive run / monitor first ever / fresh / next / sensor tick / reader | monitor |",
            "| ---: |" + " ---: |" * len(figs) + " :---: | --- |"]
    for case in results["by_n"]:
        n = str(case["n"])
        s = results["summary"][n]
        lst = results["listings"][n]
        statuses = sorted({str(r.get("monitor_status")) for r in case["rounds"]})
        rows.append(f"| {case['n']:,} | " + " | ".join(_cell(s[f]) if f in s else "" for f in figs) + " | "
                    + " / ".join(_counts(lst[f]) for f in LISTINGS)
                    + f" | {', '.join(statuses)} |")
    for n, ratios in results["ratios"].items():
        rows.append(f"| ratio {int(n):,} / 0 | " + " | ".join(
            _ratio(ratios[f]) if f in ratios else "" for f in figs) + " | | |")
    for n, ratios in results.get("min_ratios", {}).items():
        rows.append(f"| ratio of minima {int(n):,} / 0 | " + " | ".join(
            f"{ratios[f]:.2f}×" if f in ratios else "" for f in figs) + " | | |")
    rows.append("")
    rows.append(f"{results['repeats']} round(s); medians (min-max) over the rounds; ratios per round to N = 0, "
                "and of the minima over the rounds; the most recent {results['keep_real']:,} ranges "
                f"real objects, older ones listing rows only (none read); Dagster keys: "
                f"{'a key per range' if results.get('keep_keys') is None else 'the newest ' + format(results['keep_keys'], ',')}.")
    return "\n".join(rows) + "\n"
