"""Lake storage: a local `LAKE_ROOT` or `s3://bucket/prefix`, through the domain's file-system layer."""

from dagster import ConfigurableResource

from kafka_lake.lake.storage import LakeStorage


class LakeStorageResource(ConfigurableResource):
    root: str

    def storage(self) -> LakeStorage:
        return LakeStorage(self.root)
