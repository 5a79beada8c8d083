"""Avro schemas and the columns they give: schema questions, Kafka Connect and Debezium logical types, the one
widening rule, and the Avro → Arrow mapping every table format starts from.
"""
