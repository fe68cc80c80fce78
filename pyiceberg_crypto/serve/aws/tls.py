"""The AWS KMS face's TLS identity: a small CA made once (what clients trust), or your own files.

    tls = FaceTls.load_or_create("/etc/lake/aws-kms-api-tls", names=("kms.lake.internal",))
    tls.ca_file, tls.truststore_file     # PEM for boto3/curl, PKCS#12 (no password) for Java
    tls = FaceTls.from_files("/etc/lake/kms.key", "/etc/lake/kms-chain.pem")
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import uuid
from dataclasses import dataclass
from pathlib import Path

from pyiceberg_crypto.listener.files import check_operator_directory, read_operator_file, write_private_file
from pyiceberg_crypto.listener.tls import server_context

__all__ = ["FaceTls"]


@dataclass
class FaceTls:
    """The face's TLS identity: a small CA (its certificate is what clients trust: ``ca_file`` in
    PEM, ``truststore_file`` as a PKCS#12 truststore for Java) and the server certificate it signed
    for ``localhost``, ``127.0.0.1``, ``::1`` and the names given. The CA's private key is not kept
    (nothing else can be signed with it). Or bring your own: :meth:`from_files`."""

    context: ssl.SSLContext
    ca_file: Path | None
    truststore_file: Path | None

    KEY, CERT, CA, TRUSTSTORE = "aws-kms-api-key.pem", "aws-kms-api-cert.pem", "aws-kms-api-ca.pem", \
        "aws-kms-api-truststore.p12"

    @classmethod
    def load_or_create(cls, directory: str | os.PathLike, names: tuple[str, ...] = ()) -> FaceTls:
        """Keep the identity in ``directory`` (made once, reused across restarts: clients keep
        trusting the same CA). ``names``: more host names / addresses for the certificate."""
        directory = Path(directory)
        check_operator_directory(directory, "TLS")
        key, cert, ca, truststore = (directory / n for n in (cls.KEY, cls.CERT, cls.CA, cls.TRUSTSTORE))
        if not any(os.path.lexists(p) for p in (key, cert, ca)):
            key_pem, cert_pem, ca_pem, truststore_bytes = _make_identity(names)
            write_private_file(key, key_pem)
            write_private_file(cert, cert_pem, mode=0o644)
            write_private_file(ca, ca_pem, mode=0o644)
            write_private_file(truststore, truststore_bytes, mode=0o644)
        identity = cls.from_files(key, cert)
        identity.ca_file, identity.truststore_file = ca, truststore if truststore.exists() else None
        return identity

    @classmethod
    def from_files(cls, key_file: str | os.PathLike, certificate_file: str | os.PathLike) -> FaceTls:
        """Your own key (0600) and certificate chain (PEM), e.g. from the company CA."""
        key_pem = read_operator_file(key_file, "TLS key", private=True)
        cert_pem = read_operator_file(certificate_file, "TLS certificate")
        return cls(server_context(key_pem, cert_pem), None, None)


def _make_identity(names: tuple[str, ...]) -> tuple[bytes, bytes, bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"pyiceberg-crypto AWS KMS face CA {uuid.uuid4().hex[:8]}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    alternative: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for name in ("127.0.0.1", "::1", *names):
        try:
            entry: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(name))
        except ValueError:
            entry = x509.DNSName(name)
        if entry not in alternative:
            alternative.append(entry)
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyiceberg-crypto AWS KMS face")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=3650))
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    truststore = pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"pyiceberg-crypto-aws-kms-face")],
                                                  serialization.NoEncryption())
    return (key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
            server.public_bytes(pem) + ca.public_bytes(pem), ca.public_bytes(pem), truststore)
