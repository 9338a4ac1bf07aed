"""A run's own Spark driver (SparkResource, local master) is sized for what it does: coordinating.

Every job's work runs in Python workers (spark_tasks.py), so the driver JVM gets a 512 MiB heap
and the serial collector starting small (resources/spark.py DEFAULT_CONF; issue 19, the memory
side by side with the Iceberg sink). Checked on the session's real JVM, and that `conf` still
overrides the default.
"""

from __future__ import annotations

from matos_dagster.resources import SparkResource

MIB = 1024**2


def test_a_local_driver_jvm_gets_a_small_heap_the_serial_collector_and_c1_only(spark_resource):
    spark = spark_resource.spark_session
    jvm = spark.sparkContext._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    # -Xmx512m: the JVM reports a little less than the maximum (one survivor space).
    assert 400 * MIB < runtime.maxMemory() <= 512 * MIB
    collectors = {gc.getName() for gc in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()}
    assert collectors == {"Copy", "MarkSweepCompact"}, collectors  # the serial collector's two
    # C1 only: a run's short-lived driver does not spend its CPU on C2 compiling.
    assert "-XX:TieredStopAtLevel=1" in list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                                              .getInputArguments())
    # The rest of the session's settings still come through (the fixture's conf).
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"


def test_conf_overrides_the_driver_memory_defaults():
    r = SparkResource(master="local[2]", conf="spark.driver.memory=2g;spark.driver.defaultJavaOptions=-XX:+UseG1GC")
    conf = r.spark_config()
    assert conf["spark.driver.memory"] == "2g" and conf["spark.driver.defaultJavaOptions"] == "-XX:+UseG1GC"
    # A Spark Connect client sends no driver settings: the server's own rule its JVM.
    assert "spark.driver.memory" not in SparkResource(master="sc://127.0.0.1:15002").spark_config()
