"""Compaction benchmark: a day of small ranges, compacted (`python -m matos_dev.bench.compaction`).

One topic partition gets a day of ranges at the default batch policy of a quiet topic: one
range every 30 s (2,880 ranges), `--records` records each, written as the archive writes
them (the product's encoder and manifest, one object per range; Kafka timestamps 30 s
apart per range). Then, with the product's own code:

- objects and bytes in Swift before and after, and the compaction's time (Spark local);
- the reader's time and listing requests for one hour's time window, before and after.

Ratios within one run; figures for the README's Compaction section.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.batch import Batch
from matos_dagster.core.records.objects import encode_hashed
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.store import Store, SwiftParams
from matos_dagster.core.topics import TopicConfig

DAY_MS = 86_400_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
THREADS = 16


def write_day(params, cfg: TopicConfig, ranges: int, per_range: int) -> float:
    """`ranges` archived ranges of `per_range` records, as archive_range would leave them."""
    step_ms = DAY_MS // ranges
    t = time.monotonic()

    def put(chunk: range) -> None:
        with Store(params) as store:
            for i in chunk:
                r = OffsetRange(cfg.name, 0, i * per_range, (i + 1) * per_range)
                batch = Batch(cfg.name, 0)
                for j, offset in enumerate(range(r.start, r.end)):
                    key, value = f"key-{offset % 97}".encode(), (f"event {offset} " * 12).encode()
                    headers = [("source", b"bench")]
                    batch.add(offset, 1, T0 + i * step_ms + j * (step_ms // per_range), key, value, headers,
                              len(key) + len(value) + 6 + 5)
                data, md5 = encode_hashed(batch.table(), cfg.format)
                name = layout.object_name(layout.range_dir("kafka", r), r.start, cfg.format)
                store.put(name, data, md5=md5)
                obj = {"name": name, "bytes": len(data), "md5": md5, "record_bytes": batch.nbytes, **batch.stats()}
                store.put_json(layout.manifest_name("kafka", r), manifest.build(r, cfg.format, [obj]))

    chunks = [range(k, ranges, THREADS) for k in range(THREADS)]
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(put, chunks))
    return time.monotonic() - t


def census(params, cfg: TopicConfig) -> dict:
    with Store(params) as store:
        items = list(store.list(layout.partition_dir("kafka", cfg.name, 0) + "/"))
    data = [i for i in items if not i["name"].rpartition("/")[2].startswith("_")]
    return {"objects": len(data), "bytes": sum(i["bytes"] for i in data), "all_objects": len(items)}


def read_hour(params, cfg: TopicConfig, hour: int) -> dict:
    from matos_dagster.core.reader import read_table

    with Store(params) as store:
        before, t = store.listings, time.monotonic()
        table = read_table(store, "kafka", cfg.name, partitions=[0], since_ms=T0 + hour * 3_600_000,
                           until_ms=T0 + (hour + 1) * 3_600_000)
        return {"s": time.monotonic() - t, "listings": store.listings - before, "rows": table.num_rows}


@contextlib.contextmanager
def swift_only():
    """Swift on a free port in a temporary folder (compaction needs no Kafka: the committed
    offset is given), stopped at the end."""
    from matos_dev.bench.stack import cache_dir
    from matos_dev.stack.process import free_port
    from matos_dev.stack.swift import SwiftServer

    tmp = Path(tempfile.mkdtemp(prefix="matos-bench-compact-"))
    server = SwiftServer(tmp / "swift", cache_dir(), proxy_port=free_port())
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def run(ranges: int, per_range: int, say=print) -> dict:
    from matos_dagster.core.compact.run import compact_topic
    from matos_dagster.resources import SparkResource

    out: dict = {"ranges": ranges, "records_per_range": per_range}
    with swift_only() as server:
        cfg = TopicConfig(f"bench-compact-{uuid.uuid4().hex[:6]}", compact_min_age_s=0, compact_grace_s=0,
                          compact_span_s=3600)
        params = SwiftParams(auth_url=server.auth_url, container=f"bench-compact-{uuid.uuid4().hex[:6]}",
                             user=server.user, key=server.key, prefix="kafka", retries=3, timeout_s=120)
        with Store(params) as store:
            store.check()
        out["setup_s"] = write_day(params, cfg, ranges, per_range)
        say(f"compaction bench: {ranges} ranges written in {out['setup_s']:.0f}s")
        out["before"] = census(params, cfg)
        out["reader_before"] = read_hour(params, cfg, 12)
        spark_resource = SparkResource(master="local[2]", conf="spark.ui.enabled=false")
        try:
            spark = spark_resource.spark_session
            spark.range(1).collect()  # the JVM and Python workers started before anything is timed
            with Store(params) as store:
                t = time.monotonic()
                done = compact_topic(cfg, {0: ranges * per_range}, store, spark)
                out["compact_s"] = time.monotonic() - t
                out["ranges_merged"] = done.total("ranges_merged")
                out["ranges_written"] = sum(len(p.groups) for p in done.partitions)
                t = time.monotonic()
                # Past the grace period (0 here): the replaced folders go.
                cleaned = compact_topic(cfg, {0: ranges * per_range}, store, spark)
                out["cleanup_s"] = time.monotonic() - t
                out["folders_deleted"] = cleaned.total("folders_deleted")
        finally:
            if spark_resource._session is not None:
                spark_resource._session.stop()
        out["after"] = census(params, cfg)
        out["reader_after"] = read_hour(params, cfg, 12)
        assert out["reader_after"]["rows"] == out["reader_before"]["rows"], out
    out["ratios"] = {
        "objects_after_per_before": out["after"]["objects"] / out["before"]["objects"],
        "bytes_after_per_before": out["after"]["bytes"] / out["before"]["bytes"],
        "reader_hour_after_per_before": out["reader_after"]["s"] / out["reader_before"]["s"],
    }
    say(json.dumps(out, indent=1))
    return out


def markdown(r: dict) -> str:
    b, a, rb, ra = r["before"], r["after"], r["reader_before"], r["reader_after"]
    return "\n".join([
        "| | before | after | after / before |",
        "| --- | ---: | ---: | ---: |",
        f"| objects (data) | {b['objects']:,} | {a['objects']:,} | {a['objects'] / b['objects']:.4f} |",
        f"| bytes (data) | {b['bytes']:,} | {a['bytes']:,} | {a['bytes'] / b['bytes']:.3f} |",
        f"| reader, one hour's window (s) | {rb['s']:.2f} | {ra['s']:.2f} | {ra['s'] / rb['s']:.3f} |",
        f"| reader listings | {rb['listings']} | {ra['listings']} | |",
        f"| compaction (s), clean-up (s) | | {r['compact_s']:.1f}, {r['cleanup_s']:.1f} | |",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", type=int, default=2880, help="ranges in the day (default: one every 30 s)")
    ap.add_argument("--records", type=int, default=20, help="records per range")
    a = ap.parse_args()
    print(markdown(run(a.ranges, a.records)))


if __name__ == "__main__":
    from matos_dev.bench import unwind_on_sigterm

    unwind_on_sigterm()
    main()
