"""Where table catalogs live: each back end of `kafka_lake.table_catalog.TableCatalog` in a file of its own.

`glue.py` (AWS Glue through boto3) and `hive.py` (a Hive metastore through a Spark session with Hive support). Both
carry out the one plan of a table change of `kafka_lake.table_catalog`; reconciliation with storage is
`kafka_lake.catalog_reconciliation`. Iceberg tables have their catalogs through pyiceberg (`kafka_lake.iceberg_catalog`).
"""
