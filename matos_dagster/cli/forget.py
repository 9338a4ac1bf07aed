"""`matos forget`: erase the records of given Kafka keys from the archive of topics.

The keys are read here and hashed (HMAC-SHA256 with MATOS_ERASURE_KEY); the request, holding the
keyed hashes only, goes to Swift, and the `forget` job is run with its id: the keys reach no run
config, tag, event or log line. Everything is checked before the request is written: a key in a
malformed encoding, an empty keys file, an unknown topic, an unset erasure key are refused in one
line, and nothing changes. A key given as its decoded value (`--key-value`, a topic whose keys are
registry-encoded) becomes every raw form it has (core/erase/registry_keys.py).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from matos_dagster.cli.common import Refused, output_metadata, run_job

DESCRIPTION = (
    "Erase every archived record whose Kafka key is one of the keys from every object of the topics' archive "
    "(Parquet and JSON Lines, raw and typed, compacted or not, superseded folders and strays too). The keys "
    "are recorded as keyed hashes (MATOS_ERASURE_KEY), never as they are; from now on, every writer of the "
    "archive leaves the records of those keys out up to each partition's log end offset of now. Records of "
    "the keys that Kafka still holds stay there until its own retention. docs/operations/forgetting.md says "
    "what this guarantees and what it cannot."
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--topic", action="append", required=True, metavar="TOPIC",
                   help="a topic of the topics file, or a regular expression over Kafka's topics (whole name); "
                   "repeat for more")
    c.add_argument("--key", action="append", default=[], metavar="KEY",
                   help="a record key: its text, hex:<hex digits> or base64:<base64>; repeat for more")
    c.add_argument("--keys-file", metavar="FILE", help="a file of keys, one a line (text, hex:... or base64:...)")
    c.add_argument("--key-value", action="append", default=[], metavar="JSON",
                   help="a key of a topic whose keys are registry-encoded (key_format avro, protobuf or "
                   "json_schema), as its decoded value in JSON (42, '\"c-42\"', '{\"id\": 42}'): matched in "
                   "every form the versions of the subject <topic>-key give it; repeat for more")
    c.add_argument("--reason", help="why (a ticket, the request's reference); recorded in the archive (required "
                   "unless --index)")
    c.add_argument("--index", action="store_true",
                   help="erase nothing: give the topics' objects archived without a key index (before "
                   "MATOS_ERASURE_KEY was set, or with another key) one, so that erasures skip the objects that "
                   "cannot hold the keys; reads each such object once and rewrites only manifests")


def gather_keys(given: list[str], keys_file: str | None, values: list[str] = ()) -> list[bytes]:
    from matos_dagster.core.erase import keys

    try:
        out = [keys.parse_key(k) for k in given]
        if keys_file:
            path = Path(keys_file)
            if not path.is_file():
                raise Refused(f"--keys-file {keys_file}: no such file")
            out += keys.parse_keys_file(path.read_text(), keys_file)
    except keys.BadKey as e:
        raise Refused(str(e)) from None
    if not out and not values:
        raise Refused("give the keys to erase: --key KEY (repeat it), --keys-file FILE or --key-value JSON")
    return out


def decoded_keys(values: list[str], topics: list, registry) -> list[bytes]:
    """The raw forms of the keys given as decoded values (core/erase/registry_keys.py), in each topic."""
    from matos_dagster.core.erase import keys, registry_keys

    try:
        return [raw for v in values for t in topics for raw in registry_keys.encodings(v, t, registry)]
    except keys.BadKey as e:
        raise Refused(str(e)) from None


def chosen_topics(asked: list[str], topic_set, existing: list[str]) -> list[str]:
    """The topics of the topics file that the names or patterns `asked` match in Kafka; Refused if one matches none."""
    out: list[str] = []
    for a in asked:
        try:
            pattern = re.compile(a)
        except re.error:
            pattern = None
        found = [t for t in existing if (t == a or (pattern is not None and pattern.fullmatch(t)))
                 and topic_set.get(t) is not None]
        if not found:
            raise Refused(f"--topic {a}: no topic of the topics file that Kafka has matches it")
        out += [t for t in found if t not in out]
    return out


def run(args: argparse.Namespace) -> int:
    from matos_dagster.cli import archive
    from matos_dagster.core import settings
    from matos_dagster.core.erase import keys, request, versions
    from matos_dagster.core.kafka import many

    if args.index:
        return run_index(args)
    raw = gather_keys(args.key, args.keys_file, args.key_value)
    if not (args.reason or "").strip():
        raise Refused(f"--reason is {'empty' if args.reason is not None else 'missing'}: say why (a ticket, "
                      "the request's reference)")
    try:
        secret = keys.erasure_key(settings.get(keys.SETTING))
    except keys.BadKey as e:
        raise Refused(str(e)) from None
    chosen = archive.current()
    kafka = chosen.resource("kafka").process_config_and_initialize()
    existing = many.topics(kafka)
    topics = chosen_topics(args.topic, chosen.topic_set, sorted(existing))
    if args.key_value:
        from matos_dagster.core.schemas.typed import registry_from_settings

        raw += decoded_keys(args.key_value, [chosen.topic_set.get(t) for t in topics], registry_from_settings())
    ends = {t: {p: high for p, (_, high) in kafka.watermarks(t, existing[t]).items()} for t in topics}
    req = request.make(secret, raw, args.reason.strip(), ends)
    swift = chosen.resource("swift").process_config_and_initialize()
    with swift.store() as store:
        kept = versions.refusal(store)  # the job would refuse it: no request is written
        if kept is not None:
            raise Refused(kept)
        name = request.write(store, store.params.prefix, req)
    print(f"forget: request {req.id} written to {name} ({len(req.hashes)} key(s), topics {', '.join(topics)})")
    output, result = run_job("forget", "forget_keys", {"request": req.id})
    print(f"forget: done (run {result.run_id}): {output} record(s) erased")
    for k, v in output_metadata(result, "forget_keys").items():
        print(f"  {k}: {v}")
    return 0


def run_index(args: argparse.Namespace) -> int:
    """`--index`: the forget job given the topics to index (core/erase/index_build.py)."""
    from matos_dagster.cli import archive
    from matos_dagster.core import settings
    from matos_dagster.core.erase import keys
    from matos_dagster.core.kafka import many

    if args.key or args.keys_file or args.key_value:
        raise Refused("--index erases nothing: give it --topic only, without --key, --keys-file or --key-value")
    try:
        keys.erasure_key(settings.get(keys.SETTING))
    except keys.BadKey as e:
        raise Refused(str(e)) from None
    chosen = archive.current()
    kafka = chosen.resource("kafka").process_config_and_initialize()
    topics = chosen_topics(args.topic, chosen.topic_set, sorted(many.topics(kafka)))
    output, result = run_job("forget", "forget_keys", {"index_topics": topics})
    print(f"forget --index: done (run {result.run_id}): {output} object(s) given a key index")
    for k, v in output_metadata(result, "forget_keys").items():
        print(f"  {k}: {v}")
    return 0
