"""`make check-catalog`: every entry of the topic catalog loads, or the command names each broken one.
For CI before a deploy: exits 1 when any entry is broken (each reported as `file: problem`), 0 otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys

from kafka_lake.settings import PlatformSettings
from kafka_lake.topics.loader import CatalogError, load_catalog


def main(argv: list[str] | None = None) -> int:
    """Loads the catalog as the code location does, which takes the good entries and shows the broken ones as
    rejected; here each broken one is reported and fails the command."""
    parser = argparse.ArgumentParser(prog="python -m deploy.check_catalog", description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", default=os.environ.get("SCHEMA_CATALOG_DIR") or "schema_catalog",
                        help="the topic catalog (default: $SCHEMA_CATALOG_DIR, else schema_catalog)")
    args = parser.parse_args(argv)
    try:
        # Checked as the deployment loads it: an Iceberg topic's schema must be one Iceberg can hold.
        catalog = load_catalog(args.directory, tolerant=True, table_format=PlatformSettings.from_env().table_format)
    except CatalogError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for entry in catalog.broken:
        print(f"error: {entry.error}", file=sys.stderr)
    print(f"{args.directory}: {len(catalog.topics)} topic(s) load, {len(catalog.broken)} broken")
    return 1 if catalog.broken else 0


if __name__ == "__main__":
    sys.exit(main())
