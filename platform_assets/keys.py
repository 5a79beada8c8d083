"""Asset keys of SPEC: `raw/<database>/<table>`, `dead_letters/…`, `compacted/…`, `catalog/…`, `retention/…`."""

from dagster import AssetKey

from kafka_lake.catalog import TopicSpec


def asset_key(layer: str, topic: TopicSpec) -> AssetKey:
    return AssetKey([layer, topic.database, topic.table])


def raw_key(topic: TopicSpec) -> AssetKey:
    return asset_key("raw", topic)


def dead_letters_key(topic: TopicSpec) -> AssetKey:
    return asset_key("dead_letters", topic)
