"""How a topic's table is kept: the table-format seam (the Hive layout, Apache Iceberg) and the table catalogs
(Glue, the Hive metastore) tables are registered in.
"""
