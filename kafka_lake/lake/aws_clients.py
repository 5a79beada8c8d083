"""AWS clients the platform builds one way: region from `AWS_REGION` (like the lake's S3 client), endpoints and
credentials from the standard AWS configuration, and retries that back off instead of failing.
"""

from __future__ import annotations

import os


def glue_client(region: str | None = None):
    """The Glue client; its endpoint and credentials are the standard AWS configuration's (botocore reads
    `AWS_ENDPOINT_URL_GLUE` itself)."""
    import boto3
    from botocore.config import Config

    # Glue throttles bursts of partition calls; adaptive retries back off instead of failing.
    region = region or os.environ.get("AWS_REGION") or None  # botocore reads AWS_DEFAULT_REGION itself
    return boto3.client("glue", region_name=region, config=Config(retries={"mode": "adaptive", "max_attempts": 10}))
