"""The exporter's Prometheus collector: each scrape refreshes every component, waiting no longer than its timeout.

The components (kafka, dagster, and swift when the archive's Swift is given) are refreshed by a pool
of two threads, whatever their number: Kafka's and Dagster's refreshes side by side, Swift's (a
listing or two, at most once a minute) in whichever thread is free first, rather than in a thread
kept for it. What finished within the scrape's timeout is served fresh with `matos_up{component}` 1;
what failed, or is still running when the timeout comes, is served as last known with `matos_up` 0
and `matos_scrape_errors_total` counted once; a refresh still running is not started again, the
next scrape waits for the same one.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from typing import Callable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from matos_dagster.core.metrics.catalog import METRICS
from matos_dagster.core.metrics.samples import Samples

log = logging.getLogger(__name__)
THREADS = 2  # the refresh threads, whatever the number of components (above)


class Collector:
    def __init__(self, archive: str, components: dict[str, Callable[[], Samples]], timeout_s: float = 5.0):
        self.archive, self.components, self.timeout_s = archive, components, timeout_s
        self.last: dict[str, Samples] = {name: Samples() for name in components}
        self.up = {name: 0 for name in components}
        self.errors = {name: 0 for name in components}
        self.took = {name: 0.0 for name in components}
        self.running: dict[str, concurrent.futures.Future] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(THREADS, len(components)),
                                                           thread_name_prefix="matos-metrics")
        self._lock = threading.Lock()

    def refresh(self) -> None:
        with self._lock:
            deadline = time.monotonic() + self.timeout_s
            for name, read in self.components.items():
                if name not in self.running:
                    self.running[name] = self._pool.submit(self._timed, name, read)
            concurrent.futures.wait(self.running.values(), timeout=max(0.0, deadline - time.monotonic()))
            for name, future in list(self.running.items()):
                if not future.done():
                    self.up[name] = 0
                    self.errors[name] += 1
                    log.warning("metrics: the %s refresh is still running after %.1f s; serving its last values",
                                name, self.timeout_s)
                    continue
                del self.running[name]
                try:
                    self.last[name] = future.result()
                    self.up[name] = 1
                except Exception as e:  # noqa: BLE001 - served as last known, counted, logged in one line
                    self.up[name] = 0
                    self.errors[name] += 1
                    log.warning("metrics: the %s refresh failed: %s: %s", name, type(e).__name__,
                                str(e).splitlines()[0] if str(e) else "")

    def _timed(self, name: str, read: Callable[[], Samples]) -> Samples:
        t0 = time.monotonic()
        try:
            return read()
        finally:
            self.took[name] = time.monotonic() - t0

    def samples(self) -> Samples:
        out = Samples()
        for name in self.components:
            out.update(self.last[name])
            out.set("matos_up", (self.archive, name), self.up[name])
            out.set("matos_scrape_errors_total", (self.archive, name), self.errors[name])
            out.set("matos_refresh_duration_seconds", (self.archive, name), self.took[name])
        return out

    def collect(self):
        self.refresh()
        return families(self.samples())

    def close(self, wait_s: float = 10.0) -> None:
        """No refresh starts any more; those running are waited for, `wait_s` at most: one reading the
        Dagster instance when its owner disposes of it leaves connections that fail later, in the
        garbage collector (logged with a traceback from whatever thread collects them)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        concurrent.futures.wait(list(self.running.values()), timeout=wait_s)


def families(samples: Samples):
    """The catalog's metrics with the samples' values, in the catalog's order."""
    for m in METRICS:
        values = samples.values.get(m.name, {})
        labels = list(m.labels)
        if m.kind == "counter":
            family = CounterMetricFamily(m.name, m.help, labels=labels)
        elif m.kind == "summary":
            family = SummaryMetricFamily(m.name, m.help, labels=labels)
        else:
            family = GaugeMetricFamily(m.name, m.help, labels=labels)
        for key, value in sorted(values.items()):
            if m.kind == "summary":
                count, total = value
                family.add_metric(list(key), count_value=count, sum_value=total)
            else:
                family.add_metric(list(key), float(value))
        yield family
