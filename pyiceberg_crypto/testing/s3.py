"""An S3-compatible server on 127.0.0.1 (moto in server mode, a real HTTP S3 API) with a bucket.

For tests, demos and trying the package without cloud credentials::

    from pyiceberg_crypto import config
    from pyiceberg_crypto.testing.s3 import S3Server

    with S3Server("/tmp/s3", bucket="lake") as s3:
        os.environ.update(s3.environment())        # dummy credentials + region, for Spark's JVM
        settings = config.spark_settings(
            "lake", warehouse=s3.warehouse("wh"), metastore_uri=..., s3=s3.catalog_properties())

Credentials are generated per server (moto accepts any) and only ever passed through the
environment (:meth:`environment`); they never appear in ``repr``, logs or settings. Objects live
in the server's memory: they are gone when it stops. The log is ``<directory>/s3-server.log``.
"""

from __future__ import annotations

import os
import secrets
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyiceberg_crypto.testing._process import LOOPBACK, ServiceError, ServiceProcess, port_open
from pyiceberg_crypto.testing.ports import reserve_port

DEFAULT_REGION = "us-east-1"


class S3Server(ServiceProcess):
    """moto's S3 API in a child process on ``host:port``, with ``bucket`` created once ready.

    Args:
        directory: where the log goes.
        bucket: bucket created at start (``None`` for none).
        host: address to bind (loopback by default).
        port: TCP port; 0 picks a free one.
        region: region the clients use (``client.region`` / ``AWS_REGION``).
    """

    name = "S3 server"

    def __init__(
        self,
        directory: str | Path,
        *,
        bucket: str | None = "warehouse",
        host: str = LOOPBACK,
        port: int = 0,
        region: str = DEFAULT_REGION,
        startup_timeout: float = 60.0,
    ) -> None:
        super().__init__(directory, startup_timeout=startup_timeout)
        self.bucket = bucket
        self.host = host
        self.port = port or reserve_port(host)
        self._port_picked = not port  # picked here: another is tried if it turns out taken
        self.region = region
        # Dummy, per-server credentials: moto checks none, but every client needs some.
        self._access_key = "moto-" + secrets.token_hex(8)
        self._secret_key = secrets.token_urlsafe(30)

    @property
    def endpoint(self) -> str:
        """``http://host:port``, the ``s3.endpoint`` / ``endpoint_url`` of clients."""
        host = LOOPBACK if self.host == "0.0.0.0" else self.host
        return f"http://{host}:{self.port}"

    def warehouse(self, prefix: str = "warehouse") -> str:
        """``s3://<bucket>/<prefix>``: a warehouse location in the server's bucket."""
        if not self.bucket:
            raise ServiceError("this S3 server has no bucket")
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def catalog_properties(self) -> dict[str, str]:
        """Iceberg catalog properties for this server (``s3.endpoint``, path-style, region); no secrets."""
        return {"s3.endpoint": self.endpoint, "s3.path-style-access": "true", "client.region": self.region}

    def environment(self) -> dict[str, str]:
        """The environment variables clients read credentials and region from (contains secrets:
        pass it to ``os.environ`` or a child process, never print it)."""
        return {
            "AWS_ACCESS_KEY_ID": self._access_key,
            "AWS_SECRET_ACCESS_KEY": self._secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self):
        """A boto3 S3 client for this server (path-style addressing)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self._access_key,
            aws_secret_access_key=self._secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
        )

    def start(self) -> "S3Server":
        import importlib.util

        if importlib.util.find_spec("moto") is None or importlib.util.find_spec("boto3") is None:
            raise ServiceError("the S3 server needs moto and boto3: pip install 'pyiceberg-crypto[testing]'")
        super().start()
        if self.bucket:
            self.client().create_bucket(Bucket=self.bucket)
        return self

    def _command(self) -> Sequence[str]:
        return [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)]

    def _environment(self) -> Mapping[str, str]:
        # No credentials of the caller's real AWS account in the server's environment.
        return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

    def _is_ready(self) -> bool:
        """An HTTP answer from the server (an open port alone could be someone else's socket)."""
        if not port_open(LOOPBACK if self.host == "0.0.0.0" else self.host, self.port):
            return False
        try:
            direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an HTTP proxy
            with direct.open(f"{self.endpoint}/moto-api/", timeout=2) as response:
                return response.status < 500
        except urllib.error.HTTPError as exc:
            return exc.code < 500
        except OSError:
            return False

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"S3Server(endpoint={self.endpoint!r}, bucket={self.bucket!r}, {state})"
