"""A Store per thread of a pool, for a batch run's Swift requests of many partitions. No Dagster imports."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from matos_dagster.core.swift.store import Store

# The driver's Swift requests of a batch (checks, manifests, prefixes), a partition a thread: each is a
# round trip of tens of milliseconds spent waiting, and a batch has hundreds of partitions.
THREADS = 8


class Stores:
    """A Store per thread of a pool (a Store is one connection, not thread-safe), all closed at the end."""

    def __init__(self, params):
        self.params, self._local, self._made, self._lock = params, threading.local(), [], threading.Lock()

    def get(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.params)
            with self._lock:
                self._made.append(store)
        return store

    def each(self, fn: Callable[[Any, Store], Any], items: list) -> list:
        """`[fn(item, store) for item in items]`, from THREADS threads, each with its own Store."""
        if len(items) <= 1:
            return [fn(item, self.get()) for item in items]
        with ThreadPoolExecutor(min(THREADS, len(items)), thread_name_prefix="batch") as pool:
            return list(pool.map(lambda item: fn(item, self.get()), items))

    def close(self) -> None:
        for store in self._made:
            store.close()
