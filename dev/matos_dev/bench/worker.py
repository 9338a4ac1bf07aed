"""One Spark path of the bench in its own process, so each has its own Spark session and JVM.

    python -m matos_dev.bench.worker SPEC.json

`archive`: the archive's own `archive_range`, one thread per range (as concurrent runs would),
all in one Spark session. `spark-kafka`: Spark's Kafka source (spark-sql-kafka-0-10) reads
the same ranges and the archive's writer (Batch, Parquet, Store.put) writes them.
Times are written to the spec's `result` file as wall-clock epoch seconds and durations, with
the CPU-seconds of the timed part: of this process's tree (driver Python, JVM, Python workers)
and of the servers whose PIDs the spec gives.
"""

from __future__ import annotations

import json
import os
import sys
import time

STARTED = time.time()

from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from matos_dagster.core.archive.range_run import archive_range  # noqa: E402
from matos_dagster.core.archive.slice_task import SliceJob, _flush, _size  # noqa: E402
from matos_dagster.core.offsets.ranges import OffsetRange  # noqa: E402
from matos_dagster.core.records.batch import Batch  # noqa: E402
from matos_dagster.core.spark.tasks import run_tasks  # noqa: E402
from matos_dagster.core.swift import layout, manifest  # noqa: E402
from matos_dagster.core.swift.store import Store, SwiftParams  # noqa: E402
from matos_dagster.core.topics import TopicConfig  # noqa: E402
from matos_dagster.resources import KafkaResource, SparkResource  # noqa: E402
from matos_dev.bench.cpu import cpu_sample, cpu_used, tree  # noqa: E402
from matos_dev.bench.memory import KINDS, _kind  # noqa: E402

# Spark's Kafka source numbers timestamp types 0 (CreateTime) and 1 (LogAppendTime);
# confluent-kafka, which Batch follows, 1 and 2.
_TS_TYPE = {0: 1, 1: 2}


def main(spec_path: str) -> None:
    spec = json.loads(open(spec_path).read())
    if "native_reader" in spec:  # before Spark starts: its Python workers inherit it
        os.environ["MATOS_NATIVE_READER"] = spec["native_reader"]
    imported = time.time()
    conf = ";".join(f"{k}={v}" for k, v in spec.get("spark_conf", {}).items())
    spark = SparkResource(master=spec["master"], conf=conf).spark_session
    spark.sparkContext.setLogLevel("WARN")
    # Start-up ends when the Python workers exist and have imported what a task needs
    # (Spark reuses them), so the work below is timed like the read and write limits'
    # already started process pools. Only the kind of worker the path runs: the RDD ones for
    # Spark's Kafka source, the SQL ones of `run_tasks`' mapInArrow for the archive (whose first
    # job also plans and compiles that query: measured 5 CPU-s of JVM and 3 of Python
    # otherwise). Each kind has its own pyspark daemon and workers: warming both left the
    # archive's tree holding two idle RDD workers and their daemon, 250 MiB (PSS) it never uses.
    cores = spec["cores"]
    if spec["kind"] == "archive":
        run_tasks(spark, _warm_typed if spec.get("topic_config") else _warm, range(cores * 4))
    else:
        spark.sparkContext.parallelize(range(cores * 4), cores).map(_warm).collect()
    session_ready = time.time()
    swift = SwiftParams(**spec["swift"])
    with Store(swift) as store:
        store.check()
    ranges = [OffsetRange(*r) for r in spec["ranges"]]
    # `topic_config`: more of the topic's settings (the typed bench's value_format, bench/typed.py).
    topic = TopicConfig(spec["topic"], group=spec["group"], slice_records=spec["slice_records"],
                        object_bytes=spec["object_bytes"], **spec.get("topic_config", {}))
    servers = spec.get("servers", {})
    cpu0 = cpu_sample(_cpu_groups(servers))
    t0 = time.time()
    reader = None
    if spec["kind"] == "archive":
        manifests, reader = run_archive(spec, topic, ranges, swift, spark)
    elif spec["kind"] == "spark-kafka":
        manifests = run_spark_kafka(spec, topic, ranges, swift, spark)
    else:
        raise SystemExit(f"unknown kind {spec['kind']!r}")
    done = time.time()
    cpu = cpu_used(cpu0, cpu_sample(_cpu_groups(servers)))
    cpu = {"client": sum(cpu[k] for k in KINDS), **{k: v for k, v in cpu.items() if k not in KINDS},
           "client_kinds": {k: cpu[k] for k in KINDS}}
    result = {
        "started": STARTED,
        "imported": imported,
        "session_ready": session_ready,
        "work_started": t0,
        "done": done,
        "records": sum(m["records"] for m in manifests),
        "record_bytes": sum(m["record_bytes"] for m in manifests),
        "bytes": sum(m["bytes"] for m in manifests),
        "object_sizes": [o["bytes"] for m in manifests for o in m["objects"]],
        "objects": sum(len(m["objects"]) for m in manifests),
        "cpu": cpu,
        "reader": reader,  # the slice reader the archive's tasks used (native, python)
    }
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    spark.stop()


