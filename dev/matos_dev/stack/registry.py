"""The project's own Schema Registry STAND-IN: a small Confluent-compatible REST server.

Not Confluent's Schema Registry (nor Karapace, nor Apicurio: none of them can be installed
here), but the project's stand-in for one, for the local stack and the tests. It serves
the Confluent REST API exactly as far as confluent-kafka-python's `SchemaRegistryClient`
and its Avro, Protobuf and JSON Schema serializers and deserializers use it in their
default configuration (auto-registration, topic subject names), with Confluent's JSON
shapes and error bodies (`{"error_code": 40401, "message": ...}`):

    GET    /                                          {}
    GET    /schemas/types                             ["JSON", "PROTOBUF", "AVRO"]
    GET    /schemas/ids/{id}                          the schema (`subject`, `format` tolerated)
    GET    /schemas/ids/{id}/versions                 [{"subject", "version"}]
    GET    /schemas/ids/{id}/subjects                 [subject]
    GET    /schemas/guids/{guid}                      the schema
    GET    /subjects                                  [subject] (`subjectPrefix`, `deleted`)
    POST   /subjects/{subject}                        is this schema registered here? (lookup)
    DELETE /subjects/{subject}                        soft delete; `?permanent=true`: gone
    GET    /subjects/{subject}/versions               [version]
    POST   /subjects/{subject}/versions               register: {"id", "version", ...}
    GET    /subjects/{subject}/versions/{v|latest}    {"subject", "version", "id", "schema", ...}
    DELETE /subjects/{subject}/versions/{v|latest}    soft delete; `?permanent=true`: gone
    GET    /subjects/{subject}/versions/{v}/referencedby   [id of the schemas that reference it]
    GET|PUT|DELETE /config, /config/{subject}         the compatibility level, stored only
    GET    /mode, /mode/{subject}                     always {"mode": "READWRITE"}

What it does as Confluent's does:

- Schema ids are global: the same schema (same type, same references, and for AVRO and
  JSON the same JSON once parsed: whitespace and key order do not count; for PROTOBUF the
  same string) has one id under every subject; registering it again under a subject that
  has it returns the existing id and version; a new schema gets the next id and, under
  the subject, the next version. Ids are never handed out twice, even after a deletion.
- Deleting is soft first: a soft-deleted version is still served by id (so records written
  with it still decode) and with `deleted=true`; `permanent=true` then removes it (40405 /
  40407 if it was not soft-deleted first), and a schema no version uses any more is gone:
  `GET /schemas/ids/{id}` answers 404 with error code 40403, as for a deleted schema.
- schemaType AVRO (the default), PROTOBUF or JSON; `references` are checked to exist and
  stored; `metadata` and `ruleSet` are stored and returned.
- HTTP basic auth if started with a user and password: 401 {"error_code": 401} otherwise.

What it does not do (it is a stand-in): it checks NO compatibility (the level set with
`PUT /config` is stored and returned, nothing more; the `/compatibility` endpoints are not
served); it does not validate schemas beyond parsing AVRO and JSON schemas as JSON; it
returns a schema as it was first registered and converts no format (a Protobuf schema
registered by confluent-kafka's serializer is a base64 FileDescriptorProto, which is what
its deserializer asks for with `format=serialized`); `normalize` is ignored; no contexts,
no modes other than READWRITE, no associations, no KEKs/DEKs, no leader election.

Its state is one JSON file in its data folder, rewritten atomically after every change,
so a restart keeps the ids. It listens on 127.0.0.1 only and uses the standard library
only (http.server), so it runs with any Python 3.11:

    python -m matos_dev.stack.registry --port 8081 --data DIR [--user U --password P]

`RegistryServer` starts it as its own process (own session, PID file, log file, stopped
by PID), as the local stack's other servers are started (see process.py).
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import os
import signal
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from matos_dev.stack import process

NAME = "Schema Registry stand-in"
HOST = "127.0.0.1"
DEFAULT_PORT = 8081
STATE_FILE = "registry-state.json"
# The password reaches the server through its environment, not its command line (which
# every local user can read in `ps`), when `--user` is given without `--password`.
PASSWORD_VARIABLE = "REGISTRY_STAND_IN_PASSWORD"
_SETTINGS_FILE = "devstack-registry.json"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
_MAX_BODY = 16 * 1024 * 1024
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
COMPATIBILITY_LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                        "FULL", "FULL_TRANSITIVE")
_CONFIG_KEYS = ("compatibilityLevel", "normalize", "validateFields", "alias", "compatibilityGroup",
                "defaultMetadata", "overrideMetadata", "defaultRuleSet", "overrideRuleSet")


class RegistryError(Exception):
    """An answer other than 2xx, in Confluent's form: HTTP status, error_code, message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def _version_not_found(subject: str, version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found for subject '{subject}'.")


