"""Erasing one key from a large archive: the objects read and the time, with key indexes against a
full scan (`python -m matos_dev.bench.erasure`, `make bench-erasure`).

One topic of `--partitions` partitions in its own Swift (on a free port; no Kafka: the erasure reads
Kafka for nothing, and the archive is written straight into Swift to keep the bench short), with
the product's own writers: each object is the records' Parquet (`encode_hashed`), its manifest entry
has the counts, `hours` and key index a slice task gives it (`key_index.Indexer`), and each range's
manifest is `manifest.build`'s. A range holds `--objects` objects of `--records` records each (a
compacted range: several objects under one manifest). Keys are customer ids drawn from a population
of a million; each erased key is put in `--hits` objects, one record each.

Then, with the product's own `carry_out` (request, ledger, rewrite, record), three erasures of a
key each:

- **indexed**: the archive as it is; manifests read `ManifestReader.THREADS` at a time;
- **indexed, manifests one at a time**: the same with one thread (what the manifests cost);
- **full scan**: the key indexes removed from every manifest first (what an erasure costs without
  them: every object read).

Each with its wall time, objects read, skipped and rewritten, and bytes read and written. Targets:
objects read at most 1 % of the archive's, time at most a tenth of the full scan's.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from matos_dagster.core.days import buckets
from matos_dagster.core.erase import key_index, keys, request
from matos_dagster.core.erase.rewrite import ManifestReader
from matos_dagster.core.erase.run import carry_out
from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.records.objects import encode_hashed, row_sizes
from matos_dagster.core.records.schema import SCHEMA
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.store import Store, SwiftParams
from matos_dagster.core.topics import TopicConfig

SECRET = "the bench's erasure key, 32 bytes"
T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
STEP_MS = 50  # between records of a partition: 10 million records span about a week
CUSTOMERS = 1_000_000
THREADS = 8
SIZES = {"full": (10, 50, 20, 1000), "quick": (2, 10, 10, 1000)}  # partitions, ranges, objects a range, records


def objects_table(topic: str, partition: int, first: int, n: int, rng: np.random.Generator,
                  erased: dict[int, bytes], stamps: np.ndarray | None = None) -> pa.Table:
    """`n` records from offset `first`; the key `erased[i]` at the object's i-th record; stamped
    `stamps` (ms) when given, else a record every STEP_MS from T0 by offset."""
    offsets = np.arange(first, first + n, dtype=np.int64)
    ids = rng.integers(0, CUSTOMERS, n)
    key_list = [f"customer-{c:07d}".encode() for c in ids.tolist()]
    for i, k in erased.items():
        key_list[i] = k
    values = [b"order %d of customer %07d: 3 items, 42.50 EUR, shipped" % (o, c) for o, c in zip(offsets.tolist(), ids.tolist())]
    return pa.table({
        "topic": pa.array([topic] * n, pa.string()),
        "partition": pa.array(np.full(n, partition, np.int32)),
        "offset": pa.array(offsets),
        "timestamp": pa.array(T0 + offsets * STEP_MS if stamps is None else stamps).cast(pa.timestamp("ms", tz="UTC")),
        "timestamp_type": pa.array(["CreateTime"] * n, pa.string()),
        "key": pa.array(key_list, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([[]] * n, SCHEMA.field("headers").type),
    }, schema=SCHEMA)


def write_range(store: Store, prefix: str, cfg: TopicConfig, indexer: key_index.Indexer, r: OffsetRange,
                per_object: int, hits: dict[int, dict[int, bytes]], seed: int,
                stamps_of: Callable[[int, int], np.ndarray] | None = None) -> int:
    """One range of objects as the archive writes them; its bytes in Swift. `stamps_of(first, n)`:
    the timestamps (ms) of the object of `n` records from offset `first` (objects_table's default)."""
    rng = np.random.default_rng(seed)
    entries, total = [], 0
    for j, first in enumerate(range(r.start, r.end, per_object)):
        table = objects_table(cfg.name, r.partition, first, per_object, rng, hits.get(j, {}),
                              None if stamps_of is None else stamps_of(first, per_object))
        data, md5 = encode_hashed(table, "parquet")
        name = layout.object_name(layout.range_dir(prefix, r), first, "parquet")
        store.put(name, data, md5=md5)
        sizes = row_sizes(table)
        ts = table["timestamp"].cast(pa.int64())
        entries.append({"name": name, "bytes": len(data), "md5": md5, "record_bytes": int(sizes.sum()),
                        "largest_record_bytes": int(sizes.max()), "records": per_object, "first_offset": first,
                        "last_offset": first + per_object - 1, "min_timestamp": ts[0].as_py(),
                        "max_timestamp": ts[-1].as_py(),
                        "hours": buckets.to_json(buckets.of_records(table["timestamp"], table["offset"], sizes)[0]),
                        "key_index": indexer.of(table["key"])})
        total += len(data)
    store.put_json(layout.manifest_name(prefix, r), manifest.build(r, "parquet", entries))
    return total


def build(params: SwiftParams, cfg: TopicConfig, size: tuple[int, int, int, int], hits: int, erased: list[bytes],
          say) -> dict:
    """The archive, `hits` objects of it holding one record of each key of `erased` (distinct objects)."""
    partitions, ranges, objects, records = size
    prefix = layout.join(params.prefix, cfg.prefix)
    indexer = key_index.indexer(SECRET)
    picker = random.Random(7)
    slots = picker.sample([(p, i, j) for p in range(partitions) for i in range(ranges) for j in range(objects)],
                          hits * len(erased))
    placed: dict[tuple[int, int], dict[int, dict[int, bytes]]] = {}
    for n, (p, i, j) in enumerate(slots):
        placed.setdefault((p, i), {}).setdefault(j, {})[picker.randrange(records)] = erased[n // hits]
    per_range = objects * records
    work = [(p, i) for p in range(partitions) for i in range(ranges)]
    t = time.monotonic()

    def put(part: list[tuple[int, int]]) -> int:
        with Store(params) as store:
            return sum(write_range(store, prefix, cfg, indexer, OffsetRange(cfg.name, p, i * per_range,
                                                                            (i + 1) * per_range),
                                   records, placed.get((p, i), {}), 1000 * p + i) for p, i in part)

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        nbytes = sum(pool.map(put, [work[k::THREADS] for k in range(THREADS)]))
    say(f"archive written: {len(work) * objects} objects, {len(work) * per_range} records, "
        f"{nbytes / 1e6:.0f} MB in {time.monotonic() - t:.0f} s")
    return {"partitions": partitions, "ranges": len(work), "objects": len(work) * objects,
            "records": len(work) * per_range, "bytes": nbytes, "log_end": ranges * per_range,
            "build_s": time.monotonic() - t}


def strip_indexes(params: SwiftParams, cfg: TopicConfig, archive: dict) -> None:
    """Every manifest without its key indexes: the archive as matos-dagster left it before them."""
    prefix = layout.join(params.prefix, cfg.prefix)
    per_range = archive["records"] // archive["ranges"]
    work = [(p, i) for p in range(archive["partitions"]) for i in range(archive["ranges"] // archive["partitions"])]

    def strip(part):
        with Store(params) as store:
            for p, i in part:
                name = layout.manifest_name(prefix, OffsetRange(cfg.name, p, i * per_range, (i + 1) * per_range))
                doc = store.get_json(name)
                for o in doc["objects"]:
                    o.pop("key_index", None)
                store.put_json(name, doc)

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(strip, [work[k::THREADS] for k in range(THREADS)]))


def erase(params: SwiftParams, cfg: TopicConfig, archive: dict, key: bytes, threads: int) -> dict:
    """One erasure of `key` by `carry_out`, timed from the request to its record."""
    ends = {cfg.name: {p: archive["log_end"] for p in range(archive["partitions"])}}
    req = request.make(keys.erasure_key(SECRET), [key], "bench", ends)
    before = ManifestReader.THREADS
    ManifestReader.THREADS = threads
    try:
        with Store(params) as store:
            request.write(store, store.params.prefix, req)
            t = time.monotonic()
            done = carry_out(req.id, store, {cfg.name: cfg}, SECRET, say=lambda _: None)
            took = time.monotonic() - t
    finally:
        ManifestReader.THREADS = before
    parts = done.partitions
    return {"s": took, "records_erased": done.records, "objects_read": sum(p.objects_read for p in parts),
            "objects_skipped": sum(p.objects_skipped for p in parts),
            "objects_rewritten": sum(len(p.rewritten) + len(p.deleted) for p in parts),
            "bytes_read": sum(p.bytes_read for p in parts), "bytes_written": sum(p.bytes_written for p in parts),
            "manifest_threads": threads}


def run(size: tuple[int, int, int, int], hits: int, say=print) -> dict:
    from matos_dev.bench.compaction import swift_only

    results: dict = {"size": dict(zip(("partitions", "ranges_a_partition", "objects_a_range", "records_an_object"),
                                      size)),
                     "hits": hits, "cores": os.cpu_count(), "loadavg_start": os.getloadavg()}
    cfg = TopicConfig(f"bench-erasure-{uuid.uuid4().hex[:6]}")
    erased = [b"customer-x-indexed", b"customer-x-one-thread", b"customer-x-full-scan"]
    with swift_only() as server:
        params = SwiftParams(auth_url=server.auth_url, container=f"bench-erasure-{uuid.uuid4().hex[:6]}",
                             user=server.user, key=server.key, prefix="kafka", retries=3, timeout_s=120)
        with Store(params) as store:
            store.check()
        results["archive"] = archive = build(params, cfg, size, hits, erased, say)
        results["indexed"] = erase(params, cfg, archive, erased[0], ManifestReader.THREADS)
        say(f"indexed: {results['indexed']}")
        results["indexed_one_thread"] = erase(params, cfg, archive, erased[1], 1)
        say(f"indexed, manifests one at a time: {results['indexed_one_thread']}")
        strip_indexes(params, cfg, archive)
        results["full_scan"] = erase(params, cfg, archive, erased[2], ManifestReader.THREADS)
        say(f"full scan: {results['full_scan']}")
    results["loadavg_end"] = os.getloadavg()
    for case in ("indexed", "indexed_one_thread", "full_scan"):
        if results[case]["records_erased"] != hits:
            raise SystemExit(f"bench erasure: {case} erased {results[case]['records_erased']} records, not {hits}")
    results["read_share"] = results["indexed"]["objects_read"] / archive["objects"]
    results["time_ratio"] = results["indexed"]["s"] / results["full_scan"]["s"]
    return results


def markdown(res: dict) -> str:
    a = res["archive"]
    rows = ["| erasure of one key | objects read | objects skipped | objects rewritten | bytes read | bytes written | time |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for case, label in (("indexed", f"with key indexes (manifests {res['indexed']['manifest_threads']} at a time)"),
                        ("indexed_one_thread", "with key indexes (manifests one at a time)"),
                        ("full_scan", "full scan (no key index)")):
        c = res[case]
        rows.append(f"| {label} | {c['objects_read']:,} | {c['objects_skipped']:,} | {c['objects_rewritten']:,} | "
                    f"{c['bytes_read'] / 1e6:,.1f} MB | {c['bytes_written'] / 1e6:,.2f} MB | {c['s']:.1f} s |")
    verdict = lambda ok: "met" if ok else "**not met**"  # noqa: E731
    return "\n".join([
        f"An archive of {a['objects']:,} objects and {a['records']:,} records ({a['partitions']} partitions, "
        f"{a['ranges']:,} ranges of {res['size']['objects_a_range']} objects, {a['bytes'] / 1e6:,.0f} MB of "
        f"Parquet); each erased key in {res['hits']} objects, one record each; {res['cores']} cores.",
        "",
        *rows,
        "",
        f"- Objects read: {res['read_share']:.2%} of the archive's (target at most 1 %: "
        f"{verdict(res['read_share'] <= 0.01)}).",
        f"- Time: {res['time_ratio']:.3f} of the full scan's (target at most 0.1: {verdict(res['time_ratio'] <= 0.1)}).",
        "",
    ])


def say(msg: str) -> None:
    print(f"bench erasure [{time.strftime('%H:%M:%S')}]: {msg}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="200 objects of 1,000 records (a check, not the figures)")
    ap.add_argument("--hits", type=int, default=20, help="objects holding each erased key (default 20)")
    ap.add_argument("--out", default=".bench", help="folder for erasure.json and erasure.md (.bench/)")
    a = ap.parse_args()
    results = run(SIZES["quick" if a.quick else "full"], a.hits, say)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "erasure.json").write_text(json.dumps(results, indent=1) + "\n")
    md = markdown(results)
    (out / "erasure.md").write_text(md)
    print(md)


if __name__ == "__main__":
    from matos_dev.bench import unwind_on_sigterm

    unwind_on_sigterm()
    main()
