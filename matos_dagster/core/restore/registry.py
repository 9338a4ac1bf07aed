"""Restoring into another schema registry: the archived schemas registered there, and the id map.

A typed topic's records name their schemas by the ids of the registry they were produced
with, and the archive keeps each of those schemas beside the records (`layout.schema_name`).
Restored into another cluster whose registry lacks them (disaster recovery), the records' ids
would name nothing there, or other schemas. With a target registry (`Request.target_registry`,
the job's `target_schema_registry_url`), before anything is created or produced,
`register_archived` registers each archived schema the selected records name in that registry
under the subject the restored record uses (TopicNameStrategy: `<target topic>-value`, `-key`),
its references first under their own subjects, in id order, and returns the `IdMap` of archived
id -> target id the tasks rewrite the wire prefixes with (schema_ids.py). Registering is
idempotent: a schema the subject has already gives its id again, so a rerun maps the same.

An id no schema was archived for (the archive's registry did not know it: a bad record) is
mapped to nothing; its records are restored unchanged, and counted. A target registry that
cannot be reached, refuses the credentials or refuses a schema stops the restore with
RestoreRefused (one line: what, and what to do) before anything is produced. A dry run
registers nothing: it asks the target registry only whether it answers.

The credentials come from the MATOS_TARGET_SCHEMA_REGISTRY_* settings, never from the run's
config (which Dagster keeps): `RegistrySource` keeps the password out of its repr, and the
messages show the URL without any user or password in it. No Dagster imports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

from matos_dagster.core import settings
from matos_dagster.core.restore import schema_ids
from matos_dagster.core.restore.plan import RestoreRefused
from matos_dagster.core.schemas.errors import SchemaError, UnknownSchema
from matos_dagster.core.schemas.sources import RegistrySource, Schema

log = logging.getLogger(__name__)

CREDENTIALS = ("MATOS_TARGET_SCHEMA_REGISTRY_USERNAME", "MATOS_TARGET_SCHEMA_REGISTRY_PASSWORD")


def target_registry(url: str, timeout: float = 10.0, retries: int = 3) -> RegistrySource | None:
    """The registry at `url` with the MATOS_TARGET_SCHEMA_REGISTRY_* settings' credentials and CA;
    None for an empty url. RestoreRefused, before any request, for a url that is not http(s)."""
    url = url.strip()
    if not url:
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https") or not rest:
        raise RestoreRefused(f"target_schema_registry_url is {shown_url(url)!r}: it takes `http(s)://host:port`")
    if settings.has_userinfo(url):
        raise RestoreRefused(f"target_schema_registry_url {shown_url(url)!r} holds a user and password: give the URL "
                             f"without them and set {CREDENTIALS[0]} and {CREDENTIALS[1]}")
    user = settings.get(CREDENTIALS[0])
    return RegistrySource(url, username=user or None, password=settings.get(CREDENTIALS[1]) or None,
                          ca_file=settings.get("MATOS_TARGET_SCHEMA_REGISTRY_CA_FILE") or None,
                          timeout=timeout, retries=retries)


def shown_url(url: str) -> str:
    """`url` without a user or password in it (`https://user:secret@host` -> `https://host`)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@dataclass(frozen=True)
class Registered:
    """What the target registry was given: the id map, and the ids left as they are, with why."""

    ids: dict[str, dict[int, int]] = field(default_factory=dict)  # side -> archived id -> target id
    unarchived: dict[str, dict[int, str]] = field(default_factory=dict)  # side -> id -> why not mapped
    notes: list[str] = field(default_factory=list)


