"""Expiry by age: remove a topic's archived records stamped before now minus `archive_retention_days`.

span.py (one range: wholly expired into an `_expired.json` span, or rewritten without its old
records), cursor.py (how far expiry looked, so a run reads what is new or due, not the whole
history), run.py (a topic's partitions, each in its turn, then the run's record). No Dagster imports.
"""
