"""Verify a topic's archive: every entry in Swift, every object it lists, and Kafka.

    matos verify demo                      # from the audit marks on
    matos verify demo --audit-all          # everything, from the first entry
    matos verify demo --from-offset 5000   # from offset 5000 on
    matos verify demo --sample 20          # and 20 records a range vs Kafka
    matos verify demo --sample -1          # and every record vs Kafka

What docs/design.md promises, checked from the outside, per partition of the topic:

- the entries (archived ranges and acknowledged losses) are contiguous from the first one up
  to the committed offset: no hole between two entries (`gap`), no committed offset in no
  entry (`uncovered`), no offset in two entries (`overlap`);
- every object a manifest lists is in Swift with its size and md5, decodes to the manifest's
  records, and holds offsets inside its range (objects.py);
- optionally, archived records equal Kafka's, field by field, while Kafka still has them
  (`differs`); a comparison that could not be made is a problem too (`uncompared`).

Offsets below the log start offset that no entry holds are gone from Kafka for good: they
are reported apart, as `loss`, and make the report not ok until an operator records them
in the archive (the `acknowledge_loss` job). Recorded losses are listed as acknowledged
loss and leave the report ok.

Modules: coverage (pure judgements and the report), objects (Swift), kafka (comparison),
marks (the audit mark), audit (`verify_topic`), __main__ (the command line). No Dagster
imports outside the command line; nothing here imports `definitions`.
"""

from matos_dagster.core.verify.audit import EVERYTHING, FROM_MARK, verify_topic
from matos_dagster.core.verify.coverage import (
    ACKNOWLEDGED,
    BEYOND_END,
    DECODE,
    DIFFERS,
    GAP,
    KINDS,
    LOSS,
    MANIFEST,
    MD5,
    MISSING,
    OFFSETS,
    OVERLAP,
    RECORDS,
    SIZE,
    UNCOMPARED,
    UNCOVERED,
    PartitionSummary,
    Problem,
    Report,
    check_coverage,
    differences,
    loss_issues,
    manifest_issues,
    object_issues,
    sample_positions,
    sound_end,
)
from matos_dagster.core.verify.kafka import KafkaRecords, Unreadable
from matos_dagster.core.verify.marks import mark_name

__all__ = [
    "ACKNOWLEDGED", "BEYOND_END", "DECODE", "DIFFERS", "EVERYTHING", "FROM_MARK", "GAP", "KINDS", "LOSS", "MANIFEST",
    "MD5", "MISSING", "OFFSETS", "OVERLAP", "RECORDS", "SIZE", "UNCOMPARED", "UNCOVERED", "KafkaRecords",
    "PartitionSummary", "Problem", "Report", "Unreadable", "check_coverage", "differences", "loss_issues",
    "manifest_issues", "mark_name", "object_issues", "sample_positions", "sound_end", "verify_topic",
]
