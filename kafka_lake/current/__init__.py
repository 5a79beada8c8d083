"""Current-state tables of change topics: beside a topic's raw table of every change, an Iceberg table of the newest
row per key, kept by applying each landed Kafka hour's changes to the files that hold their keys.
"""
