"""`KafkaArchive`, the `dg` component: scaffolded, its `defs.yaml` builds the archive's definitions
with connections read from the environment where they are used, never stored."""

from __future__ import annotations

import os

import pytest
import yaml
from dagster import AssetKey, EnvVar
from dagster.components.testing import create_defs_folder_sandbox

from matos_dagster import KafkaArchive


def messages(error: BaseException | None) -> list[str]:
    """The error's message and those of its causes: Dagster wraps a component's own error."""
    out = []
    while error is not None:
        out.append(str(error))
        error = error.__cause__ or error.__context__
    return out


@pytest.fixture
def sandbox():
    with create_defs_folder_sandbox() as sandbox:
        yield sandbox


def test_the_scaffolded_defs_yaml_loads_as_it_is_named_for_its_folder(sandbox):
    path = sandbox.scaffold_component(KafkaArchive, defs_path="orders_archive")
    doc = yaml.safe_load((path / "defs.yaml").read_text())
    assert doc["type"].endswith("KafkaArchive")
    assert doc["attributes"]["name"] == "orders_archive"
    with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
        assert isinstance(component, KafkaArchive)
        assert defs.resolve_assets_def(AssetKey(["orders_archive", "archive_orders"]))
        assert defs.resolve_job_def("orders_archive_archive_ranges")


def test_a_connection_written_as_env_is_an_env_var_whose_value_is_never_stored(sandbox, monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "secret-broker:9092")
    path = sandbox.scaffold_component(KafkaArchive, defs_path="eu")
    doc = yaml.safe_load((path / "defs.yaml").read_text())
    doc["attributes"]["kafka"]["timeout_s"] = "{{ env.KAFKA_TIMEOUT_S }}"
    doc["attributes"]["swift"]["container"] = "archive-eu"
    (path / "defs.yaml").write_text(yaml.safe_dump(doc))
    with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
        kafka = defs.resources["eu_kafka"]
        assert kafka.bootstrap_servers == EnvVar("KAFKA_BOOTSTRAP_SERVERS")
        assert kafka.timeout_s == EnvVar.int("KAFKA_TIMEOUT_S")
        assert defs.resources["eu_swift"].container == "archive-eu"
        assert "secret-broker" not in repr(defs.resources)


def test_the_folder_name_is_the_archive_name_unless_the_defs_yaml_names_it(sandbox):
    path = sandbox.scaffold_component(KafkaArchive, defs_path="us-east")
    doc = yaml.safe_load((path / "defs.yaml").read_text())
    assert doc["attributes"]["name"] == "us_east"  # a name Dagster takes
    del doc["attributes"]["name"]
    doc["attributes"]["topics"] = [{"pattern": "logs\\..*"}, "payments"]
    (path / "defs.yaml").write_text(yaml.safe_dump(doc))
    os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # patterns, no Kafka: the named topics, a warning
    with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
        assert defs.resolve_assets_def(AssetKey(["us_east", "archive_payments"]))
        assert defs.resolve_sensor_def("us_east_lag")


def test_a_bad_attribute_is_refused_in_one_line_naming_it(sandbox):
    path = sandbox.scaffold_component(KafkaArchive, defs_path="eu")
    doc = yaml.safe_load((path / "defs.yaml").read_text())
    doc["attributes"]["topics"] = [{"name": "orders", "format": "csv"}]
    (path / "defs.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception) as e:
        with sandbox.load_component_and_build_defs(defs_path=path):
            pass
    causes = messages(e.value)
    assert any("format" in c and "csv" in c and "\n" not in c for c in causes), causes


def test_spark_conf_is_taken_as_a_yaml_mapping_as_well_as_the_settings_string(sandbox):
    path = sandbox.scaffold_component(KafkaArchive, defs_path="eu")
    doc = yaml.safe_load((path / "defs.yaml").read_text())
    doc["attributes"]["spark"] = {"master": "local[2]",
                                  "conf": {"spark.executor.memory": "2g", "spark.ui.enabled": False, "spark.x": 3}}
    (path / "defs.yaml").write_text(yaml.safe_dump(doc))
    with sandbox.load_component_and_build_defs(defs_path=path) as (_, defs):
        spark = defs.resources["eu_spark"]
        assert spark.conf == "spark.executor.memory=2g;spark.ui.enabled=false;spark.x=3"
        assert {"spark.executor.memory": "2g", "spark.ui.enabled": "false"}.items() <= spark.spark_config().items()
    # A value the `key=value;...` form cannot carry is refused, naming it.
    doc["attributes"]["spark"]["conf"] = {"spark.driver.extraJavaOptions": "-Da=1;-Db=2"}
    (path / "defs.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception) as e:
        with sandbox.load_component_and_build_defs(defs_path=path):
            pass
    causes = messages(e.value)
    assert any("spark.conf: spark.driver.extraJavaOptions: " in c and "\n" not in c for c in causes), causes


def test_every_attribute_of_the_component_has_its_meaning():
    """The page's attribute table is generated from the model: an attribute without a description
    would be a row that says nothing."""
    for name, info in KafkaArchive.model().model_fields.items():
        assert info.description, name
