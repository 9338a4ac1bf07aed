"""The Kafka resource: the settings of a cluster as Dagster config; the client is the core's."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource
from pydantic import Field, PrivateAttr

from matos_dagster.core.kafka.client import KafkaClient


class KafkaResource(KafkaClient, ConfigurableResource):
    """The Kafka cluster an archive reads: PLAINTEXT, SSL, or SASL_SSL with PLAIN or SCRAM.

    The archive's runs and sensors read the topics with it, and commit to its consumer `group` the
    offset up to which each partition is archived (the archive's progress lives in Kafka, beside
    the records). Each field is the `MATOS_KAFKA_*` setting of its name; pass secrets as `EnvVar`s,
    read where the resource is used and never stored in Dagster's records:

    ```python
    from dagster import EnvVar
    from matos_dagster.resources import KafkaResource

    kafka = KafkaResource(bootstrap_servers="broker1:9093,broker2:9093", security_protocol="SASL_SSL",
                          username="token", password=EnvVar("KAFKA_API_KEY"))
    ```

    In a `KafkaArchive` component's `defs.yaml` the same fields are the `kafka:` mapping. The
    password never appears in the resource's `repr`.

    Attributes:
        bootstrap_servers: The brokers, `host:port[,host:port]`.
        security_protocol: `PLAINTEXT`, `SSL` or `SASL_SSL`.
        sasl_mechanism: With `SASL_SSL`: `PLAIN` (IBM Event Streams: user `token`, password the API
            key), `SCRAM-SHA-256` or `SCRAM-SHA-512`.
        username: The SASL user name.
        password: The SASL password or API key.
        ca_file: PEM file of the CA that signed the brokers' certificates; empty: the system's CAs.
        group: The consumer group whose committed offsets say what is archived (a topic may set
            its own in the topics).
        client_id: The client id the brokers see in their logs and quotas.
        timeout_s: Seconds to wait for an answer from Kafka before failing.
    """

    bootstrap_servers: str = Field(description="Brokers, `host:port[,host:port]` (MATOS_KAFKA_BOOTSTRAP_SERVERS).")
    # Plain strings, checked in client_config(): Dagster's EnvVar cannot fill a Literal field.
    security_protocol: str = Field(
        default="PLAINTEXT", description="How to talk to the brokers (MATOS_KAFKA_SECURITY_PROTOCOL)."
    )
    sasl_mechanism: str = Field(
        default="PLAIN",
        description="SASL mechanism for SASL_SSL; PLAIN is what IBM Message Hub / Event Streams "
        "uses with an API key (MATOS_KAFKA_SASL_MECHANISM).",
    )
    username: str = Field(default="", description="SASL user name (MATOS_KAFKA_USERNAME).")
    password: str = Field(default="", repr=False, description="SASL password or API key (MATOS_KAFKA_PASSWORD).")
    ca_file: str = Field(default="", description="PEM file of the brokers' CA; empty: system CAs (MATOS_KAFKA_CA_FILE).")
    group: str = Field(
        default="matos-archiver",
        description="Default consumer group whose committed offsets record archiving progress (MATOS_KAFKA_GROUP).",
    )
    client_id: str = Field(default="matos-dagster", description="Client id shown to brokers (MATOS_KAFKA_CLIENT_ID).")
    timeout_s: int = Field(default=15, description="Seconds to wait for Kafka before failing (MATOS_KAFKA_TIMEOUT_S).")
    _kept: Any = PrivateAttr(default=None)

    def __repr__(self) -> str:
        # Never show the password, whatever pydantic or Dagster would print.
        return (
            f"KafkaResource(bootstrap_servers={self.bootstrap_servers!r}, "
            f"security_protocol={self.security_protocol!r}, username={self.username!r}, password=***)"
        )

    __str__ = __repr__
