"""Decoding a batch of Kafka records into rows placed by hour, dead letters and tombstones: one entry point, a
sub-wing per payload format, routing, keys, pseudonyms and placement.
"""
