"""Archiving one range exactly once: the run, its Spark slice tasks (and the native reader), the
commit of the contiguous prefix, and acknowledged losses."""
