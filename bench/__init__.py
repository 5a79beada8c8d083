"""Throughput and memory benchmarks of raw landing against the machine's own ceiling (`make bench`)."""
