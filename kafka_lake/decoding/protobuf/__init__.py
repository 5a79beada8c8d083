"""Protobuf values: `.proto` files compiled at load and translated to Avro schemas of the same shape, messages in
Confluent's framing with message indexes, read record by record and as columns by the protobuf runtime.
"""
