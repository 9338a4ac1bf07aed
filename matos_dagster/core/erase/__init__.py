"""Forgetting: erase the records of given Kafka keys from a topic's whole archive (docs/operations/forgetting.md).

keys.py (the keys given and their keyed hash), request.py (what `matos forget` asks, in Swift),
ledger.py (what every writer of a topic leaves out from then on), rewrite.py (one partition's
objects rewritten without the records), run.py (a request carried out, then recorded). No Dagster
imports.
"""
