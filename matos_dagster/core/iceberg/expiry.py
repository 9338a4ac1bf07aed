"""Expiring a table's old snapshots, so that its metadata stays bounded whatever the history: the
newest snapshots kept, older ones expired in batches, and the metadata files only they used deleted
(never a data file: those are the archive's objects). A delete Swift refused is kept in a small list
beside the table (layout.PENDING_DELETES) and retried by the next expiry. No Dagster imports.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from matos_dagster.core.swift import layout

log = logging.getLogger(__name__)

# Snapshots kept: the newest KEEP_SNAPSHOTS (time travel over the last ones); older ones are expired
# in batches of EXPIRE_BATCH (one metadata-only commit per batch), so that the table's metadata file,
# which every commit rewrites and lists every snapshot in, stays bounded whatever the history.
KEEP_SNAPSHOTS = 100
EXPIRE_BATCH = 100
# Metadata files whose delete failed at an expiry (Swift refused or did not answer): listed beside the
# table's folders (layout.PENDING_DELETES), at most PENDING_MAX, and retried by the next expiry (PendingDeletes).
PENDING_MAX = 1000


@dataclass(frozen=True)
class Expiry:
    """What one expiry did (`Tables.expire`): nothing at all until a batch of snapshots has piled up."""

    expired: int = 0  # snapshots
    deleted: tuple[str, ...] = ()  # metadata files deleted (this batch's, and earlier failures retried)
    failed: tuple[str, ...] = ()  # metadata files whose delete failed: kept in PENDING_DELETES, retried next time
    retried: int = 0  # of `deleted`, those an earlier expiry failed to delete


class PendingDeletes:
    """The table's metadata files whose delete failed, a small JSON object beside the table's folders
    (`<location>/_deletes_pending.json`, read and written through the table's own FileIO: Swift's S3 API).

    Bounded: at most PENDING_MAX paths (a batch deletes about one file a snapshot, so that is several whole
    batches refused in a row: Swift refusing everything; the excess stays as orphans, said in the log). Read and rewritten by the expiry only,
    once a batch; two runs expiring at the same moment could each rewrite it and lose the other's paths:
    those files stay as orphans, unreferenced, which is what every failed delete was before this list.
    """

    def __init__(self, io, path: str):
        self.io, self.path = io, path

    def read(self) -> set[str]:
        try:
            with self.io.new_input(self.path).open() as f:
                return set(json.loads(f.read())["paths"])
        except FileNotFoundError:
            return set()
        except Exception as e:  # noqa: BLE001 - unreadable: its paths stay as orphans; new failures are kept
            log.warning("%s not read (%s: %s): the deletes it holds are not retried", self.path, type(e).__name__, e)
            return set()

    def write(self, paths: list[str]) -> None:
        try:
            if not paths:
                self.io.delete(self.path)
                return
            if len(paths) > PENDING_MAX:
                log.warning("%s: %d failed deletes, %d kept for retrying, the rest left as orphans",
                            self.path, len(paths), PENDING_MAX)
            with self.io.new_output(self.path).create(overwrite=True) as f:
                f.write(json.dumps({"paths": sorted(paths)[:PENDING_MAX]}).encode())
        except FileNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001 - housekeeping: those files stay as orphans, never read
            log.warning("%s not written (%s: %s): %d failed delete(s) will not be retried",
                        self.path, type(e).__name__, e, len(paths))


def expire(t) -> Expiry:
    """Expire all but the newest KEEP_SNAPSHOTS snapshots of table `t`, once EXPIRE_BATCH more have piled
    up, and delete the metadata files only they used (their manifest lists, and manifests no kept
    snapshot lists), with those an earlier expiry failed to delete; what it did. pyiceberg's expiry
    itself deletes no file, and this deletes nothing outside the table's `metadata/` folder: the data
    files are the archive's objects."""
    snaps = sorted(t.snapshots(), key=lambda s: s.sequence_number or 0)
    if len(snaps) < KEEP_SNAPSHOTS + EXPIRE_BATCH:
        return Expiry()
    current = t.current_snapshot().snapshot_id
    return expire_these(t, [s for s in snaps[:-KEEP_SNAPSHOTS] if s.snapshot_id != current])


def expire_these(t, old: list, strict: bool = False) -> Expiry:
    """Expire these snapshots of table `t` (never its current one) and delete the metadata files only
    they used, as `expire` does. `strict`: a refused expiry raises (an erasure's: its re-run expires
    them), rather than being left to a later run."""
    snaps = list(t.snapshots())
    if not old:
        return Expiry()
    gone = {s.snapshot_id for s in old}
    keep = [s for s in snaps if s.snapshot_id not in gone]
    try:
        t.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in old]).commit()
    except Exception as e:  # noqa: BLE001 - housekeeping: another run committed or expired meanwhile
        if strict:
            raise
        log.info("%s: snapshots not expired this time (%s: %s); a later run expires them", t.name(), type(e).__name__, e)
        return Expiry()
    # Expired: no snapshot of the table names these files any more. A crash before (or while)
    # deleting them leaves a batch's files in Swift, unreferenced; nothing reads them.
    folder = t.location().rstrip("/") + "/metadata/"
    live = {m.manifest_path for s in keep for m in s.manifests(t.io)}
    dead = {s.manifest_list for s in old}
    for s in old:
        try:
            dead |= {m.manifest_path for m in s.manifests(t.io)} - live
        except Exception as e:  # noqa: BLE001 - its manifest list is gone already (a run deleted it)
            log.info("%s: the manifests of expired snapshot %s not read (%s: %s); only its manifest list "
                     "is deleted", ".".join(t.name()), s.snapshot_id, type(e).__name__, e)
    # The deletes an earlier expiry saw fail, tried again. Why a list kept beside the table and not
    # a listing of `metadata/` for files no snapshot names: a listing would also find the manifests
    # of a commit another run is making right now (written, not yet in the catalog) and delete them
    # from under it. A file in the list was named only by expired snapshots, which no later commit
    # names again (a commit starts from the current snapshot, which is kept), so deleting it later
    # is as safe as deleting it now; the live ones are left out all the same, and only `metadata/`.
    pending = PendingDeletes(t.io, t.location().rstrip("/") + "/" + layout.PENDING_DELETES)
    earlier = pending.read()
    todo = sorted(p for p in (dead | earlier) - live if p.startswith(folder))
    deleted, failed, error = [], [], None
    for path in todo:
        try:
            t.io.delete(path)
        except FileNotFoundError:
            deleted.append(path)  # gone already: an earlier attempt's delete reached Swift after all
        except Exception as e:  # noqa: BLE001 - Swift refused or did not answer: retried by the next expiry
            failed.append(path)
            error = error or e
        else:
            deleted.append(path)
    if failed:
        log.warning("%s: %d of %d metadata file(s) of expired snapshots not deleted (first %s: %s: %s); "
                    "the next expiry retries them", ".".join(t.name()), len(failed), len(todo), failed[0],
                    type(error).__name__, error)
    if failed or earlier:
        pending.write(failed)
    return Expiry(len(old), tuple(deleted), tuple(failed), len(earlier & set(deleted)))
