"""JSON values read against a table's Avro schemas: record by record with Python's parser, and as columns with
pyarrow's JSON reader checked into exactly the record path's values.
"""
