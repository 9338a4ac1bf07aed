"""The metrics exporter of an archive: Prometheus' text format on /metrics (`matos metrics`, or
`serve_metrics` for an archive of `archive_definitions` in a project of one's own).

The components are refreshed at each scrape, each within the scrape's timeout: Kafka
(core/metrics/kafka_side.py), Dagster's storage (dagster_side.py) and, given the archive's Swift,
the archive's erasure and expiry records (core/metrics/archive_records.py, listed at most once a
minute). The metrics are those of
core/metrics/catalog.py, documented in docs/reference/metrics.md.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

DEFAULT_PORT = 9464


def make_collector(topics, kafka, instance, name: str = "", timeout_s: float = 5.0, swift=None):
    """The collector of the archive called `name`: `topics` (a TopicSet, a topics file, or its
    mapping), `kafka` (a KafkaResource), `instance` (the DagsterInstance of the archive's deployment),
    `swift` (its SwiftResource; None: no records erased or expired are served)."""
    from matos_dagster.core.metrics.kafka_side import KafkaSide
    from matos_dagster.exporter.collector import Collector
    from matos_dagster.exporter.dagster_side import DagsterSide
    from matos_dagster.library import as_topic_set
    from matos_dagster.names import Names

    names = Names(name)
    if hasattr(kafka, "process_config_and_initialize"):
        kafka = kafka.process_config_and_initialize()  # EnvVar fields resolved, as in a run
    topics = as_topic_set(topics)
    side = KafkaSide(topics, kafka, names.archive)
    # The verdicts of the topics Kafka's side resolved last; before that, of the named ones.
    dagster = DagsterSide(instance, names, lambda: side.watched or topics.resolve([]).topics, lambda: side.partitions)
    components = {"kafka": side.read, "dagster": dagster.read}
    if swift is not None:
        from matos_dagster.core.metrics.archive_records import ArchiveRecords
        from matos_dagster.core.swift.store import Store

        if hasattr(swift, "process_config_and_initialize"):
            swift = swift.process_config_and_initialize()
        params = swift.params()  # a bad setting is refused here, before anything listens
        components["swift"] = ArchiveRecords(lambda: Store(params), names.archive, lambda: side.partitions).read
    return Collector(names.archive, components, timeout_s)


def serve_metrics(topics, kafka, *, swift=None, name: str = "", instance=None, address: str = "0.0.0.0",
                  port: int = DEFAULT_PORT, timeout_s: float = 5.0, tls_cert: str | None = None,
                  tls_key: str | None = None, user: str | None = None, password: str | None = None):
    """Serve the Prometheus metrics of an archive of `archive_definitions` on http(s)://address:port/metrics.

    The server runs in a thread of its own from this call; each scrape asks Kafka and reads the
    Dagster instance, within `timeout_s` (docs/reference/metrics.md lists the metrics).

    Args:
        topics: The archive's topics, as given to `archive_definitions`: a `TopicSet`, a topics
            file's path, or its document.
        kafka: The archive's `KafkaResource`.
        swift: The archive's `SwiftResource`: the records erased and expired, from the erasure and
            expiry records (listed at most once a minute). None: those metrics are not served.
        name: The archive's name, as given to `archive_definitions` ("" for an unnamed one).
        instance: The `DagsterInstance` of the archive's deployment (default: $DAGSTER_HOME's).
        address: The address to listen on.
        port: The port to listen on (0: any free one; the server's `url` says which).
        timeout_s: Seconds a scrape waits for Kafka and the instance before serving the last known values.
        tls_cert: A PEM certificate (its chain after it): serve https.
        tls_key: The certificate's private key, if not in `tls_cert`.
        user: Require HTTP basic authentication as this user.
        password: The basic-auth password.

    Returns:
        The running server: its `url`, and `stop()`.
    """
    from dagster import DagsterInstance

    from matos_dagster.exporter.server import Server

    instance = DagsterInstance.get() if instance is None else instance
    registry = CollectorRegistry(auto_describe=False)
    c = make_collector(topics, kafka, instance, name, timeout_s, swift)
    registry.register(c)
    server = Server(registry, address, port, tls_cert, tls_key, user, password)
    server.collector = c
    return server.start()
