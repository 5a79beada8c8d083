"""Demo traffic for the sample topics: page views, card payments, cart events and orders (Protobuf), with the mess
real topics carry.

Late events, a mid-stream schema change, tombstones and broken records, all deterministic from a seed.
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import random
import sys
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from datetime import time as time_of_day
from decimal import Decimal

from confluent_kafka import KafkaException, Producer

from dev_services.tansu import ensure_topic
from kafka_lake.decoding.protobuf.wire import encode_protobuf
from kafka_lake.hours import ONE_HOUR, floor_hour, hour_of_millis, to_millis
from kafka_lake.kafka.framing import confluent_header, encode_confluent
from kafka_lake.schemas.avro_types import field_type_at
from kafka_lake.table_spec import SchemaVersion, TableSpec
from kafka_lake.topics.loader import TopicCatalog, load_catalog

PAGE_VIEWS_TOPIC = "shop.page_views"
TRANSACTIONS_TOPIC = "payments.transactions"
CART_EVENTS_TOPIC = "shop.cart_events"
ORDERS_TOPIC = "shop.orders"
CUSTOMERS_TOPIC = "crm.public.customers"
UNKNOWN_SCHEMA_ID = 9999
BROKEN_KINDS = ("bad_magic_byte", "unknown_schema_id", "truncated_payload", "garbage_payload")
BROKEN_PER_KIND = {PAGE_VIEWS_TOPIC: 3, TRANSACTIONS_TOPIC: 2, CART_EVENTS_TOPIC: 1, ORDERS_TOPIC: 1, CUSTOMERS_TOPIC: 1}
TOMBSTONE_RATE = {PAGE_VIEWS_TOPIC: 0.01, TRANSACTIONS_TOPIC: 0.0, CART_EVENTS_TOPIC: 0.0, ORDERS_TOPIC: 0.0,
                  CUSTOMERS_TOPIC: 0.0}
LATE_EVENT_RATE = 0.03
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# --- What a run produced ---------------------------------------------------------------------------


@dataclass
class TopicTraffic:
    """What one run wrote to one topic; `produced` counts every record, closing records included."""

    topic: str
    produced: int = 0
    valid: int = 0
    tombstones: int = 0
    late: int = 0
    closing: int = 0
    broken: Counter = field(default_factory=Counter)  # dead-letter cause -> count
    by_schema_version: Counter = field(default_factory=Counter)  # version number -> valid records
    by_partition: Counter = field(default_factory=Counter)  # partition -> every record
    valid_by_kafka_hour: Counter = field(default_factory=Counter)  # hour start (UTC) -> valid records
    valid_by_event_hour: Counter = field(default_factory=Counter)  # only for event-time topics

    @property
    def broken_total(self) -> int:
        return sum(self.broken.values())

    def count(self, record: DemoRecord) -> None:
        self.produced += 1
        self.by_partition[record.partition] += 1
        if record.value is None:
            self.tombstones += 1
        elif record.broken:
            self.broken[record.broken] += 1
        else:
            self.valid += 1
            self.by_schema_version[record.schema_version] += 1
            self.valid_by_kafka_hour[hour_of_millis(record.timestamp_ms)] += 1
            if record.event_time_ms is not None:
                self.valid_by_event_hour[hour_of_millis(record.event_time_ms)] += 1
                self.late += record.late


@dataclass
class TrafficSummary:
    hours: tuple[datetime, ...]
    topics: dict[str, TopicTraffic]
    seconds: float = 0.0

    def __getitem__(self, topic: str) -> TopicTraffic:
        return self.topics[topic]

    def __str__(self) -> str:
        first, last = self.hours[0], self.hours[-1] + ONE_HOUR
        lines = [
            f"Demo traffic for {len(self.hours)} Kafka hour(s), {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC, "
            f"produced in {self.seconds:.1f} s",
            f"{'topic':<24}{'produced':>9}{'valid':>8}{'tombstones':>12}{'broken':>8}{'late':>6}{'closing':>9}  per schema version",
        ]
        for traffic in self.topics.values():
            versions = " ".join(f"v{v}={n}" for v, n in sorted(traffic.by_schema_version.items()))
            lines.append(
                f"{traffic.topic:<24}{traffic.produced:>9}{traffic.valid:>8}{traffic.tombstones:>12}"
                f"{traffic.broken_total:>8}{traffic.late:>6}{traffic.closing:>9}  {versions}"
            )
        return "\n".join(lines)


# --- One record to produce ------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoRecord:
    timestamp_ms: int
    partition: int
    key: bytes | None
    value: bytes | None
    schema_version: int | None = None
    event_time_ms: int | None = None
    late: bool = False
    broken: str | None = None  # the dead-letter cause the platform should give it


def partition_for_key(key: bytes | None, partitions: int, rng: random.Random) -> int:
    """Same key, same partition, as Kafka's partitioners do; a keyless record goes anywhere."""
    if key is None:
        return rng.randrange(partitions)
    return zlib.crc32(key) % partitions


