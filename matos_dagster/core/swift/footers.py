"""Parquet objects' Arrow schemas, from their footers: one ranged GET of each object's end, no record.

What a typed topic's readers ask before reading (a Spark frame's schema, an Iceberg table's
columns): the objects' typed columns and their types, which may differ from object to object
(records/unify.py). No Dagster imports.
"""

from __future__ import annotations

import concurrent.futures

import pyarrow as pa

from matos_dagster.core.records.unify import FOOTER_TAIL, footer_bytes, footer_schema
from matos_dagster.core.swift.store import Store, SwiftParams

THREADS = 8  # footers of a long read's objects: one small GET each, a connection per thread


def object_schema(store: Store, name: str) -> pa.Schema:
    """The Arrow schema of the Parquet object `name`."""
    got = store.get_tail(name, FOOTER_TAIL)
    if got is None:
        raise FileNotFoundError(f"object {name} is listed in a manifest but missing from Swift container "
                                f"{store.container!r}: the archive is damaged there (`matos verify <topic> --audit-all` lists them)")
    tail, size = got
    need = footer_bytes(tail)
    if need > len(tail) and size > len(tail):  # a footer longer than the first GET
        tail, _ = store.get_tail(name, need)
    return footer_schema(tail)


def object_schemas(params: SwiftParams, names: list[str], store: Store | None = None) -> list[pa.Schema]:
    """The schemas of these Parquet objects, in order; a few on `store`, many on threads of their own."""
    if store is not None and len(names) <= 2:
        return [object_schema(store, n) for n in names]

    def chunk(part: list[str]) -> list[pa.Schema]:
        with Store(params) as own:  # a Store is one connection: one per thread
            return [object_schema(own, n) for n in part]

    parts = [names[k::THREADS] for k in range(THREADS)]
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        done = list(pool.map(chunk, [p for p in parts if p]))
    out: list[pa.Schema] = [None] * len(names)  # type: ignore[list-item]
    for k, schemas in enumerate(done):
        out[k::THREADS] = schemas
    return out
