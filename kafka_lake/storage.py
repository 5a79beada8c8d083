"""The file-system layer: one interface over a local `LAKE_ROOT` and `s3://bucket/prefix`.

Writes are all-or-nothing for readers: locally through a hidden temporary file and a rename,
on S3 because an object appears only when its upload completes.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from dataclasses import dataclass
from typing import BinaryIO, Iterator
from urllib.parse import urlparse

import pyarrow.fs as pafs


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the lake root
    size: int


def s3_filesystem_from_env() -> pafs.S3FileSystem:
    """An S3 client configured from the standard AWS_* variables, `AWS_ENDPOINT_URL` honoured."""
    return pafs.S3FileSystem(
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=8), connect_timeout=5, request_timeout=60,
        **s3_options_from_env(),
    )


def s3_options_from_env() -> dict:
    """Endpoint, scheme, region and credentials of the lake's S3, from the standard AWS_* variables: what every S3
    client of the platform (pyarrow's, DuckDB's) is given."""
    options: dict = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parsed = urlparse(endpoint)
        options["endpoint_override"] = parsed.netloc or parsed.path
        options["scheme"] = parsed.scheme or "https"
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        options["access_key"] = os.environ["AWS_ACCESS_KEY_ID"]
        options["secret_key"] = os.environ["AWS_SECRET_ACCESS_KEY"]
        if os.environ.get("AWS_SESSION_TOKEN"):
            options["session_token"] = os.environ["AWS_SESSION_TOKEN"]
    return options


class LakeStorage:
    """Files under the lake root, addressed by paths relative to it."""

    def __init__(self, root: str):
        self.root = root.rstrip("/")
        if self.root.startswith("s3://"):
            self.is_s3 = True
            self._base = self.root[len("s3://"):]
            self._fs: pafs.FileSystem = s3_filesystem_from_env()
        elif "://" in self.root:
            raise ValueError(f"LAKE_ROOT {root!r}: only a local path or s3://bucket/prefix is supported")
        else:
            self.is_s3 = False
            self._base = os.path.abspath(self.root)
            self.root = self._base  # absolute, so Spark tasks in other working directories agree
            self._fs = pafs.LocalFileSystem()

    def __reduce__(self):  # shipped to Spark tasks as its root; the client is rebuilt there
        return (LakeStorage, (self.root,))

    def __repr__(self) -> str:
        return f"LakeStorage({self.root!r})"

    @property
    def filesystem(self) -> pafs.FileSystem:
        return self._fs

    def full_path(self, relative: str) -> str:
        """The path the underlying file system (and pyarrow readers) understand."""
        return f"{self._base}/{relative}" if relative else self._base

    def uri(self, relative: str) -> str:
        return f"s3://{self.full_path(relative)}" if self.is_s3 else self.full_path(relative)

    @contextlib.contextmanager
    def open_output(self, relative: str) -> Iterator[BinaryIO]:
        """A stream whose content becomes visible at `relative` only if the block completes."""
        target = self.full_path(relative)
        directory, name = target.rsplit("/", 1)
        temporary = f"{directory}/.{name}.{uuid.uuid4().hex}.tmp"
        if self.is_s3:
            # pyarrow cannot abort an S3 upload: a stream uploads what it holds once closed, or collected. So the
            # object is written under a temporary key and copied to its name (one atomic server-side copy) only
            # when complete; an aborted one is removed from its temporary key. A partial object under the final
            # name could replace the complete one of a concurrent run of the same slice.
            stream = self._fs.open_output_stream(temporary)
            try:
                yield stream
            except BaseException:
                with contextlib.suppress(Exception):
                    stream.close()
                    self._fs.delete_file(temporary)
                raise
            stream.close()
            self._fs.move(temporary, target)
            return
        self._fs.create_dir(directory, recursive=True)
        try:
            with self._fs.open_output_stream(temporary) as stream:
                yield stream
            self._fs.move(temporary, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError, OSError):
                self._fs.delete_file(temporary)
            raise

    def write_bytes(self, relative: str, data: bytes) -> None:
        with self.open_output(relative) as stream:
            stream.write(data)

    def read_bytes(self, relative: str) -> bytes | None:
        try:
            with self._fs.open_input_stream(self.full_path(relative)) as stream:
                return stream.read()
        except FileNotFoundError:
            return None

    def exists(self, relative: str) -> bool:
        return self._fs.get_file_info(self.full_path(relative)).type == pafs.FileType.File

    def delete(self, relative: str) -> bool:
        try:
            self._fs.delete_file(self.full_path(relative))
            return True
        except FileNotFoundError:
            return False

    def list_files(self, prefix: str) -> list[StoredFile]:
        """Every file below `prefix`, recursively; hidden temporaries excluded."""
        selector = pafs.FileSelector(self.full_path(prefix), recursive=True, allow_not_found=True)
        base = len(self._base) + 1
        found = []
        for info in self._fs.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            relative = info.path[base:]
            if relative.rsplit("/", 1)[-1].startswith("."):
                continue
            found.append(StoredFile(relative, info.size))
        return sorted(found, key=lambda f: f.path)
