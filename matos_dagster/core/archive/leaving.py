"""What an archive slice leaves out because an erasure asked it (core/erase/ledger.py): erased
records never come back, whichever writer reads them from Kafka again. No Dagster imports."""

from __future__ import annotations

import pyarrow as pa


def erased_entries(offsets: list[int]) -> list[dict]:
    """The slice's records left out by the erasure ledger: one entry, which the manifest's `erased` takes."""
    return [{"erased": offsets}] if offsets else []


def leave_out(leave, chunk, erased: list[int]):
    """`chunk` without the records `leave` (the erasure ledger's `Leave`, or None) leaves out; their
    offsets are added to `erased`."""
    if leave is None or not chunk.num_rows:
        return chunk
    out = leave.mask(chunk.column(chunk.schema.get_field_index("key")),
                     chunk.column(chunk.schema.get_field_index("offset")))
    if not out.any():
        return chunk
    erased += chunk.filter(pa.array(out)).column(chunk.schema.get_field_index("offset")).to_pylist()
    return chunk.filter(pa.array(~out))
