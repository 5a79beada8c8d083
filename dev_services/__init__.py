"""Real local services for demos and tests: a Tansu Kafka broker, a SeaweedFS S3 server, demo traffic.

Each service starts on loopback ports of its own and is stopped by its process id, never by name.
"""
