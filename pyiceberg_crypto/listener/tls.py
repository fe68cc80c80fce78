"""TLS for a KMS listener on any address but loopback: a self-signed certificate that JVMs pin.

    from pyiceberg_crypto.listener.tls import TlsIdentity

    identity = TlsIdentity.fresh()                          # register_kms: travels with the endpoint
    identity = TlsIdentity.load_or_create(key, cert)        # kms serve: clients pin identity.sha256
    identity.context                                        # the server's ssl.SSLContext

No CA and no host name: the pin (SHA-256 of the DER certificate) is the identity.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyiceberg_crypto._atomic import PUBLIC
from pyiceberg_crypto.listener.files import check_operator_directory, read_operator_file, write_private_file
from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["TLS_HANDSHAKE_TIMEOUT_SECONDS", "TlsIdentity", "server_context"]

#: The TLS handshake of one connection must finish within this (and within the auth deadline).
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class TlsIdentity:
    """The listener's TLS key and self-signed certificate (DER), which JVMs pin.

    :meth:`fresh` makes a throw-away one (``register_kms``: the certificate travels with the
    endpoint); :meth:`load_or_create` keeps one in two files, so that a restarted KMS service keeps
    the pin its clients were configured with.
    """

    context: ssl.SSLContext
    certificate: bytes

    @property
    def sha256(self) -> str:
        """The pin clients are configured with: SHA-256 of the DER certificate, hex."""
        return hashlib.sha256(self.certificate).hexdigest()

    @classmethod
    def fresh(cls) -> TlsIdentity:
        key_pem, cert_pem = _self_signed_pem()
        return cls(server_context(key_pem, cert_pem), _der(cert_pem))

    @classmethod
    def load_or_create(cls, key_file: str | os.PathLike, certificate_file: str | os.PathLike) -> TlsIdentity:
        """Read the key (PEM, must be mode 0600) and certificate, or create both when neither exists.

        Both files and their directories must belong to the running user and not be writable by
        others (:func:`read_operator_file`): a key planted by another user is never adopted."""
        key_path, cert_path = Path(key_file), Path(certificate_file)
        for path in (key_path, cert_path):
            check_operator_directory(path.parent, "TLS")
        if not os.path.lexists(key_path) and not os.path.lexists(cert_path):
            key_pem, cert_pem = _self_signed_pem()
            write_private_file(key_path, key_pem)
            write_private_file(cert_path, cert_pem, mode=PUBLIC)
        key_pem = read_operator_file(key_path, "TLS key", private=True)
        cert_pem = read_operator_file(cert_path, "TLS certificate")
        return cls(server_context(key_pem, cert_pem), _der(cert_pem))


def _self_signed_pem() -> tuple[bytes, bytes]:
    """A fresh EC P-256 key and a self-signed certificate, PEM (no CA, no host name: the pin is the identity)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyiceberg-crypto Python KMS")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, certificate.public_bytes(serialization.Encoding.PEM)


def _der(certificate_pem: bytes) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    return x509.load_pem_x509_certificate(certificate_pem).public_bytes(serialization.Encoding.DER)


def server_context(key_pem: bytes, certificate_pem: bytes) -> ssl.SSLContext:
    """A TLS 1.2+ server context for this key and certificate chain (PEM), for every KMS listener
    (the bridge's callback server, both faces of ``kms serve``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # ssl loads keys only from files: a private directory, removed at once.
    with tempfile.TemporaryDirectory(prefix="pyiceberg-crypto-tls-") as directory:
        key_path, cert_path = os.path.join(directory, "key.pem"), os.path.join(directory, "cert.pem")
        with open(os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
            handle.write(key_pem)
        with open(cert_path, "wb") as handle:
            handle.write(certificate_pem)
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:  # not a key and certificate chain that belong together
            raise InvalidArgumentError(f"the TLS key and certificate cannot be used: {exc.reason or exc}") from None
    return context
