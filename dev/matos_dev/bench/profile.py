"""Where one slice task's time goes: `python -m matos_dev.bench.profile [--records N] [--value-bytes B]`.

Runs `slice_task.archive_slice` in this process (no Spark: the task's own code) over one
range of the bench's records, on the bench's own Kafka and Swift, under cProfile, and
prints wall and CPU time and the share of the task's phases: reading (`consume`), the
per-record loop, building the Arrow table, Parquet, md5, and the PUT. cProfile slows
Python code more than C code, so the shares are indicative; `py-spy record -- python -m
matos_dev.bench.profile` samples without that bias (py-spy is not a dependency).

Before the profiled run, one run without the profiler measures the task's memory: the peak
of this process's RSS and of Arrow's memory pool above what they were before the task, next
to `object_bytes` (`--object-mib`, 64 by default as the topic default), and its wall and CPU time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
import uuid

from matos_dagster.core.archive.slice_task import SliceJob, archive_slice
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import ObjectWriter
from matos_dagster.core.swift.store import Store
from matos_dev.bench.memory import SelfSampler
from matos_dev.bench.stack import Workload, produce_workload, running_stack

# (label, how the function shows in pstats: file suffix or name, function name)
# Phases that do not nest in one another; the last is the whole.
PHASES = [
    ("consume (Kafka fetch)", "~", "<method 'consume' of 'cimpl.Consumer' objects>"),
    ("chunks: Arrow + encode", "records/batch.py", "_seal"),
    # The native reader (MATOS_NATIVE_READER=1, the default when built): its C call, and its chunks encoded.
    ("native read (C)", "native/__init__.py", "next"),
    ("native chunks: encode", "records/batch.py", "add_chunk"),
    ("finish (last group)", "records/objects.py", "finish"),
    # Store.put: swiftclient's upload (the md5 came with the object's bytes). Not swiftclient's
    # `put_object`: client.py has two (Connection's calls the module's), and summing both counted
    # the upload twice.
    ("PUT (Store.put)", "store.py", "put"),
    ("the whole task", "slice_task.py", "archive_slice"),
]
# Inside the phases above: `chunks: Arrow + encode` and `finish` (encode, and the md5 hashed as
# the encoder writes). ObjectWriter.write by its line: the buffer that hashes has a `write` too.
ENCODE = [
    ("  md5 (as it is written)", "~", "<method 'update' of '_hashlib.HASH' objects>"),
    ("  encode (ObjectWriter.write)", f"records/objects.py:{ObjectWriter.write.__code__.co_firstlineno}", "write"),
    ("    Parquet write_batch", "core.py", "write_batch"),
    ("    row sizes", "records/objects.py", "row_sizes"),
]
MIB = 1024**2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m matos_dev.bench.profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--value-bytes", type=int, default=1024)
    p.add_argument("--object-mib", type=float, default=64.0, help="object_bytes in MiB (the topic default: 64)")
    p.add_argument("--format", default="parquet", choices=["parquet", "jsonl"])
    args = p.parse_args(argv)
    with running_stack() as stack:
        topic = f"bench-profile-{uuid.uuid4().hex[:6]}"
        stack.create_topic(topic, 1)
        produce_workload(stack.kafka(), topic, Workload("P", args.records, args.value_bytes, partitions=1))
        (r,) = stack.ranges(topic)
        job = SliceJob(slice=OffsetRange(topic, 0, r.start, r.end), directory=f"profile/{topic}",
                       kafka_conf=stack.kafka().client_config(), group="bench-profile",
                       swift=stack.swift_params(f"bench-profile-{uuid.uuid4().hex[:6]}"),
                       format=args.format, object_bytes=int(args.object_mib * MIB))
        with Store(job.swift) as store:
            store.check()  # creates the container
        archive_slice(job)  # warm: imports, connections
        gc.collect()
        with SelfSampler() as mem:
            wall, cpu = time.perf_counter(), time.process_time()
            archive_slice(job)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        ob = job.object_bytes
        print(f"memory of one task ({args.format}, object_bytes {ob / MIB:.1f} MiB): peak RSS {mem.rss_above / MIB:.0f} MiB "
              f"above the start = {mem.rss_above / ob:.2f}x object_bytes; Arrow pool peak {mem.arrow_above / MIB:.0f} MiB "
              f"= {mem.arrow_above / ob:.2f}x; {wall:.2f} s wall, {cpu:.2f} s CPU, {args.records / wall:,.0f} records/s, "
              f"{1e6 * cpu / args.records:.1f} µs CPU per record (no profiler)")
        gc.collect()
        profiler = cProfile.Profile()
        wall, cpu = time.perf_counter(), time.process_time()
        profiler.enable()
        written = archive_slice(job)
        profiler.disable()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    stats = pstats.Stats(profiler)
    total = _cumulative(stats, "slice_task.py", "archive_slice")
    print(f"{args.records:,} records of {args.value_bytes} B, {len(written)} object(s), "
          f"{written[0].get('reader', '?') if written else '?'} reader: {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU in this process, {args.records / wall:,.0f} records/s (under cProfile)")
    for label, where, name in PHASES:
        t = _cumulative(stats, where, name)
        print(f"  {label:<24} {t:6.2f} s  {100 * t / total:5.1f}%")
    for label, where, name in ENCODE:
        t = _cumulative(stats, where, name)
        print(f"  {label:<24} {t:6.2f} s  {100 * t / total:5.1f}%")
    loop = total - sum(_cumulative(stats, w, n) for _, w, n in PHASES[:-1])
    print(f"  {'the rest (per-record loop)':<24} {loop:6.2f} s  {100 * loop / total:5.1f}%")
    return 0


def _cumulative(stats: pstats.Stats, where: str, name: str) -> float:
    """Cumulative seconds of `name` in files ending in `where` ("file.py" or "file.py:line")."""
    suffix, _, line = where.partition(":")
    return sum(v[3] for (file, at, func), v in stats.stats.items()
               if func == name and file.endswith(suffix) and (not line or at == int(line)))


if __name__ == "__main__":
    from matos_dev.bench import unwind_on_sigterm

    unwind_on_sigterm()
    raise SystemExit(main())
