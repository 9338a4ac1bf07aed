"""Where one slice task's time goes: `python -m matos_dagster.bench.profile [--records N] [--value-bytes B]`.

Runs `slice_task.archive_slice` in this process (no Spark: the task's own code) over one
range of the bench's records, on the bench's own Kafka and Swift, under cProfile, and
prints wall and CPU time and the share of the task's phases: reading (`consume`), the
per-record loop, building the Arrow table, Parquet, md5, and the PUT. cProfile slows
Python code more than C code, so the shares are indicative; `py-spy record -- python -m
matos_dagster.bench.profile` samples without that bias (py-spy is not a dependency).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
import uuid

from matos_dagster.bench.stack import Workload, produce_workload, running_stack
from matos_dagster.ranges import OffsetRange
from matos_dagster.slice_task import SliceJob, archive_slice
from matos_dagster.store import Store

# (label, how the function shows in pstats: file suffix or name, function name)
PHASES = [
    ("consume (Kafka fetch)", "~", "<method 'consume' of 'cimpl.Consumer' objects>"),
    ("Batch.add", "records.py", "add"),
    ("Batch.table (Arrow)", "records.py", "table"),
    ("Parquet encode", "records.py", "to_parquet"),
    ("md5", "~", "<built-in method _hashlib.openssl_md5>"),
    ("PUT (swiftclient)", "client.py", "put_object"),
    ("the whole task", "slice_task.py", "archive_slice"),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m matos_dagster.bench.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--value-bytes", type=int, default=1024)
    args = p.parse_args(argv)
    with running_stack() as stack:
        topic = f"bench-profile-{uuid.uuid4().hex[:6]}"
        stack.create_topic(topic, 1)
        produce_workload(stack.kafka(), topic, Workload("P", args.records, args.value_bytes, partitions=1))
        (r,) = stack.ranges(topic)
        job = SliceJob(slice=OffsetRange(topic, 0, r.start, r.end), directory=f"profile/{topic}",
                       kafka_conf=stack.kafka().client_config(), group="bench-profile",
                       swift=stack.swift_params(f"bench-profile-{uuid.uuid4().hex[:6]}"))
        with Store(job.swift) as store:
            store.check()  # creates the container
        archive_slice(job)  # warm: imports, connections
        profiler = cProfile.Profile()
        wall, cpu = time.perf_counter(), time.process_time()
        profiler.enable()
        written = archive_slice(job)
        profiler.disable()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = pstats.Stats(profiler)
    total = _cumulative(stats, "slice_task.py", "archive_slice")
    print(f"{args.records:,} records of {args.value_bytes} B, {len(written)} object(s): {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU in this process, {args.records / wall:,.0f} records/s (under cProfile)")
    for label, where, name in PHASES:
        t = _cumulative(stats, where, name)
        print(f"  {label:<24} {t:6.2f} s  {100 * t / total:5.1f}%")
    loop = total - sum(_cumulative(stats, w, n) for _, w, n in PHASES[:-1])
    print(f"  {'the rest (per-record loop)':<24} {loop:6.2f} s  {100 * loop / total:5.1f}%")
    return 0


def _cumulative(stats: pstats.Stats, where: str, name: str) -> float:
    return sum(v[3] for (file, _, func), v in stats.stats.items() if func == name and file.endswith(where))


if __name__ == "__main__":
    raise SystemExit(main())
