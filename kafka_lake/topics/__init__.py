"""The topic catalog: `schema_catalog/<database>/<table>/topic.yaml` loaded and validated into the tables it
declares, and the archive rule that adds raw tables for new topics.
"""
