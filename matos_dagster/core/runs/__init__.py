"""When runs happen: the lag sensor's decisions, whose turn it is in a partition, the offset order of
pending ranges, heartbeats of live runs, and what Dagster may forget (retention)."""
