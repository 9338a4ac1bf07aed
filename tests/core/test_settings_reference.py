"""One source for every setting: settings.py and topics.py; the documentation is generated from them."""

from __future__ import annotations

import re

import pytest

from matos_dagster.core import settings, topics
from matos_dagster.core.settings import PROJECT_ROOT

CONFIGURATION = PROJECT_ROOT / "docs" / "configuration.md"  # the documentation's configuration page


def between(text: str, start: str, end: str) -> str:
    a = text.index(start)
    return text[text.index("\n", a) + 1:text.index(end)]


def test_the_documented_settings_are_the_generated_reference():
    documented = between(CONFIGURATION.read_text(), "<!-- settings reference", "<!-- end of the settings reference")
    assert documented == settings.reference(), "run `python -m matos_dagster.core.settings` and paste its output"


def test_the_documented_topics_file_keys_are_the_generated_reference():
    documented = between(CONFIGURATION.read_text(), "<!-- topics file reference", "<!-- end of the topics file reference")
    assert documented == topics.reference(), "run `python -m matos_dagster.core.topics` and paste its output"


def test_every_topics_file_key_has_its_meaning():
    from dataclasses import fields

    assert {f.name for f in fields(topics.TopicConfig)} == set(topics.HELP)


def test_every_matos_variable_the_code_reads_is_a_setting():
    """A variable read by the code but missing from settings.py would be undocumented and unchecked."""
    read = set()
    for path in (PROJECT_ROOT / "matos_dagster").rglob("*.py"):
        if "bench" in path.parts:  # the benchmark's own knobs are its command line's
            continue
        read |= set(re.findall(r"\bMATOS_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    unknown = read - set(settings.BY_NAME) - set(settings.TEST_HOOKS)
    assert not unknown, f"read by the code, not in settings.py: {sorted(unknown)}"


def test_the_local_stack_settings_are_apart_from_the_product_ones():
    for s in settings.SETTINGS:
        assert (s.group == settings.LOCAL_STACK) == s.name.startswith("MATOS_DEVSTACK_"), s.name


def test_every_default_is_valid():
    dev = {"MATOS_DEV": "true"}
    assert settings.problems(dev) == [] and settings.problems(dev, settings.LOCAL_STACK) == []


def test_outside_the_development_setup_an_unset_connection_is_one_line_naming_it_and_nothing_points_at_localhost():
    assert settings.problems({}) == [f"{name} is not set: set it to {what}" for name, what in settings.CONNECTIONS.items()]
    # Keystone v3 takes ids or an application credential instead of the v1 user and key.
    assert not [p for p in settings.problems({"MATOS_SWIFT_AUTH_VERSION": "3"}) if "MATOS_SWIFT_USER" in p]
    # A project's archive has its connections in its resources: they are not asked for then.
    assert settings.problems({}, connections=False) == []
    for s in settings.SETTINGS:
        assert "127.0.0.1" not in s.default and str(settings.PROJECT_ROOT) not in s.default, s.name


def test_outside_the_development_setup_no_dagster_home_or_iceberg_catalog_is_made_under_the_package(monkeypatch):
    from matos_dagster import instance
    from matos_dagster.core.iceberg import access
    from matos_dagster.core.iceberg.plan import TableError

    monkeypatch.delenv("MATOS_DEV")
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("MATOS_DEVSTACK_DIR", raising=False)
    monkeypatch.delenv("MATOS_ICEBERG_CATALOG", raising=False)
    with pytest.raises(instance.InstanceError, match="^DAGSTER_HOME is not set: set it to "):
        instance.default_home()
    with pytest.raises(TableError, match="^MATOS_ICEBERG_CATALOG is not set: set it to "):
        access.catalog_properties()


SWITCHES = [s.name for s in settings.SETTINGS if s.kind == settings.FLAG]


@pytest.mark.parametrize("name", SWITCHES)
@pytest.mark.parametrize("spelling", ["0", "1", "yes", "off", "True "])
def test_a_switch_takes_true_or_false_and_nothing_else(name, spelling):
    assert settings.problems({name: spelling}, connections=False) == [f"{name} is {spelling!r}: it takes one of true, false"]
    assert settings.problems({name: "true"}, connections=False) == settings.problems({name: "false"}, connections=False) == []


BAD = [
    ("MATOS_KAFKA_TIMEOUT_S", "abc", "a whole number of seconds, 1 or more"),
    ("MATOS_KAFKA_TIMEOUT_S", "0", "a whole number of seconds, 1 or more"),
    ("MATOS_KAFKA_BOOTSTRAP_SERVERS", "localhost", "`host:port[,host:port]`"),
    ("MATOS_KAFKA_SECURITY_PROTOCOL", "TLS", "one of PLAINTEXT, SSL, SASL_SSL"),
    ("MATOS_SWIFT_AUTH_VERSION", "2", "one of 1, 3"),
    ("MATOS_SWIFT_AUTH_URL", "swift.example:8080", "`http://...` or `https://...`"),
    ("MATOS_SWIFT_RETRIES", "-1", "a whole number, 0 or more"),
    ("MATOS_SPARK_MASTER", "spark-master:7077", "`sc://host:port` (Spark Connect)"),
    ("MATOS_SPARK_CONF", "spark.ui.enabled", "`key=value` pairs separated by `;`"),
    ("MATOS_COMPACT_CRON", "*/5 * * *", "a cron expression of 5 fields"),
    ("MATOS_MONITOR_INTERVAL_S", "5m", "a whole number of seconds, 1 or more"),
    ("MATOS_KEEP_FAILED_RUNS_DAYS", "-2", "a number of days, 0 or more"),
    ("MATOS_KAFKA_CA_FILE", "/nonexistent/ca.pem", "the path of a readable file"),
]


@pytest.mark.parametrize("name,value,takes", BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_setting_and_what_it_takes(name, value, takes):
    (problem,) = settings.problems({name: value}, connections=False)
    assert problem.startswith(f"{name} is {value!r}: it takes {takes}")


def test_a_secret_is_never_shown_in_a_refusal():
    (problem,) = settings.problems({"MATOS_ICEBERG_CATALOG": "type=rest;s3.secret-access-key"}, connections=False)
    assert problem == "MATOS_ICEBERG_CATALOG is (hidden): it takes `key=value` pairs separated by `;`"
