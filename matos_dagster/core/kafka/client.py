"""Kafka, through confluent-kafka: the few calls the archive, sensor, restore and checks need.

`KafkaClient` is the one Kafka the core knows (archive, restore and the verifier take it). It
holds the client logic and reads its settings from its own attributes (`bootstrap_servers`,
`security_protocol`, `sasl_mechanism`, `username`, `password`, `ca_file`, `group`,
`client_id`, `timeout_s`, `_kept`): the Dagster resource (resources/kafka.py) declares them as
its fields and adds nothing else. What it raises, and the one-line messages of librdkafka's
errors, are errors.py's. No Dagster imports.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any, Callable, Iterator

from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from matos_dagster.core.kafka.errors import (
    _COORDINATOR_BUSY,
    _REFUSALS,
    _STARTING,
    KafkaUnavailable,
    UnknownPartition,
    UnknownTopic,
    unavailable,
)
from matos_dagster.core.kafka.leaders import leaderless
from matos_dagster.core.kafka.log import LIBRDKAFKA_LOG

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
DRIVER_RECONNECT_BACKOFF_MS = 10  # librdkafka's default is 100 (consumer() says why)


_KEPT_MADE = threading.Lock()  # opening and closing kept_clients scopes, from any thread


class _Kept:
    """Clients kept for reuse within `KafkaClient.kept_clients`: a consumer per group, an admin.

    A fresh client per call cost the broker 13.6 ms of CPU and the caller 19 ms per committed()
    on loopback (a connection, its metadata, finding the group coordinator), and 49 ms per
    partitions(); a kept one 0.6 ms of broker CPU and 0.5 ms (median of 50 each). A run asks
    6-10 such questions, a sensor tick 3 per topic. Used one call at a time (the lock): the
    bench's archive, for one, asks from a thread per range.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.depth = 0  # kept_clients scopes open on it
        self.clients: dict[tuple, Any] = {}

    def close(self) -> None:
        with self.lock:
            clients, self.clients = self.clients, {}
        for client in clients.values():
            with contextlib.suppress(Exception):
                client.close()


