"""Where an archive run's time goes, at N = 0 and N ranges already archived, runs interleaved.

`python -m matos_dev.bench.archive_phases [--n 10000] [--runs 6]`

Two topics on one stack, one with nothing archived and one with N ranges (real manifests, as
bench/history.py writes them, and N Dagster keys), each archived `--runs` times in turn
(A B B A ...: a change in the machine's load falls on both alike) after a warm-up, in one
process with one Spark session. Each run is split without a profiler: Dagster's part (wall minus
the asset's own `duration_s`), the Spark job (`run_tasks`), inside it the task's own time and its
PUTs (timed in the executor's Python worker), and the driver's Swift and Kafka calls (the rest of
`duration_s`). Prints the medians per N and their ratio.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack

from matos_dagster.core.archive import range_run as archive_mod
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift.store import Store
from matos_dagster.core.topics import TopicConfig

RANGE = 1000
TIMED = ("run_tasks", "_refuse_overlaps", "advance", "_remove_strays")


def timed_slice(log_path: str, job):
    """`archive_slice`, timed in the executor's Python worker; its times appended to `log_path`."""
    from matos_dagster.core.archive import slice_task
    from matos_dagster.core.swift.store import Store as WorkerStore

    real_put, spent = WorkerStore.put, {"put": 0.0}

    def put(self, *a, **k):
        t = time.monotonic()
        try:
            return real_put(self, *a, **k)
        finally:
            spent["put"] += time.monotonic() - t

    WorkerStore.put = put
    t = time.monotonic()
    try:
        return slice_task.archive_slice(job)
    finally:
        WorkerStore.put = real_put
        with open(log_path, "a") as f:
            f.write(json.dumps({"task": time.monotonic() - t, "put": spent["put"]}) + "\n")


TASK_LOG = os.path.join(tempfile.gettempdir(), f"matos-archive-phases-{os.getpid()}.jsonl")


def _instrument(phase: dict) -> None:
    archive_mod.archive_slice = functools.partial(timed_slice, TASK_LOG)  # pickled to the workers by reference
    for name in TIMED:
        real = getattr(archive_mod, name)

        def wrapper(*a, _real=real, _name=name, **k):
            t = time.monotonic()
            try:
                return _real(*a, **k)
            finally:
                phase[_name] = phase.get(_name, 0.0) + time.monotonic() - t

        setattr(archive_mod, name, wrapper)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m matos_dev.bench.archive_phases", description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10_000, help="ranges already archived in the second topic")
    p.add_argument("--runs", type=int, default=6, help="timed runs per N, after one warm-up each")
    args = p.parse_args(argv)

    from dagster import AssetSelection, instance_for_test, materialize

    from matos_dagster.assets.archive import archive_asset
    from matos_dagster.resources import SparkResource, SwiftResource
    from matos_dev.bench import history
    from matos_dev.bench.stack import running_stack

    phase: dict = {}
    _instrument(phase)
    spark = SparkResource(master="local[2]", conf="spark.ui.enabled=false")
    rows: dict = {0: [], args.n: []}
    try:
        with running_stack() as stack, ExitStack() as es:
            cases = {}
            for n in rows:
                instance = es.enter_context(instance_for_test(temp_dir=es.enter_context(tempfile.TemporaryDirectory())))
                name = f"phases-{n}-{uuid.uuid4().hex[:6]}"
                stack.create_topic(name, 1)
                kafka = stack.kafka()
                cfg = TopicConfig(name, group=f"phases-{uuid.uuid4().hex[:6]}", batch_records=1_000_000, batch_age_s=3600)
                params = stack.swift_params(f"phases-{uuid.uuid4().hex[:6]}")
                history._produce(kafka, name, n + (args.runs + 1) * RANGE + 10)
                with Store(params) as store:
                    store.check()
                setup_s = history.write_synthetic_history(params, cfg, range(n))
                if n:
                    kafka.commit(name, {0: n}, cfg.group)
                    instance.add_dynamic_partitions(cfg.partitions_name, [OffsetRange(name, 0, i, i + 1).key for i in range(n)])
                print(f"N={n:,}: {n:,} manifests in {setup_s:.0f}s", flush=True)
                swift = SwiftResource(auth_url=params.auth_url, user=params.user, key=params.key,
                                      container=params.container, prefix=params.prefix, retries=3)
                cases[n] = (instance, cfg, archive_asset(cfg), {"kafka": kafka, "swift": swift, "spark": spark})
            for i in range(args.runs + 1):  # run 0 of each N warms up (Spark's first job): not counted
                for n in (list(rows) if i % 2 == 0 else list(rows)[::-1]):
                    instance, cfg, asset, resources = cases[n]
                    r = OffsetRange(cfg.name, 0, n + RANGE * i, n + RANGE * (i + 1))
                    instance.add_dynamic_partitions(cfg.partitions_name, [r.key])
                    phase.clear()
                    if os.path.exists(TASK_LOG):
                        os.remove(TASK_LOG)
                    t = time.monotonic()
                    result = materialize([asset], partition_key=r.key, instance=instance, resources=resources,
                                         selection=AssetSelection.assets(asset).without_checks())
                    wall = time.monotonic() - t
                    duration = result.asset_materializations_for_node(asset.op.name)[0].metadata["duration_s"].value
                    with open(TASK_LOG) as f:
                        tasks = [json.loads(line) for line in f]
                    task = sum(x["task"] for x in tasks)
                    row = {"wall": wall, "duration_s": duration, "dagster": wall - duration,
                           "spark_job": phase["run_tasks"], "task": task, "task_puts": sum(x["put"] for x in tasks),
                           "spark_overhead": phase["run_tasks"] - task,
                           "driver_swift_kafka": duration - phase["run_tasks"],
                           **{k: phase.get(k, 0.0) for k in TIMED if k != "run_tasks"}}
                    print(f"N={n:,} run {i}: " + json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
                    if i:
                        rows[n].append(row)
    finally:
        if spark._session is not None:
            spark._session.stop()
    medians = {n: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for n, rs in rows.items()}
    print(f"medians of {args.runs} interleaved runs, os.getloadavg() at the end {os.getloadavg()}:")
    print("| phase | N = 0 | N = " + f"{args.n:,} | ratio |\n| --- | ---: | ---: | ---: |")
    for k in medians[0]:
        a, b = medians[0][k], medians[args.n][k]
        print(f"| {k} | {a:.3f} s | {b:.3f} s | {b / a:.2f}× |" if a else f"| {k} | {a:.3f} s | {b:.3f} s | |")
    return 0


if __name__ == "__main__":
    from matos_dev.bench import unwind_on_sigterm

    unwind_on_sigterm()
    sys.exit(main())
