"""The lake as storage: the layout of every path, file access, Parquet output, the documents written into it
(manifests, compaction manifests, audit entries) and the invariants checked from them.
"""
