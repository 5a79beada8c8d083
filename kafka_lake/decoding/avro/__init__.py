"""Avro values: record by record with fastavro, and as columns from container blocks spliced from a batch's
payloads, read by a native reader and checked against fastavro's values.
"""
