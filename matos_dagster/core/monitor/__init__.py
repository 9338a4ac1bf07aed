"""The monitor: lag, gaps and losses per partition, and its mark in the archive (bounded listings)."""
