"""The domain core of the Kafka-to-lake platform: plain Python, no Dagster and no Spark."""
