"""The file-system layer: one interface over a local `LAKE_ROOT` and `s3://bucket/prefix`.
Writes are all-or-nothing for readers.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO
from urllib.parse import urlparse

import pyarrow.fs as pafs
from botocore.exceptions import BotoCoreError, ClientError


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the lake root
    size: int
    modified: datetime | None = None  # when it was last written, where the file system says


def s3_filesystem_from_env(**options) -> pafs.S3FileSystem:
    """An S3 client configured from the standard AWS_* variables, `AWS_ENDPOINT_URL` honoured."""
    return pafs.S3FileSystem(
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=8), connect_timeout=5, request_timeout=60,
        **s3_options_from_env(), **options,
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
        """A stream whose content becomes visible at `relative` only if the block completes: locally through a hidden
        temporary file and a rename, on S3 because an object appears only when its upload completes."""
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

    def write_marker(self, relative: str) -> None:
        """An empty object whose name is all it says: written in one request, as it has no content to see half of."""
        if self.is_s3:
            with self._marker_filesystem.open_output_stream(self.full_path(relative)):
                return
        target = self.full_path(relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "wb").close()

    @functools.cached_property
    def _marker_filesystem(self) -> pafs.S3FileSystem:
        # Opened late, a stream too small for a multipart upload is one PUT; the lake's own client starts a
        # multipart upload for every stream.
        return s3_filesystem_from_env(allow_delayed_open=True)

    def create_exclusive(self, relative: str, data: bytes) -> bool:
        """Writes the object only if none of that name exists, in one step no other writer can interleave with (a
        local file opened to be created, an S3 PUT with `If-None-Match: *`); False when one exists."""
        if not self.is_s3:
            target = self.full_path(relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(data)
            return True
        bucket, _, key = self.full_path(relative).partition("/")
        try:
            self._s3_client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise OSError(f"When creating s3://{bucket}/{key}: {error}") from None
        return True

    def read_bytes(self, relative: str) -> bytes | None:
        try:
            with self._fs.open_input_stream(self.full_path(relative)) as stream:
                return stream.read()
        except FileNotFoundError:
            return None

    def read_listed(self, relative: str) -> bytes:
        """A file found by a listing: gone since is an error naming it, not an empty read."""
        data = self.read_bytes(relative)
        if data is None:
            raise FileNotFoundError(f"{self.uri(relative)} was listed and is gone: removed by a concurrent run?")
        return data

    def exists(self, relative: str) -> bool:
        return self._fs.get_file_info(self.full_path(relative)).type == pafs.FileType.File

    def delete(self, relative: str) -> bool:
        try:
            self._fs.delete_file(self.full_path(relative))
            return True
        except FileNotFoundError:
            return False

    def delete_folder(self, relative: str) -> None:
        """Deletes a folder and everything below it (on S3, every key under its prefix, in batched requests)."""
        try:
            self._fs.delete_dir(self.full_path(relative))
        except FileNotFoundError:
            pass

    def list_names(self, directory: str, prefix: str = "", start_after: str = "", limit: int | None = None) -> list[str]:
        """The names of the files directly in `directory` that start with `prefix` and sort after `start_after`, in
        order, at most `limit` of them; hidden temporaries excluded. On S3 this costs one request a thousand names
        and never more than `limit` needs, so a caller asking for the few names after a point pays for those only:
        an S3 listing can start after a key, where pyarrow's always starts at the beginning."""
        return self._list_level(directory, prefix, start_after, limit, folders=False)

    def list_folders(self, directory: str, prefix: str = "") -> list[str]:
        """The names of the folders directly in `directory` that start with `prefix`, in order: one level of a tree
        (the dates of a table, say) without listing the files below it."""
        return self._list_level(directory, prefix, "", None, folders=True)

    def _list_level(self, directory: str, prefix: str, start_after: str, limit: int | None, folders: bool) -> list[str]:
        if not self.is_s3:
            try:
                names = sorted(entry.name for entry in os.scandir(self.full_path(directory)) if entry.is_dir() == folders)
            except FileNotFoundError:
                return []
            found = [n for n in names if n.startswith(prefix) and n > start_after and not n.startswith(".")]
            return found[:limit] if limit is not None else found
        bucket, _, key_directory = self.full_path(directory).partition("/")
        base = f"{key_directory}/" if key_directory else ""
        request = {"Bucket": bucket, "Prefix": base + prefix, "Delimiter": "/"}
        if start_after:
            request["StartAfter"] = base + start_after
        try:
            return self._list_s3_level(request, base, limit, folders)
        except (BotoCoreError, ClientError) as error:  # an S3 failure reads as pyarrow's do: an OSError naming where
            raise OSError(f"When listing s3://{bucket}/{request['Prefix']}: {error}") from None

    def _list_s3_level(self, request: dict, base: str, limit: int | None, folders: bool) -> list[str]:
        found: list[str] = []
        for page in self._s3_client.get_paginator("list_objects_v2").paginate(
                **request, PaginationConfig={"PageSize": min(limit or 1000, 1000)}):
            if folders:
                listed = [item["Prefix"][len(base):].rstrip("/") for item in page.get("CommonPrefixes", [])]
            else:
                listed = [item["Key"][len(base):] for item in page.get("Contents", [])]
            found += [name for name in listed if not name.startswith(".")]
            if limit is not None and len(found) >= limit:
                return found[:limit]
        return found

    @functools.cached_property
    def _s3_client(self):
        import boto3
        from botocore.config import Config

        options = s3_options_from_env()
        endpoint = f"{options['scheme']}://{options['endpoint_override']}" if "endpoint_override" in options else None
        return boto3.client(
            "s3", endpoint_url=endpoint, region_name=options.get("region"), aws_access_key_id=options.get("access_key"),
            aws_secret_access_key=options.get("secret_key"), aws_session_token=options.get("session_token"),
            config=Config(retries={"mode": "standard", "max_attempts": 8}, s3={"addressing_style": "path"}),
        )

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
            found.append(StoredFile(relative, info.size, info.mtime))
        return sorted(found, key=lambda f: f.path)
