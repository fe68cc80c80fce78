"""A ``kms serve --aws-kms-api`` process for the tests, and boto3 clients for it.

    face = FaceProcess.start(tmp_path, keystore)        # real process, TLS, loopback, free ports
    face.client().encrypt(KeyId="k1", Plaintext=b"...")  # boto3, trusting the face's CA
    face.stop()
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.serve.service_process import ServiceProcess
from tests.testkit import eventually

ACCESS_KEY_ID = "AKIDLAKETRINO0000001"
SECRET = "trino-secret-0123456789abcdef"
REGION = "eu-west-1"
ACCOUNT = "000000000000"
CREDENTIALS = f"[trino]\naws_access_key_id = {ACCESS_KEY_ID}\naws_secret_access_key = {SECRET}\n"


def write_credentials(path: Path, text: str = CREDENTIALS) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@dataclass
class FaceProcess:
    service: ServiceProcess
    endpoint: str
    ca_file: Path | None
    truststore: Path | None
    credentials: Path

    @classmethod
    def start(cls, workdir: Path, keystore: Path | None, *, extra: list[str] = (), plaintext: bool = False,
              metrics: bool = False, kms: str = "keystore", properties: dict[str, str] | None = None,
              credentials_text: str = CREDENTIALS) -> FaceProcess:
        workdir.mkdir(parents=True, exist_ok=True)
        workdir.chmod(0o700)
        credentials = write_credentials(workdir / "aws-kms-api.credentials", credentials_text)
        args = ["--aws-kms-api", "127.0.0.1:0", "--aws-kms-api-credentials", str(credentials),
                "--aws-kms-api-region", REGION, *(["--aws-kms-api-plaintext"] if plaintext else []),
                *(["--metrics", "127.0.0.1:0"] if metrics else []), *extra]
        service = ServiceProcess.start(workdir / "service", keystore, extra=args, kms=kms, properties=properties)
        found = eventually(lambda: re.search(r"AWS KMS API: (https?://127\.0\.0\.1:\d+)", service.log()), 30,
                           message=lambda: f"the face to say where it listens:\n{service.log()}")
        tls_dir = service.token_file.parent / "aws-kms-api-tls"
        return cls(service, found.group(1), None if plaintext else tls_dir / "aws-kms-api-ca.pem",
                   None if plaintext else tls_dir / "aws-kms-api-truststore.p12", credentials)

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.service.metrics_port}/metrics"

    def client(self, *, secret: str = SECRET, access_key_id: str = ACCESS_KEY_ID, region: str = REGION,
               retries: int = 1):
        import boto3
        from botocore.config import Config

        return boto3.client("kms", region_name=region, endpoint_url=self.endpoint, aws_access_key_id=access_key_id,
                            aws_secret_access_key=secret, verify=str(self.ca_file) if self.ca_file else False,
                            config=Config(retries={"max_attempts": retries, "mode": "standard"},
                                          connect_timeout=10, read_timeout=30))

    def stop(self) -> int:
        return self.service.stop()