def register_archived(
    archived: Any,
    target: RegistrySource,
    target_topic: str,
    used: dict[str, dict[int, str]],
    dry_run: bool = False,
    say: Callable[[str], None] = log.info,
) -> Registered:
    """Register in `target` each schema of `archived` (an ArchivedSource: `get(id, type)`) that
    `used` names (schema_ids.used), under `<target_topic>-<side>`; see the module doc."""
    where = f"target schema registry {shown_url(target.url)}"
    out = Registered()
    if not any(used.values()):
        out.notes.append(f"no selected record names a schema id (no typed side in their manifests): nothing "
                         f"to register in the {where}; the records are restored as archived")
        say(out.notes[-1])
        return out
    session = _Session(target, where)
    if dry_run:
        session.call("list its subjects", lambda c: c.get_subjects())
    for side, ids in used.items():
        subject = schema_ids.subject(target_topic, side)
        mapped = out.ids.setdefault(side, {})
        for sid, kind in ids.items():
            try:
                schema = archived.get(sid, kind)
            except UnknownSchema as e:
                reason = "its schema is not archived" if str(e) == f"unknown schema id {sid}" else str(e)
                out.unarchived.setdefault(side, {})[sid] = reason
                continue
            except SchemaError as e:
                raise RestoreRefused(f"{e}; nothing was registered in the {where} or produced") from None
            if dry_run:
                mapped[sid] = sid  # shown only: a dry run rewrites nothing
                continue
            mapped[sid] = session.register(subject, schema)
    for side, ids in out.unarchived.items():
        listed = ", ".join(f"{i} ({why})" for i, why in sorted(ids.items()))
        out.notes.append(f"{side} schema id(s) {listed}: not registered in the {where}; records naming them "
                         f"are restored with their ids unchanged")
        say(out.notes[-1])
    subjects = ", ".join(schema_ids.subject(target_topic, side) for side, m in out.ids.items() if m)
    if dry_run:
        say(f"dry run: would register the archived schemas {schema_ids.show(out.ids)} in the {where} "
            f"under {subjects or 'no subject'}, and rewrite the records' schema ids to the ids it gives")
        return Registered({}, out.unarchived, out.notes)
    say(f"archived schemas registered in the {where} under {subjects or 'no subject'}; the records' schema "
        f"ids are rewritten (archived -> target) {schema_ids.show(out.ids)}")
    return out


class _Session:
    """One restore's calls to the target registry, each failure a one-line RestoreRefused."""

    def __init__(self, target: RegistrySource, where: str):
        self.target = target
        self.where = where
        self.versions: dict[tuple[str, int | None], int] = {}  # (subject, archived id) -> target version

    def register(self, subject: str, schema: Schema, with_version: bool = False) -> int:
        """The target's id of `schema` registered under `subject`, its references first."""
        from confluent_kafka.schema_registry import Schema as RegistrySchema
        from confluent_kafka.schema_registry import SchemaReference

        refs = []
        for ref in schema.references:
            ref_subject = ref.subject or ref.name
            key = (ref_subject, ref.schema.id)
            if key not in self.versions:
                self.register(ref_subject, ref.schema, with_version=True)
            refs.append(SchemaReference(ref.name, ref_subject, self.versions[key]))
        given = RegistrySchema(schema.text, schema.schema_type, refs)
        what = f"register archived schema {schema.id} under subject {subject}"
        new_id = self.call(what, lambda c: c.register_schema(subject, given))
        if with_version:
            found = self.call(f"look up schema {schema.id} under subject {subject}",
                              lambda c: c.lookup_schema(subject, given))
            self.versions[(subject, schema.id)] = found.version
        return new_id

    def call(self, what: str, call: Callable[[Any], Any]) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:  # the HTTP client confluent-kafka uses: httpx2 where installed, else httpx
            from confluent_kafka.schema_registry.common._httpx_compat import httpx
        except ImportError:
            import httpx
        nothing = "nothing was produced"
        try:
            return call(self.target.client())
        except SchemaRegistryError as e:
            status, code = e.http_status_code, e.error_code
            said = f"{e.error_message} (HTTP {status}, error code {code})"
            if status in (401, 403):
                fix = (f"give its credentials in {CREDENTIALS[0]} and {CREDENTIALS[1]}"
                       if self.target.username is None else f"check {CREDENTIALS[0]} and {CREDENTIALS[1]}")
            elif status == 409:
                fix = ("its compatibility rules refuse the schema under that subject: restore into a new topic, "
                       "or lower the subject's compatibility level (PUT /config/<subject>) for the restore")
            elif status == 422:
                fix = "it does not take the archived schema as it is (an invalid schema or reference)"
            else:
                fix = "check the registry and run the restore again"
            raise RestoreRefused(f"the {self.where} refused to {what}: {_one_line(said)}; {nothing}: "
                                 f"{fix}") from None
        except (httpx.HTTPError, OSError) as e:
            raise RestoreRefused(f"the {self.where} could not be reached to {what} ({_one_line(str(e))}); "
                                 f"{nothing}: check target_schema_registry_url, that the registry runs, "
                                 f"and MATOS_TARGET_SCHEMA_REGISTRY_CA_FILE for https") from None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