class _Admin:
    """An admin client and the errors its callback reported (why a connection failed)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.errors: list[KafkaError] = []
        self.client = AdminClient({**conf, "error_cb": self.errors.append, "logger": LIBRDKAFKA_LOG})

    def close(self) -> None:
        pass  # an AdminClient has no close; librdkafka destroys it with the object


class KafkaClient:
    """A Kafka cluster: PLAINTEXT, SSL, or SASL_SSL with PLAIN (Message Hub API keys) or SCRAM."""

    bootstrap_servers: str
    security_protocol: str
    sasl_mechanism: str
    username: str
    password: str
    ca_file: str
    group: str
    client_id: str
    timeout_s: int
    _kept: Any

    # -- client settings -------------------------------------------------------------

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings shared by every client, secrets included: never log this."""
        if self.security_protocol not in PROTOCOLS:
            raise ValueError(
                f"MATOS_KAFKA_SECURITY_PROTOCOL is {self.security_protocol!r}; use one of {', '.join(PROTOCOLS)}"
            )
        if self.security_protocol == "SASL_SSL" and self.sasl_mechanism not in MECHANISMS:
            raise ValueError(
                f"MATOS_KAFKA_SASL_MECHANISM is {self.sasl_mechanism!r}; use one of {', '.join(MECHANISMS)}"
            )
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol,
            "socket.connection.setup.timeout.ms": int(self.timeout_s * 1000),
        }
        if self.security_protocol in ("SSL", "SASL_SSL") and self.ca_file:
            conf["ssl.ca.location"] = self.ca_file
        if self.security_protocol == "SASL_SSL":
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = self.username
            conf["sasl.password"] = self.password
        return conf

    def consumer(self, group: str | None = None, **overrides: Any) -> Consumer:
        """A consumer that never commits by itself: only the archive protocol commits."""
        conf = {
            **self.client_config(),
            "group.id": group or self.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            # The driver's first call (committed, commit, watermarks) makes the consumer it keeps
            # (_Kept). Once metadata arrives, librdkafka drops the bootstrap connection and then
            # waits reconnect.backoff.ms / 2 (50 ms by default) before it may connect again to
            # ask for the group coordinator: 55-80 ms per first committed() on loopback, 17 ms
            # with 10 here. A refused connection is then tried again every 12 ms (measured; the
            # backoff did not grow), a log line each: so kept clients are released before a
            # Spark job, and never outlive their run or tick.
            "reconnect.backoff.ms": DRIVER_RECONNECT_BACKOFF_MS,
            "logger": LIBRDKAFKA_LOG,
            **overrides,
        }
        return Consumer(conf)

    @contextlib.contextmanager
    def kept_clients(self) -> Iterator[None]:
        """Within it, the questions below (partitions, watermarks, committed, commit) share one
        admin client and one consumer per group, closed at its end (or at release_clients);
        outside, each question makes and closes its own client. A run and a sensor tick each ask
        inside one. Scopes nest."""
        with _KEPT_MADE:
            kept = self._kept = self._scope() or _Kept()
            kept.depth += 1
        try:
            yield
        finally:
            with _KEPT_MADE:
                kept.depth -= 1
                last = kept.depth == 0
                if last and self._kept is kept:
                    self._kept = None
            if last:
                kept.close()

    def release_clients(self) -> None:
        """Close the clients kept so far (the scope stays open: the next question makes new ones).
        Called before a long wait, such as a Spark job."""
        kept = self._scope()
        if kept is not None:
            kept.close()

    def _scope(self) -> _Kept | None:
        """The open kept_clients scope's clients; a forked child never uses its parent's."""
        kept = self._kept
        return kept if kept is not None and kept.pid == os.getpid() else None

    def _group_consumer(self, group: str | None):
        """`_client` for a consumer of `group` (the resource's group if None)."""
        group = group or self.group
        return self._client(("consumer", group), lambda: self.consumer(group))

    @contextlib.contextmanager
    def _client(self, key: tuple, make: Callable[[], Any]) -> Iterator[Any]:
        """A client for one call: the kept one (made on first use) inside kept_clients, where a
        call that fails drops it (a client that met an error may be in a bad state, so the next
        call starts afresh); else a fresh one, closed after the call."""
        kept = self._scope()
        if kept is None:
            client = make()
            try:
                yield client
            finally:
                with contextlib.suppress(Exception):
                    client.close()
            return
        with kept.lock:
            client = kept.clients.get(key)
            if client is None:
                client = kept.clients[key] = make()
            try:
                yield client
            except BaseException:
                del kept.clients[key]
                with contextlib.suppress(Exception):
                    client.close()
                raise

    def producer(self, **overrides: Any) -> Producer:
        conf = {**self.client_config(), "enable.idempotence": True, "acks": "all", "logger": LIBRDKAFKA_LOG,
                **overrides}
        return Producer(conf)

    def admin(self) -> AdminClient:
        return AdminClient({**self.client_config(), "logger": LIBRDKAFKA_LOG})

    # -- questions the archive asks --------------------------------------------------

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids; UnknownTopic if it does not exist."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            md = self._metadata(topic)
            t = md.topics.get(topic)
            if t is None or (t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
                raise UnknownTopic(f"Kafka topic {topic!r} does not exist on {self.bootstrap_servers}")
            if t.error is None:
                return sorted(t.partitions)
            if t.error.code() not in _STARTING or time.monotonic() >= deadline:
                raise KafkaUnavailable(f"Kafka could not describe topic {topic!r}: {t.error.str()}")
            time.sleep(0.2)  # a topic just created, or a broker just started: leaders are being elected

    def create_topic(self, topic: str, partitions: int, config: dict[str, str] | None = None) -> bool:
        """Create the topic (False if it exists already), and return once each partition has a leader.

        A broker answers CreateTopics before the new partitions' leaders are known everywhere:
        a client that asks at once meets NOT_LEADER_FOR_PARTITION or LEADER_NOT_AVAILABLE.
        """
        admin = self.admin()  # must outlive the future, or the request is cancelled
        fs = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=config or {})]
        )
        try:
            fs[topic].result(self.timeout_s)
            created = True
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise unavailable(self, e) from None
            created = False
        except TimeoutError:  # the future's own wait: no broker answered
            raise unavailable(self, KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer to CreateTopics"))) \
                from None
        self.wait_for_leaders(topic)
        return created

    def wait_for_leaders(self, topic: str) -> None:
        """Return when every partition of the topic has a leader; KafkaUnavailable after the timeout."""
        admin = self.admin()
        deadline = time.monotonic() + self.timeout_s
        while True:
            waiting = leaderless(self._metadata(topic).topics.get(topic))
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise KafkaUnavailable(
                    f"Kafka topic {topic!r} has no leader for partition(s) {waiting} after {self.timeout_s}s "
                    f"on {self.bootstrap_servers}; check the brokers' logs"
                )
            admin.poll(0)
            time.sleep(0.2)

    def check_partition(self, topic: str, partition: int) -> None:
        parts = self.partitions(topic)
        if partition not in parts:
            raise UnknownPartition(
                f"Kafka topic {topic!r} has no partition {partition}: it has partitions "
                f"0..{max(parts)}" if parts else f"Kafka topic {topic!r} has no partitions"
            )

    def watermarks(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """(log start offset, log end offset) of each partition."""
        with self._group_consumer(None) as consumer:
            out = {}
            for p in partitions:
                tp = TopicPartition(topic, p)
                out[p] = self._retried(
                    lambda left: consumer.get_watermark_offsets(tp, timeout=left, cached=False), _STARTING
                )
            return out

    def committed(self, topic: str, partitions: list[int], group: str | None = None) -> dict[int, int | None]:
        """The group's committed offset per partition; None where it never committed."""
        with self._group_consumer(group) as consumer:
            tps = self._coordinated(
                lambda left: consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=left)
            )
            out: dict[int, int | None] = {}
            for tp in tps:
                if tp.error is not None:
                    raise KafkaUnavailable(f"Kafka could not read committed offsets of {topic}/{tp.partition}: {tp.error}")
                out[tp.partition] = None if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset
            return out

    def commit(self, topic: str, offsets: dict[int, int], group: str | None = None) -> None:
        """Commit `offsets` for the group, synchronously. Callers decide that they only move forward."""
        if not offsets:
            return
        with self._group_consumer(group) as consumer:
            # Committing the same offsets again is harmless, so a busy coordinator is simply asked again.
            result = self._coordinated(
                lambda _: consumer.commit(
                    offsets=[TopicPartition(topic, p, o) for p, o in sorted(offsets.items())],
                    asynchronous=False,
                )
            )
            for tp in result or []:
                if tp.error is not None:
                    raise KafkaUnavailable(f"Kafka refused the commit of {topic}/{tp.partition}: {tp.error}")

    def timestamp_at(self, topic: str, partition: int, offset: int) -> int | None:
        """Timestamp (ms) of the first readable record at or after `offset`, None if none comes.

        One fetch, bounded by the timeout: the sensor uses it for the age of the oldest
        record still waiting to be archived.
        """
        consumer = self.consumer(**{"enable.partition.eof": True, "auto.offset.reset": "earliest"})
        try:
            consumer.assign([TopicPartition(topic, partition, offset)])
            msg = consumer.poll(self.timeout_s)
            if msg is None or msg.error() is not None:
                return None
            ts_type, ts = msg.timestamp()
            return ts if ts_type else None
        finally:
            consumer.close()

    def _coordinated(self, call):
        """`call(seconds left)`, asked again while the group coordinator is not ready yet.

        A new cluster creates its offsets topic on the first group request, and a moved
        coordinator takes a moment to be found: both are answered with a retriable error
        that librdkafka hands back instead of waiting it out.
        """
        return self._retried(call, _COORDINATOR_BUSY)

    def _retried(self, call, transient):
        """`call(seconds left)`, asked again on an error of `transient` until the timeout."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                return call(max(1.0, deadline - time.monotonic()))
            except KafkaException as e:
                if e.args[0].code() not in transient or time.monotonic() >= deadline:
                    raise unavailable(self, e) from None
                time.sleep(0.2)

    def _metadata(self, topic: str | None = None):
        # librdkafka retries a refused login or a failed TLS handshake until the timeout and
        # then reports only "transport failure"; its error callback says why. Asking in short
        # steps lets a wrong password or CA fail at once, with the reason.
        with self._client(("admin",), lambda: _Admin(self.client_config())) as admin:
            admin.errors.clear()
            deadline = time.monotonic() + self.timeout_s
            while True:
                try:
                    return admin.client.list_topics(topic=topic, timeout=max(0.1, min(1.0, deadline - time.monotonic())))
                except KafkaException as e:
                    admin.client.poll(0)  # serves error_cb
                    if time.monotonic() >= deadline or any(x.code() in _REFUSALS for x in admin.errors):
                        raise unavailable(self, e, admin.errors) from None
                    time.sleep(0.1)  # some failures return at once: do not spin
