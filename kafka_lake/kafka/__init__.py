"""The Kafka side: the log of a topic (bounds, verified time boundaries, offset ranges), its records and their
Confluent framing, schema ids resolved, and the cluster as the sensors see it.
"""
