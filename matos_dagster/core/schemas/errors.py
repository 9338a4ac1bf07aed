"""The exceptions of schema decoding, apart so every module can raise them without an import cycle.

Two families, handled differently by `decode`: a bad *record* (an unknown schema id, an
unusable schema) becomes a reason in the errors column, while an unreachable *registry* is
not the record's fault and propagates, so the run fails and is retried.
"""

from __future__ import annotations


class SchemaError(ValueError):
    """A schema that cannot be used: unparsable, or not typable in Arrow (a recursive record)."""


class UnknownSchema(LookupError):
    """The source has no schema with this id (never registered, or deleted for good).

    `str()` is the reason a record names in the errors column, e.g. "unknown schema id 7".
    """

    def __init__(self, schema_id: int | None, reason: str | None = None):
        self.schema_id = schema_id
        super().__init__(reason or f"unknown schema id {schema_id}")


class RegistryUnavailable(RuntimeError):
    """The schema registry could not be asked (unreachable, refused credentials, 5xx): the run
    fails and is retried; no record is marked bad for it."""


class UndecodableRecord(ValueError):
    """Raised in strict mode for the first record that does not decode, naming it."""

    def __init__(self, index: int, reason: str, offset: int | None = None):
        self.index = index
        self.offset = offset
        self.reason = reason
        where = f"record {index}" if offset is None else f"record {index} (offset {offset})"
        super().__init__(f"{where} does not decode: {reason}")