def _cpu_groups(servers: dict[str, list[int]]) -> dict[str, list[int]]:
    """This process's tree by kind (driver Python, JVM, Python workers), and the servers."""
    root = os.getpid()
    groups: dict[str, list[int]] = {k: [] for k in KINDS}
    for pid in tree(root):
        groups[_kind(pid, root)].append(pid)
    return {**groups, **servers}


def _warm(_: int) -> int:
    import matos_dagster.core.archive.slice_task as _imported  # pyarrow, confluent_kafka, swiftclient

    del _imported

    time.sleep(0.2)  # keeps every core busy, so every worker starts
    return 0


def _warm_typed(i: int) -> int:
    """_warm, and what a typed topic's task imports too (its decoders: numpy, fastavro, the registry client)."""
    import matos_dagster.core.schemas.typed as _imported

    del _imported
    return _warm(i)


def run_archive(spec, topic: TopicConfig, ranges, swift: SwiftParams, spark) -> tuple[list[dict], str]:
    kafka = KafkaResource(bootstrap_servers=spec["bootstrap"], timeout_s=60)

    def one(r: OffsetRange):
        with Store(swift) as store:
            return archive_range(r, topic, kafka, store, spark, say=lambda _: None)

    with kafka.kept_clients(), ThreadPoolExecutor(len(ranges)) as pool:  # as the asset's run does
        done = list(pool.map(one, ranges))
    return [d.manifest for d in done], ", ".join(sorted({d.reader for d in done if d.reader}))


def run_spark_kafka(spec, topic: TopicConfig, ranges, swift: SwiftParams, spark) -> list[dict]:
    """Spark's Kafka source over the same ranges, into the archive's writer, then its manifests."""
    name = topic.name
    starting = {name: {str(r.partition): r.start for r in ranges}}
    ending = {name: {str(r.partition): r.end for r in ranges}}
    slices = sum(len(r.slices(topic.slice_records)) for r in ranges)
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("assign", json.dumps({name: sorted(r.partition for r in ranges)}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", "read_committed")
        # As many Spark tasks as the archive has slices: the same parallelism.
        .option("minPartitions", str(slices))
        .load()
        .selectExpr("partition", "offset", "unix_millis(timestamp) AS ts", "timestampType",
                    "key", "value", "headers")
    )
    prefix = layout.join(swift.prefix, topic.prefix)
    jobs = {
        r.partition: SliceJob(slice=r, directory=layout.range_dir(prefix, r), kafka_conf={}, group=topic.group,
                              swift=swift, format=topic.format, object_bytes=topic.object_bytes)
        for r in ranges
    }
    objects = df.rdd.mapPartitions(lambda rows: write_rows(rows, jobs, swift)).collect()
    out = []
    with Store(swift) as store:
        for r in ranges:
            doc = manifest.build(r, topic.format, sorted((o for p, o in objects if p == r.partition),
                                                         key=lambda o: o["first_offset"]))
            store.put_json(layout.manifest_name(prefix, r), doc)
            out.append(doc)
    return out


def write_rows(rows, jobs: dict, swift: SwiftParams):
    """The archive's writer over Spark rows: objects of at most object_bytes of records."""
    store = Store(swift)
    written = []
    batch = job = None
    try:
        for row in rows:
            partition, offset, ts, ts_type, key, value, headers = row
            if job is None or partition != batch.partition:
                if batch is not None and len(batch):
                    written.append((batch.partition, _flush(batch, job, store)))
                job = jobs[partition]
                batch = Batch(job.slice.topic, partition)
            key = None if key is None else bytes(key)
            value = None if value is None else bytes(value)
            hs = [(h[0], None if h[1] is None else bytes(h[1])) for h in headers or ()]
            size = _size(key, value, hs)
            if batch.nbytes and batch.nbytes + size > job.object_bytes:
                written.append((partition, _flush(batch, job, store)))
                batch = Batch(job.slice.topic, partition)
            batch.add(offset, _TS_TYPE.get(ts_type, 0), ts, key, value, hs, size)
        if batch is not None and len(batch):
            written.append((batch.partition, _flush(batch, job, store)))
        return written
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1])
