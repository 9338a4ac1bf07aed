"""Growth benchmark: does day 365 cost what day 1 costs? (`python -m matos_dagster.bench --history`)

For each N (0, 10,000, 100,000; `--quick`: 0 and 10,000; `--history-n` to choose), one topic
partition gets N ranges already archived (synthetic manifests of one offset each, written
by many threads, and the group's offset committed after them) and N Dagster partition keys.
Then, with the product's own code, as it is in this checkout:

- **archive run**: the archive asset materialised in process for the next 1,000 offsets (Spark
  local, warmed up first), as the sensor requests it (without the check);
- **monitor**: the monitor check's job executed on the instance (Dagster's evaluation included),
  twice: the second evaluation is the recurring cost;
- **sensor tick**: the lag sensor evaluated with `build_sensor_context` (median of 3);
- **reader**: `read_table` of the 1,000 offsets just archived;
- **Swift listing requests** of each of those (every container GET, counted in swiftclient);
- **partitions query**: the instance call the asset's Partitions page makes for its keys.

Figures are ratios to N = 0 within one run; the target is within 10% at N = 100,000 with the
listing requests constant.
"""

from __future__ import annotations

import concurrent.futures
import json
import statistics
import tempfile
import time
import uuid
from contextlib import contextmanager

from swiftclient import client as swift_client

from matos_dagster import layout, manifest
from matos_dagster.ranges import OffsetRange
from matos_dagster.store import Store
from matos_dagster.topics import TopicConfig

NEW_RANGE = 1000
THREADS = 16


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


def write_synthetic_history(params, cfg: TopicConfig, n: int) -> float:
    """N manifests of ranges [i, i+1) with no records (as compaction or aborted transactions leave)."""
    prefix = layout.join(params.prefix, cfg.prefix)
    t = time.monotonic()

    def put(chunk: range) -> None:
        with Store(params) as store:
            for i in chunk:
                r = OffsetRange(cfg.name, 0, i, i + 1)
                store.put_json(layout.manifest_name(prefix, r), manifest.build(r, cfg.format, []))

    step = max(1, n // (THREADS * 8))
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(put, [range(a, min(n, a + step)) for a in range(0, n, step)]))
    return time.monotonic() - t


def _produce(kafka, topic: str, count: int) -> None:
    p = kafka.producer(**{"linger.ms": 50})
    for i in range(count):
        p.produce(topic, value=b"v" * 20, key=b"k", partition=0)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("records left unsent")


def measure_n(stack, spark_resource, instance, n: int, counter: ListingCounter, say) -> dict:
    from dagster import AssetSelection, Definitions, build_sensor_context, materialize

    from matos_dagster.assets.archive import archive_asset, ranges_partitions
    from matos_dagster.assets.monitor import monitor_automation, monitor_check, monitor_job_name
    from matos_dagster.reader import read_table
    from matos_dagster.resources import SwiftResource
    from matos_dagster.sensors.lag import lag_sensor

    name = f"bench-history-{n}-{uuid.uuid4().hex[:6]}"
    stack.create_topic(name, 1)
    kafka = stack.kafka()
    cfg = TopicConfig(name, group=f"bench-{uuid.uuid4().hex[:6]}", batch_records=1_000_000, batch_age_s=3600)
    container = f"bench-history-{uuid.uuid4().hex[:6]}"
    params = stack.swift_params(container)
    out: dict = {"n": n}
    _produce(kafka, name, n + NEW_RANGE + 10)
    with Store(params) as store:
        store.check()
    out["setup_manifests_s"] = write_synthetic_history(params, cfg, n)
    if n:
        kafka.commit(name, {0: n}, cfg.group)
    t = time.monotonic()
    instance.add_dynamic_partitions(cfg.partitions_name, [OffsetRange(name, 0, i, i + 1).key for i in range(n)])
    out["setup_keys_s"] = time.monotonic() - t
    say(f"history N={n:,}: {n:,} manifests in {out['setup_manifests_s']:.0f}s, keys in {out['setup_keys_s']:.0f}s")

    new = OffsetRange(name, 0, n, n + NEW_RANGE)
    instance.add_dynamic_partitions(cfg.partitions_name, [new.key])
    swift = SwiftResource(auth_url=params.auth_url, user=params.user, key=params.key, container=container,
                          prefix=params.prefix, retries=3)
    check = monitor_check(cfg)
    _, after = monitor_automation(cfg, check, "0 0 * * *")
    asset = archive_asset(cfg)
    resources = {"kafka": kafka, "swift": swift, "spark": spark_resource}
    defs = Definitions(assets=[asset], asset_checks=[check], sensors=[after], resources=resources)
    # The archive run as Dagster runs it (the asset alone, as the sensor requests it), in process.
    with counter.measure(out, "archive_run"):
        run = materialize([asset], partition_key=new.key, instance=instance, resources=resources,
                          selection=AssetSelection.assets(asset).without_checks())
    meta = run.asset_materializations_for_node(asset.op.name)[0].metadata
    out["archive_duration_s"] = meta["duration_s"].value
    assert meta["committed_offset"].value == n + NEW_RANGE, meta["committed_offset"]
    out["archive_run_id"] = run.run_id

    job = defs.get_job_def(monitor_job_name(cfg))
    # The first evaluation on an instance may read each partition once (an incremental monitor
    # seeds its state); the recurring cost is the next one.
    with counter.measure(out, "monitor_first"):
        job.execute_in_process(instance=instance)
    with counter.measure(out, "monitor"):
        result = job.execute_in_process(instance=instance)
    evaluations = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    out["monitor_status"] = evaluations[-1].event_specific_data.metadata["status"].value if evaluations else None
    out["monitor_run_id"] = result.run_id

    sensor = lag_sensor(cfg, ranges_partitions(cfg), 30)
    _produce(kafka, name, 5)  # a few records below the batch policy: the tick reads Kafka, requests nothing
    ticks, cursor = [], None
    for _ in range(4):
        context = build_sensor_context(instance=instance, cursor=cursor, sensor_name=sensor.name,
                                       resources={"kafka": kafka})
        before, t = counter.count, time.monotonic()
        res = sensor(context)
        ticks.append(time.monotonic() - t)
        out["sensor_listings"] = counter.count - before
        cursor = res.cursor
    out["sensor_tick_s"] = statistics.median(ticks[1:])

    with counter.measure(out, "reader"):
        table = read_table(params, "kafka", name, partitions=[0], start=n, end=n + NEW_RANGE)
    assert table.num_rows == NEW_RANGE, table.num_rows

    with counter.measure(out, "partitions_query"):
        keys = instance.get_dynamic_partitions(cfg.partitions_name)
    assert len(keys) == n + 1
    say(f"history N={n:,}: " + json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}))
    return out


