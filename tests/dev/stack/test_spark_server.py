"""The devstack's Spark Connect server fails clearly and leaves nothing behind.

Its happy path (start, a job with a Python UDF, stop) is in test_stack.py.
"""

from __future__ import annotations

import socket

import pytest
from matos_dev.stack import process
from matos_dev.stack.spark import SparkConnectServer

pytestmark = pytest.mark.timeout(300)


def test_a_server_that_dies_at_start_is_reported_with_its_log(tmp_path):
    server = SparkConnectServer(tmp_path / "spark", port=process.free_port(), master="no-such-master")
    with pytest.raises(RuntimeError, match="exited during start-up") as failure:
        server.start(timeout=120)
    assert str(server.log_file) in str(failure.value)
    assert "Master must either be" in str(failure.value)  # the log's tail: Spark's own error
    assert not server.running() and not server.pid_file.exists()
    assert server.status()["pid"] is None
    server.stop()  # a no-op now


def test_a_taken_port_starts_nothing(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        server = SparkConnectServer(tmp_path / "spark", port=port)
        assert server.url == f"sc://127.0.0.1:{port}"
        with pytest.raises(RuntimeError, match=f"127.0.0.1:{port} is already in use"):
            server.start()
    assert not server.pid_file.exists() and not server.log_file.exists()
