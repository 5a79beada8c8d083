"""`python -m deploy.add_topic --topic T --database D --table N [--time-field F | --kafka-time]`: the catalog entry
`D/N/` written from the schema registry's subject `T-value` (`SCHEMA_REGISTRY_URL`), or updated by `--update`.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kafka_lake.kafka.schema_resolution import registry_client, value_subject
from kafka_lake.settings import PlatformSettings, url_without_credentials
from kafka_lake.topics.onboarding import (
    OnboardingError,
    new_entry,
    registered_key,
    registered_versions,
    updated_entry,
    write_entry,
)


def main(argv: list[str] | None = None) -> int:
    """Writes `topic.yaml` and one `vK.avsc` per version (`vK.proto` for Protobuf, with the files it imports in their
    folders), with their registry ids, and `key.avsc` (`key.proto`) from the subject `T-key` when it holds a record;
    `--update` adds the versions the entry lacks. What it writes loads, or nothing is written and the error says why."""
    parser = argparse.ArgumentParser(prog="python -m deploy.add_topic", description=__doc__.splitlines()[0])
    parser.add_argument("--topic", required=True, help="the Kafka topic; its values' subject is <topic>-value")
    parser.add_argument("--database", required=True, help="the catalog folder's database (lowercase, digits, _)")
    parser.add_argument("--table", required=True, help="the catalog folder's table (lowercase, digits, _)")
    placement = parser.add_mutually_exclusive_group()
    placement.add_argument("--time-field", help="place rows by this event-time field (a dotted path)")
    placement.add_argument("--kafka-time", action="store_true", help="place rows by their Kafka timestamp")
    parser.add_argument("--update", action="store_true", help="add the subject's versions the entry lacks")
    parser.add_argument("--message", help="Protobuf: the full name of the message the records are, for a file with "
                        "several (default: the file's first, as Confluent's serializer frames by default; with "
                        "--update, the message of the entry's newest version)")
    parser.add_argument("--owner", default="unassigned", help="the team owning the table (default: unassigned)")
    parser.add_argument("--start-hour", help="the first hourly partition, e.g. 2026-11-01T00:00Z (default: the hour "
                        "before now; set the hour of the topic's first record to backfill its history)")
    parser.add_argument("--catalog", default=os.environ.get("SCHEMA_CATALOG_DIR") or "schema_catalog",
                        help="the topic catalog (default: $SCHEMA_CATALOG_DIR, else schema_catalog)")
    args = parser.parse_args(argv)
    if not args.update and args.time_field is None and not args.kafka_time:
        parser.error("say how rows are placed: --time-field FIELD or --kafka-time")
    if args.update and (args.time_field or args.kafka_time or args.start_hour):
        parser.error("--update keeps the entry's placement and start hour: leave out --time-field, --kafka-time and "
                     "--start-hour")
    url = PlatformSettings.from_env().schema_registry_url
    if not url:
        print("error: SCHEMA_REGISTRY_URL is not set: it names the schema registry the entry is written from",
              file=sys.stderr)
        return 2
    try:
        start_hour = _start_hour(args.start_hour)
    except ValueError:
        parser.error(f"--start-hour {args.start_hour!r} is not an ISO 8601 time like 2026-11-01T00:00Z")

    catalog = Path(args.catalog)
    folder = catalog / args.database / args.table
    subject = value_subject(args.topic)
    try:
        client = registry_client(url)
        versions = registered_versions(client, subject, url)
        plan = (updated_entry(folder, versions, args.message) if args.update
                else new_entry(folder, args.topic, versions, args.time_field, args.owner, start_hour, args.message,
                               registered_key(client, args.topic, url)))
        write_entry(plan, catalog)
    except OnboardingError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if not plan.added:
        print(f"{folder}: every version of {subject} at {url_without_credentials(url)} is in the entry already")
        return 0
    for version in plan.added:
        lands = f", message {version.message}" if version.message is not None else ""
        print(f"{folder / version.file}: {subject} version {version.registered.version} (registry id "
              f"{version.registered.schema_id}) as version {version.number}{lands}")
        if version.others:
            print(f"  {version.file} holds other messages too ({', '.join(name for name, _ in version.others)}): the "
                  f"records land as {version.message}, the file's first, as Confluent's serializer frames by default; "
                  f"if they are another, write the entry again with --message NAME")
    if plan.key.file is not None and plan.key.registered is not None:
        print(f"{folder / plan.key.file}: {plan.key.registered.label} as key_schema (the key's fields land as "
              f"_kafka_key_<field> columns)")
    elif plan.key.note:
        print(f"note: {plan.key.note}")
    for name, _ in plan.imports:
        print(f"{folder / name}: imported by the entry's .proto files")
    print(f"{folder / 'topic.yaml'}: {'updated' if args.update else 'written'}; next: `make check-catalog`, deploy (or "
          f"reload) the code location" + (", then land again the hours whose records became dead letters" if args.update
                                             else ""))
    return 0


def _start_hour(text: str | None) -> datetime:
    if text is None:
        return datetime.now(timezone.utc) - timedelta(hours=1)
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


if __name__ == "__main__":
    sys.exit(main())