def seeded_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def millis_to_datetime(epoch_ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=epoch_ms)


def break_record(kind: str, schema_id: int, parsed_schema, record: dict, rng: random.Random) -> bytes:
    """A value the platform must dead-letter with cause `kind`, built from a valid record."""
    framed = encode_confluent(schema_id, parsed_schema, record)
    if kind == "bad_magic_byte":
        # A producer that forgot the serializer: plain JSON starts with '{', not the 0x00 magic byte.
        return json.dumps(record, default=str).encode()
    if kind == "unknown_schema_id":
        return encode_confluent(UNKNOWN_SCHEMA_ID, parsed_schema, record)
    if kind == "truncated_payload":
        # Any strict prefix of an Avro record runs out of bytes before its last field.
        return framed[: 5 + rng.randrange(1, len(framed) - 5)]
    if kind == "garbage_payload":
        # A valid header over JSON text: '{' read as an Avro string length is -62.
        return framed[:5] + json.dumps(record, default=str).encode()
    raise ValueError(f"unknown kind of broken record {kind!r}; expected one of {BROKEN_KINDS}")


def framed_record(schema: SchemaVersion, record: dict, key: bytes | None, timestamp_ms: int, partitions: int,
                  rng: random.Random, broken: str | None, event_time_ms: int | None = None, late: bool = False) -> DemoRecord:
    """`record` as a Confluent-framed value of `schema` in its key's partition, or broken as `broken` says."""
    partition = partition_for_key(key, partitions, rng)
    if broken:
        return DemoRecord(timestamp_ms, partition, key, break_record(broken, schema.registry_id, schema.parsed, record, rng),
                          broken=broken)
    value = encode_confluent(schema.registry_id, schema.parsed, record)
    return DemoRecord(timestamp_ms, partition, key, value, schema.version, event_time_ms, late)


# --- Realistic values -----------------------------------------------------------------------------

USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.81 Mobile Safari/537.36",
    "Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.51",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
)
SHOP = "https://shop.example.com"
CATEGORIES = ("shoes", "jackets", "kitchen", "garden", "toys", "books", "lighting", "bags")
SEARCH_TERMS = ("running+shoes", "rain+jacket", "espresso+machine", "led+desk+lamp", "lego", "hiking+boots", "wool+socks")
EXTERNAL_REFERRERS = (
    "https://www.google.com/", "https://www.bing.com/", "https://duckduckgo.com/",
    "https://www.instagram.com/", "https://news.example.org/best-gifts-2026", "https://mail.example.com/newsletter/2026-11",
)
EXPERIMENTS = {"checkout_flow": ("control", "one_page"), "search_ranker": ("bm25", "learned_v3"), "free_shipping_banner": ("off", "on")}
CURRENCIES = (("EUR", 55), ("USD", 25), ("GBP", 12), ("SEK", 8))
STATUSES = (("CAPTURED", 70), ("AUTHORIZED", 20), ("DECLINED", 7), ("REFUNDED", 3))
SCHEMES = (("VISA", 55), ("MASTERCARD", 35), ("AMEX", 10))
CHANNELS = (("web", 55), ("app", 30), ("pos", 15))
FIRST_NAMES = ("anna", "ben", "chloe", "david", "emma", "felix", "greta", "hugo", "ines", "jonas", "karin", "liam", "maja", "noah")
LAST_NAMES = ("andersson", "becker", "costa", "dubois", "evans", "fischer", "garcia", "hansen", "jensen", "kowalski", "larsen", "meyer")
CENT = Decimal("0.01")
BASIS_POINT = Decimal("0.0001")


