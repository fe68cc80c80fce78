"""A real PyKMIP server process on 127.0.0.1 for the KMIP KMS tests, with mutual TLS.

    with KmipTestServer(tmp_path) as server:            # CA, server and client certificates, sqlite db
        uid = server.create_key("lake-orders")          # an AES-256 key, Name attribute 'lake-orders'
        props = server.client_properties()              # kmip.host/port/client-cert/... for load_kms("kmip")

The server is PyKMIP's own ``pykmip-server`` (``kmip.services.server.server:main``) started with a
generated config file in its own process group, and stopped (SIGTERM, then SIGKILL of the group)
by :meth:`KmipTestServer.close`, also when a test fails. Certificates are made with
``cryptography``: a test CA, a server certificate for ``127.0.0.1`` (serverAuth) and client
certificates (clientAuth: PyKMIP's server refuses a client certificate without that extended key
usage, and takes the client identity from the certificate's common name). :meth:`rogue_client`
makes a client certificate signed by another CA (the server must refuse it).

Keys are created and managed (Activate, Revoke, Destroy) with PyKMIP's ``ProxyKmipClient`` as the
owning client identity: the object's owner is the identity that created it, and PyKMIP's default
operation policy lets only the owner use an object.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pyiceberg_crypto.testing.ports import reserve_port
from tests.testkit import eventually

#: The client identity (certificate common name) the tests' KMS connects as; it owns the keys.
CLIENT_NAME = "lake-writer"


@dataclass(frozen=True)
class ClientFiles:
    """A client certificate, its private key and the CA file that verifies the server."""

    cert: Path
    key: Path
    ca: Path


class _Ca:
    """A throwaway certificate authority writing PEM files into ``directory``."""

    def __init__(self, directory: Path, name: str):
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.path = directory / f"{name}.crt"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool) -> tuple[Path, Path]:
        """A leaf certificate and key for ``name`` (server: SAN 127.0.0.1 + serverAuth; else clientAuth)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self.cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                  else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if server:
            import ipaddress

            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path, key_path = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
        return cert_path, key_path


