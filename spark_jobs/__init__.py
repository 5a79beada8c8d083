"""Spark jobs: thin shells that run the domain core's work as Spark tasks."""
