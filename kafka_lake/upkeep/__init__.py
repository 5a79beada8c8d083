"""Keeping a table after landing: compaction of placement hours, expiry after `retention_days`, erasure of
requested subjects, and the daily retention run that audits them.
"""
