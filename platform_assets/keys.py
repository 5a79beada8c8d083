"""Asset keys of SPEC (`raw/<database>/<table>`, `dead_letters/…`, `compacted/…`, `catalog/…`, `retention/…`),
and what every asset of a topic shows of itself: its layer, its owner, its catalog file, and the tags of its runs."""

from dagster import AssetKey

from kafka_lake.table_spec import TableSpec

# Every node of a topic's lineage reads the table's name; the layer, shown as a kind beside the node,
# tells them apart. Dead letters hold raw values, PII in clear: they belong to the topic's owner.
TABLE_LAYERS = ("raw", "dead_letters", "compacted", "catalog", "retention")  # every table's
LAYERS = (*TABLE_LAYERS, "current")  # `current/…`: a change topic's current-state table


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


def name_the_run(context, layer: str, topic: str) -> None:
    """Tags the run with its layer, topic and assets, as the layer's jobs tag theirs: a run launched from an asset's
    page runs Dagster's implicit asset job, which gives none, and the Runs list then shows no name. A run of other
    assets too (the retention job of every topic) keeps the tags its job gave."""
    if "layer" in context.run.tags:
        return  # a run of the layer's jobs (the sensors', the demo's) is tagged already
    selected = context.selected_asset_keys
    if not set(context.run.asset_selection or selected) <= set(context.assets_def.keys):
        return
    assets = sorted(key.to_user_string() for key in selected if key.path[0] == layer) or sorted(
        key.to_user_string() for key in selected)
    tags = {"layer": layer, "topic": topic, "asset": ", ".join(assets)}
    missing = {name: value for name, value in tags.items() if context.run.tags.get(name) != value}
    if missing:
        context.instance.add_run_tags(context.run.run_id, missing)
