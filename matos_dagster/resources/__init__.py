from matos_dagster.resources.kafka import KafkaResource
from matos_dagster.resources.spark import SparkResource
from matos_dagster.resources.swift import SwiftResource

__all__ = ["KafkaResource", "SparkResource", "SwiftResource"]
