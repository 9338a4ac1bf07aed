from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest
from dagster import instance_for_test

sys.path.insert(0, str(Path(__file__).parent))  # metrics_stack, beside the tests that share it

from metrics_stack import Archived  # noqa: E402

from matos_dagster.exporter import serve_metrics  # noqa: E402


@pytest.fixture
def instance():
    with instance_for_test() as instance:
        yield instance
    # The connections the exporter's threads left to the disposed instance are finalised here, not in
    # a collection inside a later test's `ast` parse (tests/conftest.py's pytest_sessionfinish says why).
    gc.collect()


@pytest.fixture
def archived(kafka, swift, instance, new_topic):
    return Archived(kafka, swift, instance, new_topic)


@pytest.fixture
def served(kafka, swift, instance, archived):
    server = serve_metrics(archived.topics, kafka, swift=swift, instance=instance, address="127.0.0.1", port=0,
                           timeout_s=30)  # a busy machine
    try:
        yield archived, server
    finally:
        server.stop()
        server.collector.close()