def weighted(rng: random.Random, options: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([name for name, _ in options], weights=[weight for _, weight in options])[0]


def make_skus(rng: random.Random, count: int = 300) -> list[tuple[str, Decimal]]:
    """A product catalogue: SKU codes like `SKU-SH-04821` with a price each, prices ending in .99 or .00."""
    skus = []
    for _ in range(count):
        category = rng.choice(CATEGORIES)
        code = f"SKU-{category[:2].upper()}-{rng.randrange(100000):05d}"
        price = Decimal(rng.randrange(2, 400)) + rng.choice((Decimal("0.99"), Decimal("0.00"), Decimal("0.49")))
        skus.append((code, price))
    return skus


def public_ip(rng: random.Random) -> str:
    # First octets of ordinary public ranges, so no address looks private or reserved.
    return f"{rng.choice((31, 46, 62, 77, 81, 85, 89, 93, 109, 151, 176, 185, 213))}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


# --- shop.page_views --------------------------------------------------------------------------------


class PageViews:
    """Page views keyed by user; placed by `occurred_at`, a few seconds before Kafka saw them."""

    def __init__(self, spec: TableSpec, rng: random.Random):
        self.spec = spec
        self.rng = rng
        self.skus = make_skus(rng)
        self.users = [f"u{rng.randrange(10**7):07d}" for _ in range(3000)]
        self.seen_users: list[str] = []

    def key_of(self, user_id: str | None) -> bytes | None:
        return user_id.encode() if user_id else None

    def url(self) -> str:
        rng = self.rng
        page = rng.random()
        if page < 0.35:
            return f"{SHOP}/products/{rng.choice(self.skus)[0].lower()}"
        if page < 0.55:
            return f"{SHOP}/category/{rng.choice(CATEGORIES)}?page={rng.randint(1, 5)}"
        if page < 0.70:
            return f"{SHOP}/search?q={rng.choice(SEARCH_TERMS)}"
        return SHOP + rng.choice(("/", "/", "/cart", "/checkout", "/account/orders", "/help/shipping"))

    def referrer(self) -> str | None:
        rng = self.rng
        draw = rng.random()
        if draw < 0.35:
            return None  # typed in or bookmarked
        if draw < 0.75:
            return self.url()  # the previous page in the shop
        return rng.choice(EXTERNAL_REFERRERS)

    def record(self, version: int, user_id: str | None, occurred_ms: int) -> dict:
        rng = self.rng
        record = {
            "view_id": seeded_uuid(rng),
            "occurred_at": millis_to_datetime(occurred_ms),
            "user_id": user_id,
            "url": self.url(),
            "referrer": self.referrer(),
            "client": {"ip_address": public_ip(rng), "user_agent": rng.choice(USER_AGENTS)},
            "duration_ms": int(rng.lognormvariate(9.5, 1.1)),
        }
        if version >= 2:
            if rng.random() < 0.003:
                # A tab left open for weeks: only v2's long can hold it, which is why v2 widened the field.
                record["duration_ms"] = rng.randrange(2**31, 2**32)
            record["session_id"] = f"s-{rng.getrandbits(64):016x}"
            record["experiments"] = {
                name: rng.choice(arms) for name, arms in EXPERIMENTS.items() if rng.random() < 0.6
            }
        return record

    def next_record(self, timestamp_ms: int, version: int, partitions: int, broken: str | None) -> DemoRecord:
        rng = self.rng
        if broken is None and self.seen_users and rng.random() < TOMBSTONE_RATE[PAGE_VIEWS_TOPIC]:
            # A user asked to be forgotten: compaction would drop every view keyed by them.
            key = self.key_of(rng.choice(self.seen_users))
            return DemoRecord(timestamp_ms, partition_for_key(key, partitions, rng), key, None)
        user_id = None if rng.random() < 0.12 else rng.choice(self.users)
        if user_id:
            self.seen_users.append(user_id)
        late = broken is None and rng.random() < LATE_EVENT_RATE
        # A late view sat 1-3 hours on a phone without network; the others took a few seconds.
        delay_ms = rng.randrange(3_600_000, 3 * 3_600_000) if late else rng.randrange(150, 6_000)
        occurred_ms = timestamp_ms - delay_ms
        return self.framed(timestamp_ms, version, partitions, user_id, occurred_ms, late, broken)

    def closing_record(self, timestamp_ms: int, partition: int, partitions: int) -> DemoRecord:
        user_id = next(u for u in self.users if zlib.crc32(u.encode()) % partitions == partition)
        version = self.spec.schema_versions[-1].version
        return self.framed(timestamp_ms, version, partitions, user_id, timestamp_ms - 1_200, False, None)

    def framed(self, timestamp_ms, version, partitions, user_id, occurred_ms, late, broken) -> DemoRecord:
        record = self.record(version, user_id, occurred_ms)
        return framed_record(self.spec.version(version), record, self.key_of(user_id), timestamp_ms, partitions, self.rng,
                             broken, occurred_ms, late)


# --- payments.transactions --------------------------------------------------------------------------


@dataclass(frozen=True)
class Customer:
    customer_id: int
    email: str | None
    currency: str
    card: dict


class Transactions:
    """Card payments keyed by customer; placed by Kafka time, so no event time and no late events."""

    def __init__(self, spec: TableSpec, rng: random.Random):
        self.spec = spec
        self.rng = rng
        self.skus = make_skus(rng)
        self.customers = [self.customer(10_000_000 + rng.randrange(10**7)) for _ in range(2000)]

    def customer(self, customer_id: int) -> Customer:
        rng = self.rng
        email = None
        if rng.random() < 0.85:
            email = f"{rng.choice(FIRST_NAMES)}.{rng.choice(LAST_NAMES)}{rng.randrange(100)}@example.com"
        year, month = rng.randint(2026, 2031), rng.randint(1, 12)
        card = {
            "scheme": weighted(rng, SCHEMES),
            "pan_last4": f"{rng.randrange(10000):04d}",
            # Cards expire at the end of their month.
            "expiry": date(year, month, calendar.monthrange(year, month)[1]),
        }
        return Customer(customer_id, email, weighted(rng, CURRENCIES), card)

    def record(self, customer: Customer, timestamp_ms: int) -> dict:
        rng = self.rng
        line_items = []
        for _ in range(rng.choices((1, 2, 3, 4, 5), weights=(50, 25, 12, 8, 5))[0]):
            sku, price = rng.choice(self.skus)
            line_items.append({"sku": sku, "quantity": rng.choices((1, 2, 3, 6), weights=(80, 12, 5, 3))[0], "unit_price": price})
        amount = sum((item["unit_price"] * item["quantity"] for item in line_items), Decimal("0")).quantize(CENT)
        status = weighted(rng, STATUSES)
        channel = weighted(rng, CHANNELS)
        attributes = {"channel": channel, "three_ds": rng.choice(("passed", "passed", "not_required", "frictionless"))}
        if channel == "pos":
            attributes["terminal_id"] = f"T-{rng.randrange(1, 400):04d}"
        if channel == "app":
            attributes["app_version"] = rng.choice(("5.12.0", "5.13.1", "5.14.0"))
        authorized_us = timestamp_ms * 1000 - rng.randrange(40_000, 2_500_000)
        return {
            "transaction_id": seeded_uuid(rng),
            "customer_id": customer.customer_id,
            "customer_email": customer.email,
            "amount": amount,
            # Interchange plus a fixed part, to the basis point; a declined payment earns no fee.
            "fee": None if status == "DECLINED" else (amount * Decimal("0.0145") + Decimal("0.25")).quantize(BASIS_POINT),
            "currency": customer.currency,
            "status": status,
            "card": dict(customer.card),
            "line_items": line_items,
            "attributes": attributes,
            "risk_score": self.risk_score(),
            "authorized_at": EPOCH + timedelta(microseconds=authorized_us),
            "settlement_time": self.settlement_time(status),
            "terminal_signature": rng.randbytes(32) if channel == "pos" else None,
        }

    def risk_score(self) -> float | str | None:
        # The fraud service answers a score, a verdict string when it overrides, or nothing on timeout.
        draw = self.rng.random()
        if draw < 0.12:
            return None
        if draw < 0.2:
            return self.rng.choice(("manual_review", "allowlisted"))
        return round(self.rng.betavariate(1.2, 9.0), 4)

    def settlement_time(self, status: str) -> time_of_day | None:
        if status not in ("CAPTURED", "REFUNDED"):
            return None
        rng = self.rng
        return time_of_day(rng.choice((2, 6, 14, 22)), rng.randrange(60), rng.randrange(60), rng.randrange(1000) * 1000)

    def next_record(self, timestamp_ms: int, version: int, partitions: int, broken: str | None) -> DemoRecord:
        return self.framed(timestamp_ms, version, partitions, self.rng.choice(self.customers), broken)

    def closing_record(self, timestamp_ms: int, partition: int, partitions: int) -> DemoRecord:
        customer = next(c for c in self.customers if zlib.crc32(str(c.customer_id).encode()) % partitions == partition)
        return self.framed(timestamp_ms, self.spec.schema_versions[-1].version, partitions, customer, None)

    def framed(self, timestamp_ms: int, version: int, partitions: int, customer: Customer, broken: str | None) -> DemoRecord:
        record = self.record(customer, timestamp_ms)
        return framed_record(self.spec.version(version), record, str(customer.customer_id).encode(), timestamp_ms,
                             partitions, self.rng, broken)


# --- shop.cart_events -------------------------------------------------------------------------------


class CartEvents:
    """JSON cart events of several types in one topic (a table per type routes them by `type`), placed by `ts`; a few
    `cartAbandon` events no table takes (the topic's unrouted dead letters), and broken ones that are no JSON."""

    TYPES = (("cartOpen", 55), ("cartClose", 40), ("cartAbandon", 5))

    def __init__(self, spec: TableSpec, rng: random.Random):
        self.spec = spec
        self.rng = rng

    def next_record(self, timestamp_ms: int, version: int, partitions: int, broken: str | None) -> DemoRecord:
        rng = self.rng
        cart = f"cart-{rng.randrange(10**6):06d}"
        key = cart.encode()
        partition = partition_for_key(key, partitions, rng)
        if broken:
            return DemoRecord(timestamp_ms, partition, key, b'{"type": "cartOpen", "cart_id": ', broken="unrouted")
        kind = weighted(rng, self.TYPES)
        occurred_ms = timestamp_ms - rng.randrange(50, 4_000)
        event = {"type": kind, "ts": occurred_ms, "cart_id": cart}
        if kind == "cartOpen":
            event["channel"] = rng.choice(("web", "app"))
        elif kind == "cartClose":
            event["items"] = rng.randint(1, 9)
            event["total"] = f"{rng.randrange(100, 50_000) / 100:.2f}"
        return DemoRecord(timestamp_ms, partition, key, json.dumps(event).encode(), version, occurred_ms)

    def closing_record(self, timestamp_ms: int, partition: int, partitions: int) -> DemoRecord:
        cart = next(f"cart-close-{n}" for n in range(10**6) if zlib.crc32(f"cart-close-{n}".encode()) % partitions == partition)
        event = {"type": "cartOpen", "ts": timestamp_ms - 1_000, "cart_id": cart, "channel": "web"}
        return DemoRecord(timestamp_ms, partition, cart.encode(), json.dumps(event).encode(), 1, timestamp_ms - 1_000)


# --- shop.orders -------------------------------------------------------------------------------------


class Orders:
    """Protobuf orders keyed by order id, framed as Confluent's Protobuf serializer frames them; placed by
    `placed_at`, a `google.protobuf.Timestamp`."""

    STATUSES = (("PLACED", 30), ("PAID", 60), ("CANCELLED", 10))

    def __init__(self, spec: TableSpec, rng: random.Random):
        self.spec = spec
        self.rng = rng
        self.skus = make_skus(rng)

    def message(self, version: int, placed_ms: int):
        rng = self.rng
        compiled = self.spec.version(version).parsed
        order = compiled.message_class(order_id=seeded_uuid(rng), customer_id=f"c{rng.randrange(10**6):06d}",
                                       status=weighted(rng, self.STATUSES))
        order.placed_at.FromMilliseconds(placed_ms)
        total = Decimal(0)
        for _ in range(rng.randint(1, 4)):
            sku, price = rng.choice(self.skus)
            line = order.lines.add(sku=sku, quantity=rng.randint(1, 3))
            _money(line.unit_price, price)
            total += price * line.quantity
        _money(order.total, total)
        order.attributes["channel"] = rng.choice(("web", "app"))
        if rng.random() < 0.85:
            order.card_last4 = f"{rng.randrange(10**4):04d}"
        else:
            order.voucher_code = f"GIFT-{rng.randrange(10**6):06d}"
        if rng.random() < 0.2:
            order.coupon.value = rng.choice(("WELCOME10", "SPRING", ""))
        return order

    def next_record(self, timestamp_ms: int, version: int, partitions: int, broken: str | None) -> DemoRecord:
        placed_ms = timestamp_ms - self.rng.randrange(100, 3_000)
        return self.framed(timestamp_ms, version, partitions, placed_ms, broken)

    def closing_record(self, timestamp_ms: int, partition: int, partitions: int) -> DemoRecord:
        record = self.framed(timestamp_ms, self.spec.schema_versions[-1].version, partitions, timestamp_ms - 1_000, None)
        return DemoRecord(record.timestamp_ms, partition, record.key, record.value, record.schema_version,
                          record.event_time_ms)

    def framed(self, timestamp_ms: int, version: int, partitions: int, placed_ms: int, broken: str | None) -> DemoRecord:
        schema = self.spec.version(version)
        order = self.message(version, placed_ms)
        key = order.order_id.encode()
        partition = partition_for_key(key, partitions, self.rng)
        indexes = schema.parsed.indexes_of(order.DESCRIPTOR)
        if broken:
            return DemoRecord(timestamp_ms, partition, key, self.broken(broken, schema.registry_id, indexes, order),
                              broken=broken)
        value = encode_protobuf(schema.registry_id, indexes, order)
        return DemoRecord(timestamp_ms, partition, key, value, version, placed_ms)

    def broken(self, kind: str, schema_id: int, indexes: list[int], order) -> bytes:
        if kind == "bad_magic_byte":  # a producer that forgot the serializer: the message without the framing
            return order.SerializeToString()
        if kind == "unknown_schema_id":
            return encode_protobuf(UNKNOWN_SCHEMA_ID, indexes, order)
        if kind == "truncated_payload":
            # Cut inside the last field, a length-delimited wrapper: it claims one byte more than is left.
            order.coupon.value = "TRUNCATED"
            return encode_protobuf(schema_id, indexes, order)[:-1]
        if kind == "garbage_payload":  # JSON text after the framing: '{' starts a group that never ends
            return confluent_header(schema_id) + b"\x00" + json.dumps({"order_id": order.order_id}).encode()
        raise ValueError(f"unknown kind of broken record {kind!r}; expected one of {BROKEN_KINDS}")


def _money(money, amount: Decimal) -> None:
    money.currency = "EUR"
    money.units = int(amount)
    money.nanos = int((amount - int(amount)) * 1_000_000_000)


# --- crm.public.customers ---------------------------------------------------------------------------


class Customers:
    """The customers table as Debezium captures it: creates, updates and deletes (each delete's `d` event followed by
    its tombstone), keyed by `customer_id` as Confluent-framed Avro of `key.avsc`; placed by `source.ts_ms`."""

    OPERATIONS = (("c", 30), ("u", 60), ("d", 10))
    TIERS = (("bronze", 60), ("silver", 30), ("gold", 10))
    COUNTRIES = ("DE", "SE", "FR", "NL", "ES", "GB", "US")
    KEY_REGISTRY_ID = 4101  # the key subject's own schema id

    def __init__(self, spec: TableSpec, rng: random.Random):
        self.spec = spec
        self.rng = rng
        self.rows: dict[int, dict] = {}  # the source table, as the changes leave it
        self.next_id = 100_001
        self.tombstone_due: int | None = None  # a delete's tombstone follows it

    def key(self, customer_id: int) -> bytes:
        assert self.spec.key_schema is not None
        return encode_confluent(self.KEY_REGISTRY_ID, self.spec.key_schema.parsed, {"customer_id": customer_id})

    def new_row(self, customer_id: int, timestamp_ms: int) -> dict:
        rng = self.rng
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        return {"customer_id": customer_id, "email": f"{first}.{last}{rng.randrange(100)}@example.com",
                "full_name": f"{first.title()} {last.title()}", "tier": weighted(rng, self.TIERS),
                "country": rng.choice(self.COUNTRIES), "updated_at": timestamp_ms * 1000,  # a MicroTimestamp: microseconds since the epoch
                "marketing_opt_in": rng.choice((None, True, False))}

    def next_record(self, timestamp_ms: int, version: int, partitions: int, broken: str | None) -> DemoRecord:
        rng = self.rng
        if self.tombstone_due is not None and broken is None:
            key, self.tombstone_due = self.key(self.tombstone_due), None
            return DemoRecord(timestamp_ms, partition_for_key(key, partitions, rng), key, None)
        op = weighted(rng, self.OPERATIONS) if len(self.rows) > 50 else "c"
        if op == "c":
            customer_id, self.next_id = self.next_id, self.next_id + 1
            before, after = None, self.new_row(customer_id, timestamp_ms)
        else:
            customer_id = rng.choice(list(self.rows))
            before = self.rows[customer_id]
            after = None if op == "d" else {**before, "tier": weighted(rng, self.TIERS), "email": rng.choice(
                (before["email"], f"{customer_id}@mail.example.org")), "updated_at": timestamp_ms * 1000}
        if broken is None:
            if after is None:
                del self.rows[customer_id]
                self.tombstone_due = customer_id
            else:
                self.rows[customer_id] = after
        return self.framed(timestamp_ms, version, partitions, customer_id, op, before, after, broken)

    def closing_record(self, timestamp_ms: int, partition: int, partitions: int) -> DemoRecord:
        customer_id = next(n for n in range(self.next_id, self.next_id + 10**6)
                           if partition_for_key(self.key(n), partitions, self.rng) == partition)
        self.next_id = customer_id + 1
        row = self.new_row(customer_id, timestamp_ms)
        self.rows[customer_id] = row
        return self.framed(timestamp_ms, self.spec.schema_versions[-1].version, partitions, customer_id, "c", None, row, None)

    def framed(self, timestamp_ms: int, version: int, partitions: int, customer_id: int, op: str, before: dict | None,
               after: dict | None, broken: str | None) -> DemoRecord:
        schema = self.spec.version(version)
        row_type = field_type_at(schema.schema, ("before",))[1]  # ["null", the row's record]
        fields = {f["name"] for f in row_type["fields"]}  # a version before marketing_opt_in has not got it
        shaped = (lambda row: None if row is None else {k: v for k, v in row.items() if k in fields})
        committed_ms = timestamp_ms - self.rng.randrange(20, 900)  # the database commit, before Kafka saw it
        record = {"before": shaped(before), "after": shaped(after), "op": op, "ts_ms": timestamp_ms,
                  "source": {"connector": "postgresql", "db": "crm", "table": "customers", "ts_ms": committed_ms,
                             "lsn": 24_000_000 + timestamp_ms % 10**7}}
        return framed_record(schema, record, self.key(customer_id), timestamp_ms, partitions, self.rng, broken,
                             committed_ms)


GENERATORS: dict[str, Callable[[TableSpec, random.Random], PageViews | Transactions | CartEvents | Orders | Customers]] = {
    PAGE_VIEWS_TOPIC: PageViews,
    TRANSACTIONS_TOPIC: Transactions,
    CART_EVENTS_TOPIC: CartEvents,
    ORDERS_TOPIC: Orders,
    CUSTOMERS_TOPIC: Customers,
}


# --- Planning and producing -------------------------------------------------------------------------


def kafka_timestamps(hours: list[datetime], records_per_hour: int, rng: random.Random) -> list[int]:
    """Record times spread over each hour, sorted; the last millisecond of an hour is kept for closing records."""
    stamps = []
    for hour in hours:
        start = to_millis(hour)
        stamps.extend(rng.randrange(start, start + 3_600_000 - 1) for _ in range(records_per_hour))
    return sorted(stamps)


def plan_topic(spec: TableSpec, hours: list[datetime], records_per_hour: int, partitions: int, seed: int) -> tuple[list[DemoRecord], list[DemoRecord]]:
    """(the traffic, then one closing record per partition) for one topic, in Kafka-time order."""
    rng = random.Random(f"{seed}:{spec.topic}")
    generator = GENERATORS[spec.topic](spec, rng)
    stamps = kafka_timestamps(hours, records_per_hour, rng)
    broken_at = broken_positions(len(stamps), BROKEN_PER_KIND[spec.topic], rng)
    versions = [v.version for v in spec.schema_versions]
    traffic = [
        # Each schema version owns an equal, consecutive stretch: the producers upgraded mid-stream.
        generator.next_record(stamp, versions[index * len(versions) // len(stamps)], partitions, broken_at.get(index))
        for index, stamp in enumerate(stamps)
    ]
    closing_ms = to_millis(hours[-1]) + 3_600_000 - 1
    closing = [generator.closing_record(closing_ms, partition, partitions) for partition in range(partitions)]
    return traffic, closing


def broken_positions(count: int, per_kind: int, rng: random.Random) -> dict[int, str]:
    slots = rng.sample(range(count), min(count, per_kind * len(BROKEN_KINDS)))
    return {slot: BROKEN_KINDS[i % len(BROKEN_KINDS)] for i, slot in enumerate(slots)}


class DemoTrafficError(RuntimeError):
    """Producing the demo traffic failed; the message names the topic, partition and broker."""


class DeliveryLog:
    """Remembers the first failed delivery; librdkafka reports them asynchronously."""

    def __init__(self):
        self.failures: list[str] = []

    def __call__(self, error, message) -> None:
        if error is not None:
            self.failures.append(f"{message.topic()}[{message.partition()}]: {error.str()}")


def produce_demo_traffic(
    bootstrap_servers: str,
    catalog: TopicCatalog,
    hours: list[datetime],
    records_per_hour: int = 2000,
    partitions: int = 3,
    seed: int = 7,
) -> TrafficSummary:
    """Produces `records_per_hour` records per sample topic for each hour, deterministic from `seed`.

    Each partition ends with a single-record batch so a broker that reports the high watermark
    as the last batch's first offset + 1 (Tansu) still reports it exactly.
    """
    started = time.monotonic()
    hours = sorted(floor_hour(hour) for hour in hours)
    if not hours:
        raise ValueError("no hours to produce demo traffic for")
    # One table per topic tells its generator the schema: a topic landed by several tables is produced once.
    specs = [next(t for t in catalog.tables_of(name) if t.schema_versions) for name in GENERATORS
             if any(t.schema_versions for t in catalog.tables_of(name))]
    if not specs:
        raise DemoTrafficError(f"the catalog at {catalog.directory} has neither {PAGE_VIEWS_TOPIC} nor {TRANSACTIONS_TOPIC}")

    # Topics first: a broker that is not there fails here, with its address, before anything is queued.
    topic_partitions = {spec.topic: ensure_topic(bootstrap_servers, spec.topic, partitions) for spec in specs}
    deliveries = DeliveryLog()
    producer = Producer({
        "bootstrap.servers": bootstrap_servers,
        "linger.ms": 20,
        "batch.num.messages": 100_000,
        "batch.size": 4_000_000,
        "queue.buffering.max.messages": 1_000_000,
        "acks": "all",
    })
    summary = TrafficSummary(tuple(hours), {})
    closing_records = []
    for spec in specs:
        traffic, closing = plan_topic(spec, hours, records_per_hour, topic_partitions[spec.topic], seed)
        summary.topics[spec.topic] = tally(spec.topic, traffic, closing)
        send(producer, spec.topic, traffic, deliveries)
        closing_records.append((spec.topic, closing))
    finish(producer, deliveries, bootstrap_servers)
    for topic, closing in closing_records:
        send(producer, topic, closing, deliveries)
    finish(producer, deliveries, bootstrap_servers)
    summary.seconds = time.monotonic() - started
    return summary


def tally(topic: str, traffic: list[DemoRecord], closing: list[DemoRecord]) -> TopicTraffic:
    counts = TopicTraffic(topic)
    for record in traffic + closing:
        counts.count(record)
    counts.closing = len(closing)
    return counts


def send(producer: Producer, topic: str, records: list[DemoRecord], deliveries: DeliveryLog) -> None:
    for position, record in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic, value=record.value, key=record.key, partition=record.partition,
                    timestamp=record.timestamp_ms, on_delivery=deliveries,
                )
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain it
        if position % 1000 == 0:
            producer.poll(0)


def finish(producer: Producer, deliveries: DeliveryLog, bootstrap_servers: str, timeout: float = 60.0) -> None:
    left = producer.flush(timeout)
    if left:
        raise DemoTrafficError(f"{left} demo records were not delivered to {bootstrap_servers} within {timeout:.0f} s; is the broker up?")
    if deliveries.failures:
        raise DemoTrafficError(
            f"{len(deliveries.failures)} demo records were refused by {bootstrap_servers}, first: {deliveries.failures[0]}"
        )


def last_closed_hours(count: int, now: datetime | None = None) -> list[datetime]:
    """The `count` whole UTC hours before the current one, oldest first."""
    current = floor_hour(now or datetime.now(timezone.utc))
    return [current - ONE_HOUR * back for back in range(count, 0, -1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dev_services.demo_traffic", description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--hours", type=int, default=4, help="how many closed UTC hours before the current one")
    parser.add_argument("--records-per-hour", type=int, default=2000, help="records per topic per hour")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of topics that do not exist yet")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--catalog", default=os.environ.get("SCHEMA_CATALOG_DIR", "schema_catalog"), help="topic catalog directory")
    args = parser.parse_args(argv)
    if args.hours < 1 or args.records_per_hour < 1:
        parser.error("--hours and --records-per-hour must be at least 1")
    try:
        summary = produce_demo_traffic(
            args.bootstrap, load_catalog(args.catalog), last_closed_hours(args.hours),
            args.records_per_hour, args.partitions, args.seed,
        )
    except KafkaException as error:
        print(f"error: no Kafka broker answers at {args.bootstrap} ({error.args[0].str()}); "
              f"start one with `python -m dev_services.tansu start`", file=sys.stderr)
        return 1
    except (DemoTrafficError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