def _schema_not_found(what: object = None) -> RegistryError:
    return RegistryError(404, 40403, f"Schema {what} not found" if what is not None else "Schema not found")


def _flag(query: dict[str, list[str]], *names: str) -> bool:
    return any(query.get(n, [""])[-1].strip().lower() == "true" for n in names)


# --------------------------------------------------------------------------- the registry


class Registry:
    """The stand-in's state and operations; every method is one REST call (thread-safe).

    State (also the JSON file's content):
      next_id   the next schema id (never reused)
      schemas   id -> {"schemaType", "schema", "references", "guid"[, "metadata", "ruleSet"]}
      subjects  subject -> [{"version", "id", "deleted"}], in version order
      config    "" (global) or subject -> {"compatibilityLevel", ...}
    """

    def __init__(self, state_file: Path | None = None) -> None:
        self.state_file = state_file
        self._lock = threading.Lock()
        self.next_id = 1
        self.schemas: dict[int, dict] = {}
        self.subjects: dict[str, list[dict]] = {}
        self.config: dict[str, dict] = {"": {"compatibilityLevel": "BACKWARD"}}
        if state_file is not None and state_file.exists():
            state = json.loads(state_file.read_text())
            self.next_id = state["next_id"]
            self.schemas = {int(k): v for k, v in state["schemas"].items()}
            self.subjects = state["subjects"]
            self.config = state["config"]

    def _save(self) -> None:
        if self.state_file is None:
            return
        state = {"next_id": self.next_id, "schemas": {str(k): v for k, v in self.schemas.items()},
                 "subjects": self.subjects, "config": self.config}
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
        tmp.replace(self.state_file)  # a reader (or a restart after SIGKILL) sees old or new, never half

    # -- schemas ------------------------------------------------------------------------

    def _schema_body(self, schema_id: int) -> dict:
        """The schema as Confluent returns it: schemaType only if not AVRO, references only if any."""
        entry = self.schemas[schema_id]
        body: dict = {"schema": entry["schema"]}
        if entry["schemaType"] != "AVRO":
            body["schemaType"] = entry["schemaType"]
        if entry["references"]:
            body["references"] = entry["references"]
        for key in ("metadata", "ruleSet"):
            if entry.get(key) is not None:
                body[key] = entry[key]
        return body

    def _by_id(self, schema_id: str | int) -> int:
        try:
            found = int(schema_id)
        except ValueError:
            raise _schema_not_found(schema_id) from None
        if found not in self.schemas:
            raise _schema_not_found(found)
        return found

    def get_schema(self, schema_id: str) -> dict:
        with self._lock:
            found = self._by_id(schema_id)
            return {**self._schema_body(found), "id": found, "guid": self.schemas[found]["guid"]}

    def get_schema_by_guid(self, guid: str) -> dict:
        with self._lock:
            for schema_id, entry in self.schemas.items():
                if entry["guid"] == guid:
                    return {**self._schema_body(schema_id), "id": schema_id, "guid": guid}
            raise _schema_not_found(guid)

    def schema_versions(self, schema_id: str, subject: str | None, deleted: bool) -> list[dict]:
        with self._lock:
            found = self._by_id(schema_id)
            return [{"subject": s, "version": v["version"]} for s, versions in self.subjects.items()
                    for v in versions if v["id"] == found and (deleted or not v["deleted"])
                    and (subject is None or s == subject)]

    def schema_subjects(self, schema_id: str, subject: str | None, deleted: bool) -> list[str]:
        return sorted({v["subject"] for v in self.schema_versions(schema_id, subject, deleted)})

    # -- subjects -----------------------------------------------------------------------

    def list_subjects(self, prefix: str, deleted: bool, deleted_only: bool) -> list[str]:
        with self._lock:
            out = []
            for subject, versions in self.subjects.items():
                if not subject.startswith(prefix):
                    continue
                live = any(not v["deleted"] for v in versions)
                gone = any(v["deleted"] for v in versions)
                if (deleted_only and gone) or (not deleted_only and (live or (deleted and gone))):
                    out.append(subject)
            return sorted(out)

    def _versions(self, subject: str, deleted: bool) -> list[dict]:
        """The subject's versions (soft-deleted ones too if `deleted`); 40401 if none."""
        versions = [v for v in self.subjects.get(subject, []) if deleted or not v["deleted"]]
        if not versions:
            raise _subject_not_found(subject)
        return versions

    def list_versions(self, subject: str, deleted: bool, deleted_only: bool) -> list[int]:
        with self._lock:
            versions = self._versions(subject, deleted or deleted_only)
            return [v["version"] for v in versions if not deleted_only or v["deleted"]]

    def _version(self, subject: str, version: str, deleted: bool) -> dict:
        """One version: an int or `latest` (also -1); 42202 if neither, 40401 / 40402 if not there."""
        versions = self._versions(subject, deleted)
        if version in ("latest", "-1"):
            return versions[-1]
        try:
            number = int(version)
        except ValueError:
            number = 0
        if not 0 < number < 2**31:
            raise RegistryError(422, 42202, f"The specified version '{version}' is not a valid version id. "
                                            "Allowed values are between [1, 2^31-1] and the string \"latest\"")
        for v in versions:
            if v["version"] == number:
                return v
        raise _version_not_found(subject, number)

    def _version_body(self, subject: str, v: dict) -> dict:
        guid = self.schemas[v["id"]]["guid"]
        return {"subject": subject, "version": v["version"], "id": v["id"], "guid": guid,
                **self._schema_body(v["id"])}

    def get_version(self, subject: str, version: str, deleted: bool) -> dict:
        with self._lock:
            return self._version_body(subject, self._version(subject, version, deleted))

    def referenced_by(self, subject: str, version: str) -> list[int]:
        with self._lock:
            number = self._version(subject, version, deleted=True)["version"]
            return sorted(i for i, e in self.schemas.items()
                          if any(r["subject"] == subject and r["version"] == number for r in e["references"]))

    # -- register and look up ------------------------------------------------------------

    def _parse(self, body: object) -> dict:
        """The schema of a register or lookup request, checked: {"schemaType", "schema", "references", ...}."""
        if not isinstance(body, dict) or not isinstance(body.get("schema"), str) or not body["schema"].strip():
            raise RegistryError(422, 42201, "Invalid schema: the request has no \"schema\" string")
        schema_type = body.get("schemaType") or "AVRO"
        if schema_type not in SCHEMA_TYPES:
            raise RegistryError(422, 42201, f"Invalid schema: unknown schemaType {schema_type!r}; "
                                            f"the stand-in knows {', '.join(SCHEMA_TYPES)}")
        if schema_type in ("AVRO", "JSON"):
            try:
                json.loads(body["schema"])
            except ValueError as e:
                raise RegistryError(422, 42201, f"Invalid schema: a {schema_type} schema is JSON: {e}") from None
        references = []
        for ref in body.get("references") or []:
            if not (isinstance(ref, dict) and isinstance(ref.get("name"), str) and isinstance(ref.get("subject"), str)
                    and isinstance(ref.get("version"), int)):
                raise RegistryError(422, 42201, f"Invalid schema: a reference needs name, subject and version: {ref!r}")
            try:
                target = self._version(ref["subject"], str(ref["version"]), deleted=True)
            except RegistryError:
                raise RegistryError(422, 42201, f"Invalid schema: reference {ref['name']!r} names subject "
                                                f"{ref['subject']!r} version {ref['version']}, which is not "
                                                "registered") from None
            references.append({"name": ref["name"], "subject": ref["subject"], "version": target["version"]})
        parsed = {"schemaType": schema_type, "schema": body["schema"], "references": references}
        for key in ("metadata", "ruleSet"):
            if body.get(key) is not None:
                parsed[key] = body[key]
        return parsed

    @staticmethod
    def _identity(parsed: dict) -> str:
        """What makes two schemas the same one (see the module's docstring)."""
        text = parsed["schema"]
        if parsed["schemaType"] in ("AVRO", "JSON"):
            text = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        return json.dumps([parsed["schemaType"], text, parsed["references"], parsed.get("metadata"),
                           parsed.get("ruleSet")], sort_keys=True)

    def _find(self, identity: str) -> int | None:
        for schema_id, entry in self.schemas.items():
            if self._identity(entry) == identity:
                return schema_id
        return None

    def register(self, subject: str, body: object) -> dict:
        with self._lock:
            parsed = self._parse(body)
            identity = self._identity(parsed)
            schema_id = self._find(identity)
            versions = self.subjects.setdefault(subject, [])
            for v in reversed(versions):
                if v["id"] == schema_id and not v["deleted"]:
                    return self._version_body(subject, v)  # already there: same id, same version
            if schema_id is None:
                schema_id = self.next_id
                self.next_id += 1
                self.schemas[schema_id] = {**parsed, "guid": str(uuid.uuid4())}
            entry = {"version": (versions[-1]["version"] + 1) if versions else 1, "id": schema_id, "deleted": False}
            versions.append(entry)
            self._save()
            return self._version_body(subject, entry)

    def lookup(self, subject: str, body: object, deleted: bool) -> dict:
        with self._lock:
            versions = self._versions(subject, deleted)
            identity = self._identity(self._parse(body))
            for v in reversed(versions):
                if self._identity(self.schemas[v["id"]]) == identity:
                    return self._version_body(subject, v)
            raise _schema_not_found()

    # -- delete ---------------------------------------------------------------------------

    def _referenced(self, subject: str, number: int) -> bool:
        return any(r["subject"] == subject and r["version"] == number
                   for e in self.schemas.values() for r in e["references"])

    def _drop_unused_schemas(self) -> None:
        used = {v["id"] for versions in self.subjects.values() for v in versions}
        for schema_id in [i for i in self.schemas if i not in used]:
            del self.schemas[schema_id]

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        with self._lock:
            versions = self._versions(subject, deleted=True)
            if any(self._referenced(subject, v["version"]) for v in versions):
                raise RegistryError(422, 42206, f"One or more references exist to the schema of subject '{subject}'")
            if permanent:
                if any(not v["deleted"] for v in versions):
                    raise RegistryError(404, 40405, f"Subject '{subject}' was not deleted first before being "
                                                    "permanently deleted")
                del self.subjects[subject]
                self.config.pop(subject, None)
                self._drop_unused_schemas()
                self._save()
                return [v["version"] for v in versions]
            live = [v for v in versions if not v["deleted"]]
            if not live:
                raise RegistryError(404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to "
                                                "delete permanently")
            for v in live:
                v["deleted"] = True
            self._save()
            return [v["version"] for v in live]

    def delete_version(self, subject: str, version: str, permanent: bool) -> int:
        with self._lock:
            v = self._version(subject, version, deleted=True)
            if version in ("latest", "-1") and not permanent:
                v = self._version(subject, version, deleted=False)
            number = v["version"]
            if self._referenced(subject, number):
                raise RegistryError(422, 42206, f"One or more references exist to the schema "
                                                f"{{subject={subject},version={number}}}")
            if permanent:
                if not v["deleted"]:
                    raise RegistryError(404, 40407, f"Subject '{subject}' Version {number} was not deleted first "
                                                    "before being permanently deleted")
                self.subjects[subject].remove(v)
                if not self.subjects[subject]:
                    del self.subjects[subject]
                self._drop_unused_schemas()
            else:
                if v["deleted"]:
                    raise RegistryError(404, 40406, f"Subject '{subject}' Version {number} was soft deleted.Set "
                                                    "permanent=true to delete permanently")
                v["deleted"] = True
            self._save()
            return number

    # -- config (stored, never enforced) --------------------------------------------------

    def get_config(self, subject: str | None, default_to_global: bool) -> dict:
        with self._lock:
            if subject is None:
                return dict(self.config[""])
            if subject in self.config:
                return dict(self.config[subject])
            if default_to_global:
                return dict(self.config[""])
            raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility "
                                            "configured")

    def set_config(self, subject: str | None, body: object) -> dict:
        if not isinstance(body, dict):
            raise RegistryError(422, 42203, "Invalid compatibility level: the request is not a JSON object")
        level = body.get("compatibility", body.get("compatibilityLevel"))
        if level is not None and (not isinstance(level, str) or level.upper() not in COMPATIBILITY_LEVELS):
            raise RegistryError(422, 42203, f"Invalid compatibility level {level!r}. Valid values are "
                                            f"{', '.join(COMPATIBILITY_LEVELS)}")
        with self._lock:
            key = "" if subject is None else subject
            config = dict(self.config.get(key, {}))
            config.update({k: v for k, v in body.items() if k in _CONFIG_KEYS and v is not None})
            if level is not None:
                config["compatibilityLevel"] = level.upper()
            config.setdefault("compatibilityLevel", self.config[""]["compatibilityLevel"])
            self.config[key] = config
            self._save()
            answer = {k: v for k, v in config.items() if k != "compatibilityLevel"}
            return {**answer, "compatibility": config["compatibilityLevel"]}

    def delete_config(self, subject: str | None) -> dict:
        with self._lock:
            if subject is None:
                old, self.config[""] = self.config[""], {"compatibilityLevel": "BACKWARD"}
            else:
                if subject not in self.config:
                    raise _subject_not_found(subject)
                old = self.config.pop(subject)
            self._save()
            return old


