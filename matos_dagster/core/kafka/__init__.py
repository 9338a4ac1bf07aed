"""Kafka: the one client the core knows (client.py), its errors said in one line, leaders, librdkafka's log."""
