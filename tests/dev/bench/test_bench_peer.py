"""The peer bench (Apache Iceberg's Kafka Connect sink): its generated config and its result logic.

Pure unit tests (no JVM, no servers). The real sink on a real stack is tests/dev/bench/test_bench_peer_stack.py
(slow).
"""

from __future__ import annotations

from pathlib import Path

from matos_dev.bench import iceberg_connect as ic
from matos_dev.bench.fault_run import compare
from matos_dev.bench.peer import commit_timeouts, markdown, steady_rate, summarize


def catalog() -> ic.Catalog:
    return ic.Catalog(Path("/data/catalog.db"), "peer-bucket", "http://127.0.0.1:8080", "test:tester", "testing")


def test_plugin_folder_keeps_no_logging_binding_of_its_own():
    names = ["iceberg-kafka-connect-1.10.1.jar", "slf4j-reload4j-1.7.36.jar", "reload4j-1.2.22.jar",
             "slf4j-api-2.0.17.jar", "log4j-api-2.25.3.jar", "hadoop-common-3.4.1.jar", "README.txt"]
    assert ic.kept_plugin_jars(names) == ["hadoop-common-3.4.1.jar", "iceberg-kafka-connect-1.10.1.jar"]


def test_poms_pin_the_versions_that_resolve_and_a_change_reinstalls(tmp_path):
    plugin = ic.pom_text("plugin", ic.PLUGIN_DEPS)
    assert "<artifactId>iceberg-kafka-connect</artifactId><version>1.10.1</version>" in plugin
    assert "<artifactId>iceberg-parquet</artifactId>" in plugin  # the sink's pom leaves it out
    assert "<artifactId>sqlite-jdbc</artifactId><version>3.46.1.3</version>" in plugin
    runtime = ic.pom_text("runtime", ic.RUNTIME_DEPS)
    assert "<artifactId>connect-runtime</artifactId><version>4.1.0</version>" in runtime
    # A stamp from other poms is not an install: the next run fetches again.
    home = ic.home(tmp_path)
    home.mkdir(parents=True)
    (home / ".installed").write_text("0" * 64 + "\n")
    assert not ic.installed(tmp_path)
    (home / ".installed").write_text(ic._stamp_text() + "\n")
    assert ic.installed(tmp_path)