# --------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's httpx expects; every answer has a length
    server_version = "matos-schema-registry-stand-in"
    server: _Server

    def do_GET(self) -> None:  # http.server's names
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        try:
            raw = self._read_body()  # read whatever the answer: the connection is kept alive
            self._authenticate()
            body = self._parse_json(raw)
            url = urlsplit(self.path)
            segments = [unquote(s) for s in url.path.split("/") if s]  # subjects come %-encoded, '/' too
            query = parse_qs(url.query, keep_blank_values=True)
            self._answer(200, self._route(method, segments, query, body))
        except RegistryError as e:
            self._answer(e.status, {"error_code": e.code, "message": e.message})
        except Exception:  # noqa: BLE001 - a bug of the stand-in: said, logged, and the server goes on
            traceback.print_exc()
            self._answer(500, {"error_code": 50001, "message": "Error in the Schema Registry stand-in (see its log)"})

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise RegistryError(411, 411, "Length Required: send a Content-Length, not a chunked body")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            raise RegistryError(400, 400, "Bad Request: Content-Length is not a length")
        if length > _MAX_BODY:
            self.close_connection = True  # the body is not read: the connection cannot be reused
            raise RegistryError(413, 413, f"Request body over {_MAX_BODY} bytes")
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _parse_json(raw: bytes) -> object:
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise RegistryError(400, 400, f"Unexpected character in the request's JSON: {e}") from None

    def _authenticate(self) -> None:
        expected = self.server.credentials
        if expected is None:
            return
        given = self.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        try:
            decoded = base64.b64decode(token.strip(), validate=True) if scheme.lower() == "basic" else b""
        except ValueError:
            decoded = b""
        if not hmac.compare_digest(decoded, expected):
            raise RegistryError(401, 401, "Unauthorized")

    def _route(self, method: str, seg: list[str], query: dict[str, list[str]], body: object) -> object:
        registry: Registry = self.server.registry
        q1 = {k: v[-1] for k, v in query.items()}
        deleted = _flag(query, "deleted")
        deleted_only = _flag(query, "deleted_only", "deletedOnly")
        permanent = _flag(query, "permanent")
        routes = {
            ("GET", ()): dict,
            ("GET", ("schemas", "types")): lambda: ["JSON", "PROTOBUF", "AVRO"],
            ("GET", ("schemas", "ids", "*")): lambda: registry.get_schema(seg[2]),
            ("GET", ("schemas", "ids", "*", "versions")):
                lambda: registry.schema_versions(seg[2], q1.get("subject"), deleted),
            ("GET", ("schemas", "ids", "*", "subjects")):
                lambda: registry.schema_subjects(seg[2], q1.get("subject"), deleted),
            ("GET", ("schemas", "guids", "*")): lambda: registry.get_schema_by_guid(seg[2]),
            ("GET", ("subjects",)):
                lambda: registry.list_subjects(q1.get("subjectPrefix", ""), deleted, deleted_only),
            ("POST", ("subjects", "*")): lambda: registry.lookup(seg[1], body, deleted),
            ("DELETE", ("subjects", "*")): lambda: registry.delete_subject(seg[1], permanent),
            ("GET", ("subjects", "*", "versions")): lambda: registry.list_versions(seg[1], deleted, deleted_only),
            ("POST", ("subjects", "*", "versions")): lambda: registry.register(seg[1], body),
            ("GET", ("subjects", "*", "versions", "*")): lambda: registry.get_version(seg[1], seg[3], deleted),
            ("DELETE", ("subjects", "*", "versions", "*")):
                lambda: registry.delete_version(seg[1], seg[3], permanent),
            ("GET", ("subjects", "*", "versions", "*", "referencedby")):
                lambda: registry.referenced_by(seg[1], seg[3]),
            ("GET", ("config",)): lambda: registry.get_config(None, True),
            ("PUT", ("config",)): lambda: registry.set_config(None, body),
            ("DELETE", ("config",)): lambda: registry.delete_config(None),
            ("GET", ("config", "*")): lambda: registry.get_config(seg[1], _flag(query, "defaultToGlobal")),
            ("PUT", ("config", "*")): lambda: registry.set_config(seg[1], body),
            ("DELETE", ("config", "*")): lambda: registry.delete_config(seg[1]),
            ("GET", ("mode",)): lambda: {"mode": "READWRITE"},
            ("GET", ("mode", "*")): lambda: {"mode": "READWRITE"},
        }
        shapes = {(m, shape) for m, shape in routes if len(shape) == len(seg)
                  and all(p in ("*", s) for p, s in zip(shape, seg))}
        for m, shape in shapes:
            if m == method:
                return routes[(m, shape)]()
        if shapes:
            raise RegistryError(405, 405, "HTTP 405 Method Not Allowed")
        raise RegistryError(404, 404, "HTTP 404 Not Found")

    def _answer(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", _CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Basic realm="SchemaRegistry"')
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        # Method, path and status: no header, so never a password.
        sys.stderr.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {self.address_string()} {format % args}\n")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, registry: Registry, credentials: bytes | None) -> None:
        self.registry = registry
        self.credentials = credentials  # b"user:password", or None: no auth
        super().__init__((HOST, port), _Handler)


def serve(port: int, data_dir: Path, user: str | None = None, password: str | None = None) -> None:
    """Serve until SIGTERM or SIGINT (the `python -m` entry point)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    registry = Registry(data_dir / STATE_FILE)
    credentials = f"{user}:{password}".encode() if user is not None else None
    server = _Server(port, registry, credentials)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    print(f"{NAME}: listening on http://{HOST}:{server.server_address[1]} (data {data_dir}, "
          f"{len(registry.schemas)} schemas, {len(registry.subjects)} subjects, "
          f"basic auth {'on' if credentials else 'off'})", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        print(f"{NAME}: stopped", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m matos_dev.stack.registry", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True, help="TCP port on 127.0.0.1")
    parser.add_argument("--data", type=Path, required=True, help="data folder (holds the state file)")
    parser.add_argument("--user", help="require HTTP basic auth with this user")
    parser.add_argument("--password", help=f"its password (default: ${PASSWORD_VARIABLE})")
    args = parser.parse_args(argv)
    password = args.password if args.password is not None else os.environ.get(PASSWORD_VARIABLE)
    if (args.user is None) != (password is None):
        parser.error(f"--user and --password (or ${PASSWORD_VARIABLE}) go together")
    serve(args.port, args.data.absolute(), args.user, password)
    return 0


# --------------------------------------------------------------------------- its process


class RegistryServer:
    """The stand-in as a process of its own on 127.0.0.1, owned by a data folder.

    `port` defaults to the one saved in `data_dir` by a previous start, else 8081. With
    `user` and `password` it asks for HTTP basic auth (the password is handed over in the
    environment and never written to the data folder).
    """

    def __init__(self, data_dir: Path, port: int | None = None, user: str | None = None,
                 password: str | None = None) -> None:
        if (user is None) != (password is None):
            raise ValueError("user and password go together")
        self.data_dir = Path(data_dir).absolute()
        self.port = port or self._load_settings().get("port") or DEFAULT_PORT
        self.user, self.password = user, password
        self._log_start = 0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "registry.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "registry.pid"

    @property
    def state_file(self) -> Path:
        return self.data_dir / STATE_FILE

    def client_config(self) -> dict:
        """The configuration of confluent-kafka's SchemaRegistryClient for this server."""
        conf = {"url": self.url}
        if self.user is not None:
            conf["basic.auth.user.info"] = f"{self.user}:{self.password}"
        return conf

    def start(self, timeout: float = 30) -> None:
        """Start the server and return once it answers; a no-op if it already runs."""
        deadline = time.monotonic() + timeout
        if self.running():
            self._wait_ready(deadline)
            return
        if process.port_open(self.port):
            raise RuntimeError(f"127.0.0.1:{self.port} is already in use; cannot start the {NAME} "
                               f"for {self.data_dir}")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / _SETTINGS_FILE).write_text(json.dumps({"port": self.port}, indent=2) + "\n")
        # The child imports this very matos_dev (a worktree's, say), whatever the venv points at.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), *filter(None, [os.environ.get("PYTHONPATH")])]))
        env.pop(PASSWORD_VARIABLE, None)
        argv = [sys.executable, "-m", "matos_dev.stack.registry", "--port", str(self.port),
                "--data", str(self.data_dir)]
        if self.user is not None:
            argv += ["--user", self.user]
            env[PASSWORD_VARIABLE] = self.password
        self._log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
        process.start(argv, self.pid_file, self.log_file, env=env, cwd=self.data_dir)
        try:
            self._wait_ready(deadline)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server by its recorded PID (SIGTERM, SIGKILL after 10 s); no-op if not running."""
        process.stop(self.pid_file, timeout=10)

    def pid(self) -> int | None:
        return process.read_pid(self.pid_file)

    def running(self) -> bool:
        return self.pid() is not None

    def status(self) -> dict:
        pid = self.pid()
        return {"running": pid is not None, "pid": pid, "url": self.url, "auth": self.user is not None,
                "log_file": str(self.log_file), "data_dir": str(self.data_dir)}

    def _load_settings(self) -> dict:
        try:
            return json.loads((self.data_dir / _SETTINGS_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def _answers(self) -> bool:
        request = urllib.request.Request(self.url + "/")
        if self.user is not None:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1: never a proxy
        try:
            with opener.open(request, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _wait_ready(self, deadline: float) -> None:
        while not self._answers():
            if not self.running():
                raise RuntimeError(f"the {NAME} exited during start-up; last lines of {self.log_file}:\n"
                                   f"{self._log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {NAME} did not answer on {self.url}; last lines of {self.log_file}:\n"
                                   f"{self._log_tail()}")
            time.sleep(0.05)

    def _log_tail(self, lines: int = 30) -> str:
        """The last lines this start wrote to the log."""
        return process.log_tail(self.log_file, self._log_start, lines)


if __name__ == "__main__":
    sys.exit(main())
