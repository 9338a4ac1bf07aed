"""Restore: archived records produced back into Kafka, byte-exact, exactly once per object."""
