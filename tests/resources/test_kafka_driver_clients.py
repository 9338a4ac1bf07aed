"""The driver's short-lived Kafka consumers (committed, commit, watermarks), as configured.

Pure: the Consumer class is replaced by a recorder, so no broker is needed.
"""

from matos_dagster.core.kafka import client as kafka_mod
from matos_dagster.resources.kafka import KafkaResource


class _Recorder:
    def __init__(self, conf):
        self.conf = conf


def test_driver_consumers_reconnect_within_20ms_so_a_coordinator_query_is_not_held_50ms(monkeypatch):
    # librdkafka drops the bootstrap connection when metadata arrives and may connect again only
    # after reconnect.backoff.ms / 2: at its default (100) each committed() or commit() waited
    # ~50 ms for that (55-80 ms a call on loopback against 17 ms at 10; README, Performance).
    monkeypatch.setattr(kafka_mod, "Consumer", _Recorder)
    conf = KafkaResource(bootstrap_servers="127.0.0.1:9").consumer("g").conf
    assert conf["reconnect.backoff.ms"] <= 20
    assert conf["group.id"] == "g" and conf["enable.auto.commit"] is False


def test_a_callers_override_still_wins_over_the_driver_backoff(monkeypatch):
    monkeypatch.setattr(kafka_mod, "Consumer", _Recorder)
    conf = KafkaResource(bootstrap_servers="127.0.0.1:9").consumer(**{"reconnect.backoff.ms": 250}).conf
    assert conf["reconnect.backoff.ms"] == 250