def test_sink_writes_zstd_parquet_through_swift_s3_with_a_sqlite_jdbc_catalog():
    cfg = ic.sink_config(["t1"], "bench.t1", catalog(), "ctl", tasks=2, commit_interval_ms=30_000)
    assert cfg["connector.class"] == "org.apache.iceberg.connect.IcebergSinkConnector"
    assert cfg["tasks.max"] == "2" and cfg["topics"] == "t1" and cfg["iceberg.tables"] == "bench.t1"
    assert cfg["iceberg.control.topic"] == "ctl"
    assert cfg["iceberg.control.commit.interval-ms"] == "30000"
    assert cfg["iceberg.catalog.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert cfg["iceberg.catalog.uri"] == "jdbc:sqlite:/data/catalog.db"
    assert cfg["iceberg.catalog.warehouse"] == "s3://peer-bucket/warehouse"
    assert cfg["iceberg.catalog.s3.endpoint"] == "http://127.0.0.1:8080"
    assert cfg["iceberg.catalog.s3.path-style-access"] == "true"
    assert cfg["iceberg.catalog.s3.access-key-id"] == "test:tester"
    assert cfg["iceberg.catalog.client.region"] == "us-east-1"
    # Tasks and the coordinator share the sqlite file: they wait for its lock instead of dying.
    assert int(cfg["iceberg.catalog.jdbc.busy_timeout"]) >= 10_000
    assert cfg["iceberg.catalog.s3.chunked-encoding-enabled"] == "false"
    # The table is created beforehand (auto-create races on sqlite), zstd Parquet.
    assert "iceberg.tables.auto-create-enabled" not in cfg
    assert ic.TABLE_PROPERTIES == {"write.format.default": "parquet", "write.parquet.compression-codec": "zstd"}
    # Raw bytes become a row with the source's partition and offset, to compare record by record.
    assert cfg["transforms"] == "hoist,meta"
    assert cfg["transforms.meta.offset.field"] == "kafka_offset"
    assert cfg["transforms.meta.partition.field"] == "kafka_partition"
    # Default commit interval is the sink's own 5 minutes.
    assert ic.sink_config(["t"], "b.t", catalog(), "c", 1)["iceberg.control.commit.interval-ms"] == "300000"


def test_worker_listens_on_loopback_and_scans_only_the_plugin_folder(tmp_path):
    props = ic.worker_properties("127.0.0.1:9092", 18083, tmp_path / "offsets", tmp_path / "plugins")
    assert props["listeners"] == "http://127.0.0.1:18083"
    assert props["plugin.path"] == str(tmp_path / "plugins")
    # Kafka's standalone config flushes offsets every 10 s (the code default is 60 s): a task that
    # has drained its topic answers the sink's commit requests only then (issue 19's ~1,000 records/s).
    assert props["offset.flush.interval.ms"] == "10000"
    tuned = ic.worker_properties("127.0.0.1:9092", 18083, tmp_path / "offsets", tmp_path / "plugins",
                                 offset_flush_interval_ms=ic.TUNED_OFFSET_FLUSH_INTERVAL_MS)
    assert tuned["offset.flush.interval.ms"] == "1000"
    text = ic.properties_text({"a": "x", "win": "C:\\p"})
    assert text == "a=x\nwin=C:\\\\p\n"


def test_compare_counts_lost_duplicated_and_mismatched_records():
    source = {(0, 0): b"a", (0, 1): b"b", (1, 0): b"c", (1, 1): b"d"}
    written = [(0, 0, b"a"), (0, 1, b"b"), (0, 1, b"b"), (1, 0, b"X"), (2, 5, b"?")]
    r = compare(source, written)
    assert (r["source"], r["rows"]) == (4, 5)
    assert r["lost"] == 1 and r["lost_examples"] == [{"partition": 1, "offset": 1}]
    assert r["duplicated"] == 1 and r["duplicated_examples"] == [{"partition": 0, "offset": 1}]
    assert r["mismatched"] == 2  # a changed value, and a row no source record has
    assert {"partition": 2, "offset": 5, "in_source": False} in r["mismatched_examples"]
    clean = compare(source, [(p, o, v) for (p, o), v in source.items()])
    assert (clean["lost"], clean["duplicated"], clean["mismatched"]) == (0, 0, 0)


def test_steady_rate_leaves_out_task_start_and_first_commit_wait():
    # First commit at t=20 s with 100 records, the last at t=30 s with 1,100: 100 records/s.
    counts = [(0.0, 0), (10.0, 0), (20.0, 100), (25.0, 600), (30.0, 1100)]
    assert steady_rate(counts, 1100) == 100.0
    assert steady_rate([(0.0, 0), (5.0, 1100)], 1100) is None  # one commit held everything


def run(records, seconds, client, rss_mib, files=None, pss_mib=None):
    memory = {"total": rss_mib * 1024**2, "pss_total": (pss_mib or rss_mib) * 1024**2}
    r = {"records": records, "seconds": seconds, "cpu": {"client": client, "kafka": 1.0, "swift": 1.0},
         "memory": memory, "steady": None}
    if files is not None:
        r["files"] = {"files": files}
    return r


def test_summary_and_table_give_the_ratios_against_the_targets():
    runs = {"archive": [run(1000, 1.0, 2.0, 500, pss_mib=300), run(1000, 2.0, 2.0, 700, pss_mib=500)],
            "peer": [run(1000, 4.0, 8.0, 1000, files=4, pss_mib=800)]}
    s = summarize(runs)
    assert s["archive"]["records_per_s"] == 750.0  # median of 1000 and 500
    assert s["archive"]["cpu_s_per_1k"] == {"client": 2.0, "kafka": 1.0, "swift": 1.0, "total": 4.0}
    assert s["archive"]["peak_rss_mib"] == 600.0 and s["archive"]["peak_pss_mib"] == 400.0
    assert s["peer"]["records_per_s"] == 250.0 and s["peer"]["files"] == 4
    md = markdown({"iceberg": "1.10.1", "connect": "4.1.0", "cores": 2, "setting": "quick", "repeat": 2,
                   "throughput_commit_interval_ms": 10_000,
                   "workloads": {"W1": {"records": 1000, "value_bytes": 1024, "summary": s}}})
    # Memory: the target is the ratio of the sums of PSS (400 / 800), the sums of RSS beside it.
    assert "| W1 | 3.00× | 0.40× | 0.50× | 0.60× |" in md
    assert "| W1 (1,000 × 1024 B) | Iceberg sink | 250 | 8.0000 | 1.0000 | 1.0000 | 10.0000 | 800 | 1,000 |" in md


def test_commit_timeouts_counts_the_commits_the_coordinator_gave_up_on():
    log = ("[2026-11-24 11:28:18,648] INFO Commit timeout reached. Commit ID: bdaa9f01 (org.apache.iceberg...)\n"
           "[2026-11-24 11:28:18,707] INFO Commit bdaa9f01 complete, committed to 0 table(s), valid-through null\n"
           "[2026-11-24 11:28:48,750] INFO Commit timeout reached. Commit ID: 4440f0dd (org.apache.iceberg...)\n"
           "[2026-11-24 11:29:43,699] INFO Commit dd6e269d complete, committed to 1 table(s)\n")
    assert commit_timeouts(log) == 2
    assert commit_timeouts("INFO Commit dd6e269d complete, committed to 1 table(s)\n") == 0


def test_table_shows_the_tuned_sink_beside_the_default_one_with_its_own_ratios():
    runs = {"archive": [run(1000, 1.0, 2.0, 500)], "peer": [run(1000, 10.0, 8.0, 1000, files=2)],
            "peer_tuned": [run(1000, 2.0, 8.0, 1000, files=2)]}
    md = markdown({"iceberg": "1.10.1", "connect": "4.1.0", "cores": 2, "setting": "quick", "repeat": 1,
                   "throughput_commit_interval_ms": 10_000,
                   "workloads": {"W1": {"records": 1000, "value_bytes": 1024, "summary": summarize(runs)}}})
    assert "| W1 (1,000 × 1024 B) | Iceberg sink | 100 |" in md
    assert "| W1 (1,000 × 1024 B) | Iceberg sink, tuned (offset.flush.interval.ms = 1 s) | 500 |" in md
    assert "| W1 | 10.00× |" in md and "| W1, sink tuned | 2.00× |" in md
    assert "offset.flush.interval.ms 10 s (Kafka's standalone config), tuned: 1 s" in md


def test_catalog_file_is_in_wal_mode_before_the_sink_opens_it(tmp_path):
    import sqlite3

    cat = ic.Catalog(tmp_path / "catalog.db", "b", "http://127.0.0.1:1", "u", "k")
    sqlite3.connect(cat.sqlite_file).execute("CREATE TABLE t (x)").connection.commit()  # as pyiceberg leaves it
    cat.use_wal()
    # The sink's `journal_mode=WAL` at each connection then needs no exclusive lock (no SQLITE_BUSY).
    assert sqlite3.connect(cat.sqlite_file).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
