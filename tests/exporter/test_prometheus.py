"""The alert rules and the dashboard of deploy/, proven with Prometheus' own tools and a real Prometheus
(Debian's `prometheus` package, which brings `promtool`) scraping the exporter on the real stack."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml
from helpers import missing
from matos_dev.stack.process import free_port
from metrics_stack import expiry_record, record_tick

from matos_dagster.core.settings import PROJECT_ROOT
from matos_dagster.core.swift import layout

DEPLOY = PROJECT_ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "matos-rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "matos-rules.test.yml"
DASHBOARD = DEPLOY / "grafana" / "matos.json"
TROUBLESHOOTING = PROJECT_ROOT / "docs" / "operations" / "troubleshooting.md"


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        missing(f"{tool} (Debian: apt-get install --no-install-recommends prometheus)")
    return path


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_accepts_the_rules_and_every_alert_passes_its_unit_tests():
    promtool = need("promtool")
    for args in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
        p = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert {a["alert"] for a in alerts()} == tested, "every alert has a unit test in which it fires"


def test_every_alert_links_to_its_section_of_the_troubleshooting_page():
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", TROUBLESHOOTING.read_text(), flags=re.M)}
    for a in alerts():
        page, _, anchor = a["annotations"]["runbook_url"].partition("#")
        assert (PROJECT_ROOT / page) == TROUBLESHOOTING and anchor in headings, a["alert"]


def dashboard_queries() -> list[str]:
    """Every query of the dashboard, with its variables as Grafana gives them for `All`."""
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"].replace("$archive", ".*") for p in doc["panels"] for t in p["targets"]]


def shortened(rules: str, duration: str = "1s") -> str:
    """The rules with every `for:` shortened, so that an alert fires within a test."""
    return re.sub(r"^(\s+for:) \S+$", rf"\1 {duration}", rules, flags=re.M)


def ask(base: str, path: str, **params) -> dict:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def wait_until(what: str, get, timeout: float, log):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = get()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout:.0f} s; Prometheus' log:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def test_a_real_prometheus_fires_the_lag_alert_of_a_stalled_topic_and_answers_every_dashboard_query(
        served, instance, swift, tmp_path):
    prometheus = need("prometheus")
    archived, server = served
    # The sensors have ticked (the dashboard shows their ticks), and then nothing archives the topic:
    # its records, stamped 10 minutes ago, wait beyond its batch age (60 s) plus the rule's 5 minutes.
    record_tick(instance, "lag", None, took_s=0.5, ago_s=5)
    record_tick(instance, "monitor", None, took_s=2.0, ago_s=5)
    with swift.store() as store:  # an expiry's record (the records erased are served at 0)
        store.put_json(layout.join(store.params.prefix, "_expiry", "records", "e1.json"),
                       expiry_record(archived.topic, {0: 3}))
    rules = tmp_path / "rules.yml"
    rules.write_text(shortened(RULES.read_text()))
    port = free_port()
    target = urllib.parse.urlparse(server.url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "matos", "static_configs": [{"targets": [target]}]}],
    }))
    log = tmp_path / "prometheus.log"
    base = f"http://127.0.0.1:{port}"
    with open(log, "w") as out:
        proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        firing = wait_until(
            "MatosLagHigh firing for the stalled topic",
            lambda: [a for a in ask(base, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "MatosLagHigh"
                     and a["labels"].get("topic") == archived.topic and a["state"] == "firing"], 60, log)
        assert firing[0]["annotations"]["runbook_url"].endswith("#matoslaghigh")
        up = ask(base, "/api/v1/query", query='up{job="matos"}')["result"]
        assert up and up[0]["value"][1] == "1"
        for query in dashboard_queries():
            wait_until(f"series for the dashboard's query {query}",
                       lambda: ask(base, "/api/v1/query", query=query)["result"], 30, log)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
