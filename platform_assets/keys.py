"""Asset keys of SPEC (`raw/<database>/<table>`, `dead_letters/…`, `compacted/…`, `catalog/…`, `retention/…`),
and what every asset of a topic shows of itself: its layer, its owner, its catalog file."""

from dagster import AssetKey

from kafka_lake.table_spec import TableSpec

# Every node of a topic's lineage reads the table's name; the layer, shown as a kind beside the node,
# tells them apart. Dead letters hold raw values, PII in clear: they belong to the topic's owner.
LAYERS = ("raw", "dead_letters", "compacted", "catalog", "retention", "current")


def asset_key(layer: str, topic: TableSpec) -> AssetKey:
    return AssetKey([layer, topic.database, topic.table])


def raw_key(topic: TableSpec) -> AssetKey:
    return asset_key("raw", topic)


def dead_letters_key(topic: TableSpec) -> AssetKey:
    return asset_key("dead_letters", topic)


def owners(topic: TableSpec) -> list[str]:
    return [f"team:{topic.owner}"] if topic.owner else []


def layer_attributes(layer: str, topic: TableSpec, *technologies: str) -> dict:
    """The attributes every asset of a topic carries: group, owner, the layer as a tag and as a kind."""
    return {
        "group_name": topic.database,
        "owners": owners(topic),
        "tags": {"layer": layer},
        "kinds": {layer, *technologies},
    }