class KmipTestServer:
    """PyKMIP's server on 127.0.0.1 with a fresh CA, certificates and sqlite database in ``directory``."""

    def __init__(self, directory: Path, *, start_timeout: float = 60.0):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.ca = _Ca(self.directory, "test-ca")
        server_cert, server_key = self.ca.issue("kmip-server", server=True)
        client_cert, client_key = self.ca.issue(CLIENT_NAME, server=False)
        self.client = ClientFiles(client_cert, client_key, self.ca.path)
        self.port = reserve_port()  # below the ephemeral range: no other process is handed it
        self.log = self.directory / "server.log"
        self.config = self.directory / "server.conf"
        self.policies = self.directory / "policies"
        self.policies.mkdir(exist_ok=True)
        # PyKMIP server settings (its docs, "Server > Configuration"): TLS 1.2 suite, client auth
        # required, one sqlite file per server.
        self.config.write_text(
            "[server]\n"
            "hostname=127.0.0.1\n"
            f"port={self.port}\n"
            f"certificate_path={server_cert}\n"
            f"key_path={server_key}\n"
            f"ca_path={self.ca.path}\n"
            "auth_suite=TLS1.2\n"
            f"policy_path={self.policies}\n"
            "enable_tls_client_auth=True\n"
            "logging_level=INFO\n"
            f"database_path={self.directory / 'kmip.sqlite'}\n"
        )
        script = Path(sys.executable).with_name("pykmip-server")
        command = [str(script)] if script.exists() else [sys.executable, "-m", "kmip.services.server.server"]
        self._log_file = self.log.open("ab")
        self.process = subprocess.Popen(
            [*command, "-f", str(self.config), "-l", str(self.log)],
            stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.directory,
        )
        self._stopped = False
        try:
            self._wait_ready(start_timeout)
        except BaseException:
            self.close()
            raise

    # --- lifecycle ----------------------------------------------------------------------------

    def _wait_ready(self, timeout: float) -> None:
        def answering() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"pykmip-server exited with {self.process.returncode} (log: {self.log})")
            with self.admin() as admin:  # any error: not up yet
                admin.locate(maximum_items=1)
            return True

        eventually(answering, timeout, interval=0.2,
                   message=f"pykmip-server to answer on 127.0.0.1:{self.port} (log: {self.log})")

    def pause(self) -> None:
        """SIGSTOP the server: connections are accepted by the kernel but never answered (a hung KMS)."""
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Undo :meth:`pause`."""
        os.killpg(self.process.pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop the server's process group (SIGINT, then SIGKILL after 3 s) and close the log.

        SIGINT: ``pykmip-server``'s accept loop turns it into KeyboardInterrupt and returns at once
        (SIGTERM only ends the loop at the next accept timeout, 10 s)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            os.killpg(self.process.pid, signal.SIGCONT)
            os.kill(self.process.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            self.process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the server's multiprocessing manager too
        except ProcessLookupError:
            pass
        self.process.wait(timeout=10)
        self._log_file.close()

    def __enter__(self) -> KmipTestServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- clients ------------------------------------------------------------------------------

    def client_properties(self, files: ClientFiles | None = None, **extra: str) -> dict[str, str]:
        """``load_kms("kmip", ...)`` properties for this server and ``files`` (default: the owner client)."""
        files = files or self.client
        return {"kmip.host": "127.0.0.1", "kmip.port": str(self.port), "kmip.client-cert": str(files.cert),
                "kmip.client-key": str(files.key), "kmip.ca-cert": str(files.ca), **extra}

    def rogue_client(self) -> ClientFiles:
        """A client certificate with the same common name, signed by a CA the server does not trust."""
        (self.directory / "rogue").mkdir(exist_ok=True)
        rogue = _Ca(self.directory / "rogue", "rogue-ca")
        cert, key = rogue.issue(CLIENT_NAME, server=False)
        return ClientFiles(cert, key, self.ca.path)

    def other_identity(self, name: str = "another-team") -> ClientFiles:
        """A client certificate from the server's own CA for another identity (it owns no key)."""
        cert, key = self.ca.issue(name, server=False)
        return ClientFiles(cert, key, self.ca.path)

    @contextlib.contextmanager
    def admin(self) -> Iterator[Any]:
        """An open PyKMIP ``ProxyKmipClient`` as the owning client identity (``with server.admin() as a``).

        PyKMIP's own client builds ``ssl.SSLContext(PROTOCOL_TLS)`` (a DeprecationWarning on Python
        3.10+) and logs that it found no ``pykmip.conf``; both are silenced here, it is test tooling."""
        from kmip.pie.client import ProxyKmipClient

        for name in ("kmip", "kmip.core.config_helper"):  # the latter sets its own level (INFO)
            logging.getLogger(name).setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            client = ProxyKmipClient(hostname="127.0.0.1", port=self.port, cert=str(self.client.cert),
                                     key=str(self.client.key), ca=str(self.ca.path), config_file=None)
            client.open()
        try:
            yield client
        finally:
            client.close()

    # --- keys ---------------------------------------------------------------------------------

    def create_key(self, name: str, *, length: int = 256) -> str:
        """Create and activate an AES key with Name ``name``; its UID. A second key with the same
        name is a rotation (the KMS wraps with the newest active one)."""
        from kmip.core import enums

        with self.admin() as admin:
            uid = admin.create(enums.CryptographicAlgorithm.AES, length, name=name,
                               cryptographic_usage_mask=[enums.CryptographicUsageMask.ENCRYPT,
                                                         enums.CryptographicUsageMask.DECRYPT])
            admin.activate(uid)
        return uid

    def deactivate(self, uid: str) -> None:
        """Revoke ``uid`` (reason: superseded): its state becomes Deactivated."""
        from kmip.core import enums

        with self.admin() as admin:
            admin.revoke(enums.RevocationReasonCode.CESSATION_OF_OPERATION, uid)

    def destroy(self, uid: str) -> None:
        """Revoke (when active) and Destroy ``uid``."""
        from kmip.core import enums

        with self.admin() as admin:
            state = admin.get_attributes(uid, ["State"])[1][0].attribute_value.value
            if state == enums.State.ACTIVE:
                admin.revoke(enums.RevocationReasonCode.CESSATION_OF_OPERATION, uid)
            admin.destroy(uid)
