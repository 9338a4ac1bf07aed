"""The benchmark (`python -m matos_dev.bench`, `make bench`): how fast the archive is, next
to what limits it.

Every path moves exactly the same offset ranges of the same topics on its own Kafka broker
and Swift (started on free ports in a temporary folder, stopped by PID at the end):

1. read limit: plain confluent-kafka consumers, one process per Spark core, discarding;
2. write limit: plain python-swiftclient uploads of the archive's bytes, in its object sizes;
3. Spark's own Kafka source (spark-sql-kafka-0-10) feeding the archive's writer;
4. the archive itself (`archive_range`), with and without Spark session start-up;
5. the load job against Kafka's ProducerPerformance.

Plus peak memory, the lag sensor's tick time on a big instance and, with `--latency`, the
time from a record produced to its manifest in Swift with `dagster dev` running.
"""

import signal as _signal


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C, so the `finally` blocks that stop Kafka, Swift, Spark
    Connect and Connect workers by PID run (by default SIGTERM ends the process at once and
    leaves them running: found killing a bench run)."""

    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    _signal.signal(_signal.SIGTERM, _exit)