FIGURES = ["archive_run_s", "archive_duration_s", "monitor_first_s", "monitor_s", "sensor_tick_s", "reader_s", "partitions_query_s"]
LISTINGS = ["archive_run_listings", "monitor_first_listings", "monitor_listings", "sensor_listings", "reader_listings"]


def run(stack, sizes: list[int], say, month: bool = True) -> dict:
    from dagster import instance_for_test

    from matos_dagster.resources import SparkResource

    spark_resource = SparkResource(master="local[2]", conf="spark.ui.enabled=false")
    counter = ListingCounter()
    results: dict = {"sizes": sizes, "by_n": []}
    try:
        with counter.installed():
            # Warm up Spark (JVM, Python workers) and Dagster's imports: not timed.
            with instance_for_test() as instance:
                measure_n(stack, spark_resource, instance, 0, counter, say)
            for n in sizes:
                # A fresh instance per N, so N keys and N's runs are all it holds.
                with tempfile.TemporaryDirectory(prefix="matos-bench-home-") as home:
                    with instance_for_test(temp_dir=home) as instance:
                        results["by_n"].append(measure_n(stack, spark_resource, instance, n, counter, say))
                        if n == sizes[0] and month:
                            from matos_dagster.bench.dagster_home import simulate_month

                            r = results["by_n"][-1]
                            results["dagster_home"] = simulate_month(instance, home, r["archive_run_id"],
                                                                     r["monitor_run_id"], say)
    finally:
        if spark_resource._session is not None:
            spark_resource._session.stop()
    base = results["by_n"][0]
    results["ratios"] = {
        str(r["n"]): {f: (r[f] / base[f] if base[f] else None) for f in FIGURES} for r in results["by_n"][1:]
    }
    return results


def markdown(results: dict) -> str:
    rows = ["| N ranges archived | " + " | ".join(FIGURES + LISTINGS) + " | monitor |",
            "| ---: |" + " ---: |" * (len(FIGURES) + len(LISTINGS)) + " --- |"]
    for r in results["by_n"]:
        rows.append(f"| {r['n']:,} | " + " | ".join(f"{r[f]:.3f}" for f in FIGURES) + " | "
                    + " | ".join(str(r[f]) for f in LISTINGS) + f" | {r.get('monitor_status')} |")
    for n, ratios in results["ratios"].items():
        rows.append(f"| ratio {int(n):,} / 0 | " + " | ".join(f"{v:.2f}×" if v else "" for v in ratios.values())
                    + " |" + " |" * len(LISTINGS) + " |")
    return "\n".join(rows) + "\n"
