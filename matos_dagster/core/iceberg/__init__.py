"""The archive as an Apache Iceberg table: planning its steps, keeping it, querying it."""
