"""Read table files from S3 or an S3-compatible store (MinIO, moto) with boto3.

Built from the same catalog properties Iceberg's ``S3FileIO`` uses, so one settings dict serves
both the JVM and the Python verifier; credentials come from the environment (boto3's default
chain: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, a profile, an instance role)::

    from pyiceberg_crypto.io import file_io_for

    io = file_io_for("s3://lake/wh/db.db/t/metadata/00001-....metadata.json",
                     {"s3.endpoint": "http://127.0.0.1:9000", "s3.path-style-access": "true",
                      "client.region": "us-east-1"})
    with io.open(uri) as f:      # seekable; each read is a ranged GET of what is asked
        f.seek(-8, 2); tail = f.read(8)

Needs ``boto3`` (``pip install pyiceberg-crypto[aws]``). Picklable (the client is rebuilt after
unpickling); ``repr`` shows only the endpoint and region.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping
from typing import BinaryIO

from pyiceberg_crypto.errors import TableInputError

__all__ = ["S3FileIO", "S3InputFile"]

SCHEMES = ("s3", "s3a", "s3n")
#: Catalog properties read (the names Iceberg's S3FileIO uses).
PROPERTY_ENDPOINT = "s3.endpoint"
PROPERTY_PATH_STYLE = "s3.path-style-access"
PROPERTY_REGION = "client.region"
#: Bytes fetched ahead per ranged GET when a caller reads small pieces.
READ_BUFFER = 1 << 20


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``; raises TableInputError for other URIs."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in SCHEMES:
        raise TableInputError(f"not an S3 URI ({'/'.join(SCHEMES)}://bucket/key): {uri!r}")
    bucket, _, key = rest.partition("/")
    if not bucket or not key:
        raise TableInputError(f"S3 URI needs a bucket and a key: {uri!r}")
    return bucket, key


class S3FileIO:
    """Read-only :class:`~pyiceberg_crypto.io.FileIO` over S3 (see the module docstring)."""

    def __init__(
        self, endpoint: str | None = None, *, region: str | None = None, path_style_access: bool = False
    ) -> None:
        self.endpoint = endpoint
        self.region = region
        self.path_style_access = path_style_access
        self._client = None
        self._lock = threading.Lock()

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> "S3FileIO":
        """From Iceberg catalog properties (``s3.endpoint``, ``s3.path-style-access``, ``client.region``)."""
        path_style = str(properties.get(PROPERTY_PATH_STYLE, "false")).strip().lower() == "true"
        return cls(properties.get(PROPERTY_ENDPOINT), region=properties.get(PROPERTY_REGION),
                   path_style_access=path_style)

    @property
    def client(self):
        """The boto3 client, created on first use (credentials from the environment)."""
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                style = "path" if self.path_style_access else "auto"
                self._client = boto3.session.Session().client(
                    "s3", endpoint_url=self.endpoint, region_name=self.region,
                    config=Config(s3={"addressing_style": style}, retries={"max_attempts": 5, "mode": "standard"}),
                )
            return self._client

    def open(self, uri: str) -> BinaryIO:
        """A seekable, buffered binary file; raises FileNotFoundError when the object is missing."""
        raw = S3InputFile(self, uri, self.size(uri))
        return io.BufferedReader(raw, buffer_size=READ_BUFFER)

    def size(self, uri: str) -> int:
        return self._head(uri)["ContentLength"]

    def exists(self, uri: str) -> bool:
        try:
            self._head(uri)
        except FileNotFoundError:
            return False
        return True

    def list_files(self, uri: str) -> list[str]:
        """Every object under the prefix ``uri`` (a directory: ``/`` added), as ``s3://`` URIs."""
        scheme = uri.partition("://")[0]
        bucket, key = split_uri(uri.rstrip("/") + "/")
        found = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
                found += [f"{scheme}://{bucket}/{item['Key']}" for item in page.get("Contents", ())]
        except self._client_error() as exc:
            raise _translate(exc, uri, "list") from None
        return sorted(found)

    def read_range(self, uri: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``uri`` from ``start`` (one ranged GET)."""
        if length <= 0:
            return b""
        bucket, key = split_uri(uri)
        try:
            response = self.client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
        except self._client_error() as exc:
            raise _translate(exc, uri, "read") from None
        return response["Body"].read()

    def _head(self, uri: str) -> dict:
        bucket, key = split_uri(uri)
        try:
            return self.client.head_object(Bucket=bucket, Key=key)
        except self._client_error() as exc:
            raise _translate(exc, uri, "stat") from None

    @staticmethod
    def _client_error():
        from botocore.exceptions import ClientError

        return ClientError

    def __getstate__(self) -> dict:
        return {"endpoint": self.endpoint, "region": self.region, "path_style_access": self.path_style_access}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["endpoint"], region=state["region"], path_style_access=state["path_style_access"])

    def __repr__(self) -> str:
        return f"S3FileIO(endpoint={self.endpoint!r}, region={self.region!r}, path_style_access={self.path_style_access})"


class S3InputFile(io.RawIOBase):
    """A seekable raw file over one S3 object: each ``readinto`` is one ranged GET."""

    def __init__(self, file_io: S3FileIO, uri: str, length: int) -> None:
        super().__init__()
        self.name = uri
        self._io = file_io
        self._length = length
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._length}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position in {self.name}")
        self._position = base + offset
        return self._position

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), self._length - self._position)
        if wanted <= 0:
            return 0
        data = self._io.read_range(self.name, self._position, wanted)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def readall(self) -> bytes:
        data = self._io.read_range(self.name, self._position, self._length - self._position)
        self._position += len(data)
        return data


def _translate(exc, uri: str, operation: str) -> OSError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket") or status == 404:
        return FileNotFoundError(f"{uri}: no such object")
    if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch") or status == 403:
        return PermissionError(f"{uri}: access denied ({operation}, {code or status})")
    return OSError(f"{uri}: S3 {operation} failed ({code or status})")


def file_io_from_properties(properties: Mapping[str, str]) -> S3FileIO:
    """Factory registered in :data:`pyiceberg_crypto.io.SCHEMES` for s3/s3a/s3n."""
    return S3FileIO.from_properties(properties)
