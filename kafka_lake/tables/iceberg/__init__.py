"""Apache Iceberg as a table format: the catalog holding the tables, the schema folded from a topic's versions,
landed hours committed as snapshots, and the table's upkeep.
"""
