"""The Dagster code location: the topic catalog turned into assets, checks and resources."""
