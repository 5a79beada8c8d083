"""OpenTelemetry-shaped spans (tests/protobuf_zoo/otel/): files importing each other by their path below the folder,
the span fourth in its file, a recursive AnyValue and the well-known types; compiled as a producer's build compiles
them, and spans built at random by the protobuf library.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_tools import _protoc_compiler

from kafka_lake.decoding.protobuf.proto_files import WELL_KNOWN_TYPES

OTEL_FILES = Path(__file__).resolve().parent / "protobuf_zoo" / "otel"
TRACE_PROTO = "opentelemetry/proto/trace/v1/trace.proto"
SPAN = "opentelemetry.proto.trace.v1.Span"
START_NANOS = 1_793_527_200_000_000_000  # 2026-11-01T10:00:00Z


def span_class(root: Path = OTEL_FILES, file: str = TRACE_PROTO):
    """The Span class of the files below `root`, compiled by protoc from that root, as a producer's build does."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "set.pb"
        arguments = ["protoc", f"-I{WELL_KNOWN_TYPES}", f"-I{root}", "--include_imports", f"--descriptor_set_out={out}",
                     file]
        assert _protoc_compiler.run_main([argument.encode() for argument in arguments]) == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(SPAN))


def _any_value(target, rng: random.Random, depth: int) -> None:
    kind = rng.choice(["string", "string", "int", "bool", "double", "bytes", "array", "kvlist"] if depth < 3 else
                      ["string", "int"])
    if kind == "string":
        target.string_value = rng.choice(["GET", "/api/orders/{id}", "orders-db", "é✓", ""])
    elif kind == "int":
        target.int_value = rng.randint(-(2**63), 2**63 - 1) if rng.random() < 0.2 else rng.randint(0, 70_000)
    elif kind == "bool":
        target.bool_value = rng.random() < 0.5
    elif kind == "double":
        target.double_value = rng.choice([0.5, -1e300, float("inf"), 3.0])
    elif kind == "bytes":
        target.bytes_value = rng.randbytes(rng.randint(0, 4))
    elif kind == "array":
        target.array_value.SetInParent()
        for _ in range(rng.randint(0, 3)):
            _any_value(target.array_value.values.add(), rng, depth + 1)
    else:
        target.kvlist_value.SetInParent()
        for n in range(rng.randint(0, 2)):
            entry = target.kvlist_value.values.add(key=f"k{n}")
            _any_value(entry.value, rng, depth + 1)


def _attributes(target, rng: random.Random, count: int) -> None:
    for n in range(count):
        attribute = target.add(key=rng.choice(["http.method", "http.route", "retry", "db.system", "net.peer"]) + str(n))
        if rng.random() < 0.95:
            _any_value(attribute.value, rng, 0)


def random_span(span_class, rng: random.Random, n: int):
    """A span of every kind of field, some left unset; observed `n` seconds after 10:00 on 2026-11-01."""
    span = span_class(trace_id=rng.randbytes(16), span_id=rng.randbytes(8), name=f"GET /orders/{n % 7}",
                      kind=rng.choice([0, 2, 3, 9]), start_time_unix_nano=START_NANOS + n * 10**9,
                      end_time_unix_nano=rng.choice([START_NANOS + n * 10**9 + 5, 2**64 - 1]), flags=rng.randint(0, 2**32 - 1),
                      sequence=rng.randint(0, 2**64 - 1))
    if rng.random() < 0.7:
        span.parent_span_id = rng.randbytes(8)
    _attributes(span.attributes, rng, rng.randint(0, 6))
    for _ in range(rng.randint(0, 2)):
        event = span.events.add(time_unix_nano=START_NANOS + n * 10**9 + 1, name="exception")
        _attributes(event.attributes, rng, rng.randint(0, 2))
    if rng.random() < 0.3:
        link = span.links.add(trace_id=rng.randbytes(16), span_id=rng.randbytes(8), flags=1)
        _attributes(link.attributes, rng, 1)
    if rng.random() < 0.8:
        span.status.code = rng.choice([0, 1, 2, 7])
        span.status.message = rng.choice(["", "deadline exceeded"])
    span.observed_at.FromNanoseconds(START_NANOS + n * 10**9 + rng.randint(0, 999_999_999))
    if rng.random() < 0.5:
        span.queued_for.FromMilliseconds(rng.randint(0, 5000))
    if rng.random() < 0.5:
        span.service_version.value = rng.choice(["", "1.4.2"])
    if rng.random() < 0.4:
        span.extra.update({"region": "eu-west-1", "weights": [1, 2.5], "on": True, "none": None})
    if rng.random() < 0.3:
        span.detail.type_url, span.detail.value = "type.googleapis.com/acme.Detail", rng.randbytes(3)
    for key in rng.sample(["tenant", "flow", "abc", "zeta"], rng.randint(0, 3)):
        span.baggage[key] = rng.choice(["a", "b", ""])
    choice = rng.random()
    if choice < 0.4:
        span.host = "web-1"
    elif choice < 0.7:
        span.process_id = rng.randint(1, 2**40)
    return span


def otel_topic(root: Path, **keys) -> Any:
    """A protobuf table of the spans in `root/otel/spans`: the folder tree copied, the span's file as `v1.proto`."""
    import json
    import shutil

    from kafka_lake.topics.loader import load_topic

    folder = root / "otel" / "spans"
    shutil.copytree(OTEL_FILES, folder)
    (folder / "v1.proto").write_text((OTEL_FILES / TRACE_PROTO).read_text())
    document = {"topic": "otel.spans", "owner": "team-test", "format": "protobuf", "start_hour": "2026-11-01T00:00Z",
                "time_partitioning": {"source": "event_time", "field": "observed_at"},
                "schema_versions": [{"version": 1, "file": "v1.proto", "message": SPAN, "registry_id": 51}], **keys}
    (folder / "topic.yaml").write_text(json.dumps(document))
    return load_topic(folder / "topic.yaml")
