"""`matos metrics` as an operator runs it: refusals in one line before anything listens, and the
exporter of the MATOS_ settings' archive served until SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import user_env
from matos_dev.stack.process import free_port
from metrics_stack import of, scrape, values

from matos_dagster.core.settings import PROJECT_ROOT


REFUSED = [
    (["--tls-key", "key.pem"], "--tls-key without --tls-cert: give the certificate too"),
    (["--user", "prometheus"], "basic authentication needs both --user and --password-file"),
    (["--port", "70000"], "--port 70000: give a port from 1 to 65535"),
    (["--tls-cert", "/no/such/cert.pem"], "--tls-cert /no/such/cert.pem: no such file"),
]


def test_a_bad_option_is_refused_in_one_line_naming_what_to_change(tmp_path, kafka_server, swift_server, monkeypatch,
                                                                   capsys):
    from matos_dagster.cli import main

    for name, value in user_env(tmp_path, kafka_server, swift_server, "topics: [{name: demo}]\n", "c").items():
        monkeypatch.setenv(name, value)
    for args, says in REFUSED:  # in this process: a command's start costs 20 s on a busy machine
        assert main(["metrics", *args]) == 2
        out = capsys.readouterr()
        assert out.err.endswith(f" metrics: {says}\n") and out.err.count("\n") == 1 and out.out == "", (args, out)


@pytest.mark.slow  # the exporter itself is proven in this process (test_exporter.py); this is its command
def test_matos_metrics_serves_the_settings_archive_until_sigterm(tmp_path, kafka_server, swift_server, new_topic):
    topic = new_topic(partitions=3)
    env = user_env(tmp_path, kafka_server, swift_server, f"topics: [{{name: {topic}}}]\n", "c")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "matos_dagster", "metrics", "--address", "127.0.0.1", "--port",
                             str(port)], env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()
        assert line == f"serving metrics on http://127.0.0.1:{port}/metrics\n", line + proc.stdout.read()[-3000:]
        vals = values(scrape(f"http://127.0.0.1:{port}/metrics"))
        assert of(vals, "matos_up", component="kafka") == 1 and of(vals, "matos_up", component="dagster") == 1
        assert [of(vals, "matos_lag_records", topic=topic, partition=p) for p in range(3)] == [0, 0, 0]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
