"""The Kafka resource: the settings of a cluster as Dagster config; the client is the core's."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource
from pydantic import Field, PrivateAttr

from matos_dagster.core.kafka.client import KafkaClient


class KafkaResource(KafkaClient, ConfigurableResource):
    """A Kafka cluster: PLAINTEXT, SSL, or SASL_SSL with PLAIN (Message Hub API keys) or SCRAM."""

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
