"""Kafka's errors as the core raises them, and which of librdkafka's a retry can cure.

`KafkaUnavailable` (the brokers did not answer, or refused), `UnknownTopic`, `UnknownPartition`;
the librdkafka error codes `KafkaClient` asks again on (`_COORDINATOR_BUSY`, `_STARTING`) or
gives up on at once (`_REFUSALS`); and `unavailable`, which turns a librdkafka error into one
`KafkaUnavailable` line naming the settings to check. No Dagster imports.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException


class KafkaUnavailable(RuntimeError):
    """The brokers did not answer, or refused our credentials."""


class UnknownTopic(ValueError):
    pass


class UnknownPartition(ValueError):
    pass


# Errors no retry can cure: a refused login, a certificate that cannot be verified.
_REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL)
_COORDINATOR_BUSY = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
)
# What a broker answers for a moment after it started or created a topic, while leaders are
# elected: retried within the timeout wherever the product starts against a fresh broker.
_STARTING = (
    KafkaError._UNKNOWN_PARTITION,  # the client's metadata does not have the new partitions yet
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH,
)


def unavailable(kafka: Any, e: KafkaException, errors: list[KafkaError] = ()) -> KafkaUnavailable:
    """`e` as one line that says what to check. `kafka` is the client that met it (its settings
    `bootstrap_servers`, `security_protocol`, `sasl_mechanism`, `username`, `timeout_s` name
    where and how); `errors` are what its error callback reported (why a connection failed)."""
    err = e.args[0] if e.args else e
    err = err.str() if isinstance(err, KafkaError) else err
    where = f"Kafka at {kafka.bootstrap_servers} ({kafka.security_protocol})"
    for x in errors:
        if x.code() == KafkaError._AUTHENTICATION:
            return KafkaUnavailable(
                f"{where} refused the SASL {kafka.sasl_mechanism} login of user {kafka.username!r}: {x.str()}; "
                "check MATOS_KAFKA_USERNAME / MATOS_KAFKA_PASSWORD / MATOS_KAFKA_SASL_MECHANISM"
            )
        if x.code() == KafkaError._SSL:
            return KafkaUnavailable(
                f"{where}: the TLS handshake failed: {x.str()}; check MATOS_KAFKA_CA_FILE (the PEM file of "
                "the CA that signed the brokers' certificates) and MATOS_KAFKA_SECURITY_PROTOCOL"
            )
    code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
    if code is not None and code >= 0:  # the broker answered, with a refusal: its reason, not a timeout
        return KafkaUnavailable(f"{where} refused the request: {err}")
    hint = (
        "check MATOS_KAFKA_USERNAME / MATOS_KAFKA_PASSWORD / MATOS_KAFKA_SASL_MECHANISM"
        if kafka.security_protocol == "SASL_SSL"
        else "check MATOS_KAFKA_BOOTSTRAP_SERVERS and that the brokers run"
    )
    last = [x.str() for x in errors if x.code() == KafkaError._TRANSPORT][-1:]
    return KafkaUnavailable(
        f"{where} did not answer within {kafka.timeout_s:g}s: {err}{''.join(f' ({t})' for t in last)}; {hint}"
    )
