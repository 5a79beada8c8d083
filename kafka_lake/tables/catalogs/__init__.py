"""Table catalogs: one protocol, the plan of a table change every back end carries out, and a module per back
end (AWS Glue, the Hive metastore).
"""
