"""Compaction: small archived ranges merged into larger ones, switched by one manifest, cleaned after."""
