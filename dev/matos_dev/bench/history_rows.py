"""A deep synthetic history written straight into a Swift container's listing (growth benchmark).

Swift's own CPU per object PUT (object server plus container update, ~7-10 ms here) caps real
writes at about 110 objects/s, through threads or `bulk` extract-archive alike: 1,000,000 ranges
would take three hours. Only the listing of the old history matters to the product's recurring
paths, which must never read an old range's objects; so the history below the most recent ranges
is written as container rows with Swift's own `ContainerBroker.merge_items` (what replication
uses), rows exactly like those a real PUT of the manifest leaves (name, size, md5, content type),
but with no object behind them. Any path that reads one gets a 404, and the benchmark checks that
none did (`history.DeepReads`): a proof that those paths read no old range, not a shortcut.

The rows are built here (pure, tested) and streamed as JSON lines to `MERGE_SCRIPT`, which runs
with the Swift venv's python against the container's database on the devstack's one device
(found with Swift's ring and `hash_path`: `SwiftServer.container_db`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from matos_dagster.core.offsets.ranges import OffsetRange
from matos_dagster.core.swift import layout, manifest
from matos_dagster.core.swift.store import canonical_json

BATCH = 10_000  # rows a transaction: merge_items looks names up 999 at a time, then inserts them


def swift_timestamp(t: float) -> str:
    """`Timestamp(t).internal` as Swift writes `created_at`: 16 characters, 5 decimals."""
    return f"{t:016.5f}"


def manifest_row(prefix: str, r: OffsetRange, fmt: str, created_at: float) -> dict:
    """The container row a PUT of `r`'s empty-range manifest (as `Store.put_json` writes it) leaves."""
    body = canonical_json(manifest.build(r, fmt, []))
    return {
        "name": layout.manifest_name(prefix, r),
        "created_at": swift_timestamp(created_at),
        "size": len(body),
        "content_type": "application/json",
        "etag": hashlib.md5(body).hexdigest(),
        "deleted": 0,
        "storage_policy_index": 0,
    }


def history_rows(prefix: str, topic: str, partition: int, starts: Iterable[int], fmt: str,
                 created_at: float) -> Iterator[dict]:
    """Rows of ranges `[i, i + 1)` for each `i` in `starts`, all stamped `created_at`."""
    for i in starts:
        yield manifest_row(prefix, OffsetRange(topic, partition, i, i + 1), fmt, created_at)


# Runs in the Swift venv: argv = the container's database, account, container, batch; JSON rows on stdin.
MERGE_SCRIPT = r'''
import json, sys, time
from swift.container.backend import ContainerBroker

db, account, container, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
broker = ContainerBroker(db, account=account, container=container)
info = broker.get_info()
if (info["account"], info["container"]) != (account, container):
    sys.exit("%s is the database of %s/%s, not %s/%s" % (db, info["account"], info["container"], account, container))
t, n, rows = time.time(), 0, []
for line in sys.stdin:
    rows.append(json.loads(line))
    if len(rows) == batch:
        broker.merge_items(rows)
        n, rows = n + len(rows), []
if rows:
    broker.merge_items(rows)
    n += len(rows)
info = broker.get_info()
print(json.dumps({"merged": n, "object_count": info["object_count"], "db": broker.db_file,
                  "seconds": time.time() - t}))
'''


def merge_rows(swift_python: Path, db: str, account: str, container: str, rows: Iterable[dict]) -> dict:
    """Merge `rows` into the container's listing; what the script reports (rows merged, object count)."""
    # Its output goes to files: a pipe it filled while we still write rows would hang both.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            [str(swift_python), "-c", MERGE_SCRIPT, str(db), account, container, str(BATCH)],
            stdin=subprocess.PIPE, stdout=out, stderr=err, text=True,
        )
        try:
            for row in rows:
                proc.stdin.write(json.dumps(row, separators=(",", ":")) + "\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the script stopped early: its stderr says why
        code = proc.wait()
        out.seek(0)
        err.seek(0)
        if code != 0:
            raise RuntimeError(f"merging rows into {account}/{container} failed: {err.read().strip()[-2000:]}")
        return json.loads(out.read().strip().splitlines()[-1])


def merge_history(swift_server, container: str, prefix: str, topic: str, partition: int, starts: range,
                  fmt: str) -> dict:
    """Rows of ranges `[i, i + 1)`, `i` in `starts`, merged into `container` of the devstack's account."""
    t = time.monotonic()
    rows = history_rows(prefix, topic, partition, starts, fmt, time.time())
    db = swift_server.container_db(container)["db"]  # Swift's own ring and hash_path
    out = merge_rows(swift_server.venv / "bin" / "python", db, swift_server.account, container, rows)
    if out["merged"] != len(starts):
        raise RuntimeError(f"merged {out['merged']} rows into {container}, expected {len(starts)}")
    out["wall_s"] = time.monotonic() - t
    return out
