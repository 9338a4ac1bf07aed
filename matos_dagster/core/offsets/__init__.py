"""Offset arithmetic: ranges and their partition keys, half-open spans and how they cover a partition."""
