"""A `.proto` schema file as a version of a table: compiled at load by protoc (grpcio-tools' bundled compiler) into
descriptors, its imports in its folder (by their path below it) or among the well-known types; errors name the file.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc_tools
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor
from grpc_tools import _protoc_compiler

from kafka_lake.table_spec import SchemaFileError

# The well-known types (google/protobuf/*.proto) as grpcio-tools ships them beside its protoc.
WELL_KNOWN_TYPES = Path(grpc_tools.__file__).parent / "_proto"
WELL_KNOWN_PREFIX = "google/protobuf/"


@dataclass(frozen=True)
class CompiledProto:
    """One version's `.proto` file compiled: the message its values are, and the file's messages as Confluent's
    message indexes count them."""

    file: str
    message: Descriptor
    message_class: Any = field(repr=False)  # the runtime's class of `message`: parses a payload
    top_level: tuple[Descriptor, ...] = field(repr=False)  # the file's top-level messages, in order
    # What a schema id stands for: the file and the files it imports from its folder, as protoc read them, whatever their
    # names, comments and layout; two versions of one id must have the same.
    form: str = ""
    descriptor_set: bytes = field(default=b"", repr=False)  # the compiled files, from which a worker rebuilds it

    def __reduce__(self):
        # Descriptors do not pickle: a Spark worker rebuilds them from the compiled files, without protoc.
        return _rebuilt, (self.file, self.message.full_name, self.descriptor_set, self.form)

    def message_at(self, indexes: list[int]) -> Descriptor | None:
        """The message that Confluent's message indexes name in this file ([0]: the first top-level one), or None."""
        found: Descriptor | None = None
        choices: Any = self.top_level
        for index in indexes:
            if not 0 <= index < len(choices):
                return None
            found = choices[index]
            choices = found.nested_types
        return found

    def indexes_of(self, message: Descriptor) -> list[int]:
        """The message indexes naming `message` (a message of this file), as a producer writes them."""
        path: list[int] = []
        while message.containing_type is not None:
            path.append(list(message.containing_type.nested_types).index(message))
            message = message.containing_type
        path.append(list(self.top_level).index(message))
        return path[::-1]


def compile_proto(path: Path, message: str | None) -> CompiledProto:
    """The file at `path` compiled with protoc, and `message` (a full name, as `acme.orders.Order`; None: the first
    message of the file) found in it; raises `SchemaFileError` naming the file."""
    files = _descriptor_set(path)
    return _compiled(str(path), path.name, message, files, files.SerializeToString(), _form(files, path.name))


def _compiled(where: str, file: str, message: str | None, files: descriptor_pb2.FileDescriptorSet,
              serialized: bytes, form: str) -> CompiledProto:
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:
        pool.Add(proto)
    main = pool.FindFileByName(file)
    top_level = tuple(main.message_types_by_name.values())
    if message is None:
        if not top_level:
            raise SchemaFileError(f"{where}: defines no message")
        found = top_level[0]
    else:
        try:
            found = pool.FindMessageTypeByName(message)
        except KeyError:
            names = ", ".join(_message_names(top_level)) or "none"
            raise SchemaFileError(f"{where}: has no message {message!r} (its messages: {names}); message names a "
                                  f"message of the file by its full name, package included") from None
        if found.file.name != main.name:
            raise SchemaFileError(f"{where}: message {message!r} is defined in {found.file.name}, which it imports; a "
                                  f"record's message indexes name messages of the version's own file, so the message "
                                  f"must be defined there")
    return CompiledProto(file, found, message_factory.GetMessageClass(found), top_level, form, serialized)


_REBUILT: dict[tuple[str, str, str], CompiledProto] = {}


def _rebuilt(file: str, message: str, descriptor_set: bytes, form: str) -> CompiledProto:
    """A `CompiledProto` unpickled: rebuilt from its compiled files once per process."""
    key = (file, message, form)
    if key not in _REBUILT:
        files = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set)
        _REBUILT[key] = _compiled(file, file, message, files, descriptor_set, form)
    return _REBUILT[key]


def _descriptor_set(path: Path) -> descriptor_pb2.FileDescriptorSet:
    """The file and everything it imports, compiled; imports found among the well-known types first, then in its folder
    by the path they are imported by."""
    folder = path.parent
    includes = [f"-I{WELL_KNOWN_TYPES}", f"-I{folder}"]
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "set.pb"
        arguments = ["protoc", *includes, "--include_imports", f"--descriptor_set_out={out}", path.name]
        if _protoc_compiler.run_main([argument.encode() for argument in arguments]) != 0:
            raise SchemaFileError(f"{path}: does not compile: {_compile_errors(path, folder)}")
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    for proto in files.file:
        if proto.name.startswith(WELL_KNOWN_PREFIX) and (WELL_KNOWN_TYPES / proto.name).is_file():
            continue
        if import_path_problem(proto.name) or not _inside(folder / proto.name, folder):
            raise SchemaFileError(f"{path}: imports {proto.name!r}, which is neither in the folder of topic.yaml (beside "
                                  f"it, or in a sub-folder by the path it is imported by) nor a well-known type "
                                  f"(google/protobuf/…); put the file it imports there")
    return files


def import_path_problem(name: str) -> str | None:
    """Why an import's path cannot name a file of a catalog entry's folder (None: it can). Imports are written as the
    path below the folder, with `/`, as OpenTelemetry's and buf's layouts write them
    (`opentelemetry/proto/common/v1/common.proto`)."""
    parts = name.split("/")
    if not name or "\\" in name or name.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return f"{name!r}, a path that leaves the entry's folder (an import names a file by its path below it, with /)"
    return None


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve()) and path.is_file()
    except (OSError, ValueError, RuntimeError):
        return False


def _compile_errors(path: Path, folder: Path) -> str:
    """protoc's errors as text (its command line printed them to the process's stderr): compiled again by the entry
    point that hands them back; line and column counted from 1, as editors do."""
    try:
        _protoc_compiler.get_protos(path.name.encode(), [str(WELL_KNOWN_TYPES).encode(), str(folder).encode()])
    except _protoc_compiler.ProtocErrors as errors:
        return "; ".join(f"{error.filename.decode(errors='replace')}:{error.line + 1}:{error.column + 1}: "
                         f"{error.message.decode(errors='replace')}" for error in errors.errors()[:5])
    return "protoc failed"


def _form(files: descriptor_pb2.FileDescriptorSet, main: str) -> str:
    """A digest of the file and its imports from its folder as protoc read them: the main file's own name left out, so the
    same schema registered under another file name has the same form."""
    kept = descriptor_pb2.FileDescriptorSet()
    for proto in files.file:
        if proto.name.startswith(WELL_KNOWN_PREFIX) and proto.name != main:
            continue
        copy = kept.file.add()
        copy.CopyFrom(proto)
        copy.ClearField("source_code_info")
        if proto.name == main:
            copy.ClearField("name")
    return hashlib.sha256(kept.SerializeToString(deterministic=True)).hexdigest()


def _message_names(messages) -> list[str]:
    names = []
    for message in messages:
        if message.GetOptions().map_entry:
            continue  # a map field's entry, which no value is
        names.append(message.full_name)
        names.extend(_message_names(message.nested_types))
    return names
