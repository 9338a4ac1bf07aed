"""Records as Arrow: the archive's schema, batches built from Kafka records, objects written and read."""
