"""Landing a Kafka hour: the slice plan, the Spark task that lands one slice, and the driver that plans, runs,
commits and cleans.
"""
