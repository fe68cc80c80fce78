"""A local stand-in of the Azure Key Vault keys REST API (the documented wire format), HTTPS on 127.0.0.1.

Implements only what :mod:`pyiceberg_crypto.kms.azure` uses, as documented:

- ``GET {vault}/keys/{name}[/{version}]?api-version=...`` -> KeyBundle (JWK ``kid``/``kty``/
  ``key_ops``/``n``/``e``, ``attributes.enabled``)
  (https://learn.microsoft.com/rest/api/keyvault/keys/get-key/get-key);
- ``POST {vault}/keys/{name}/{version}/wrapkey`` and ``/unwrapkey`` with ``{"alg", "value"}``
  (base64url) -> ``{"kid", "value"}``
  (https://learn.microsoft.com/rest/api/keyvault/keys/wrap-key/wrap-key, .../unwrap-key/unwrap-key),
  RSA-OAEP-256 for ``RSA`` keys and A256KW (RFC 3394) for Managed HSM ``oct-HSM`` keys;
- the bearer challenge: a request without a token gets 401 with
  ``WWW-Authenticate: Bearer authorization="https://login.microsoftonline.com/<tenant>",
  resource="https://vault.azure.net"``
  (https://learn.microsoft.com/azure/key-vault/general/authentication-requests-and-responses#authentication);
- errors as ``{"error": {"code", "message", "innererror"}}`` (same page, "Error responses"); RBAC
  per key: "Key Vault Crypto Service Encryption User" allows get, wrapKey, unwrapKey
  (https://learn.microsoft.com/azure/key-vault/general/rbac-guide#azure-built-in-roles-for-key-vault-data-plane-operations),
  "Key Vault Reader" get only.

TLS with a self-signed certificate for 127.0.0.1 (``ca_cert`` is its PEM): the Azure SDK refuses
bearer tokens over plain HTTP. Not the real service: it is how the provider is tested
(docs/kms/azure.md).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import secrets
import ssl
import tempfile
import threading
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap
from cryptography.x509.oid import NameOID

from tests.kms.http_standin import HttpStandIn

CRYPTO_USER = "Key Vault Crypto Service Encryption User"
READER = "Key Vault Reader"
TENANT = "72f988bf-0000-0000-0000-000000000000"
_OAEP = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "vault.pem", directory / "vault.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class KeyVaultStandIn(HttpStandIn):
    """``vault_url`` = ``https://127.0.0.1:PORT``; trust ``ca_cert`` (``azure.ca-cert``)."""

    def __init__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="kv-standin-")
        cert, key = _self_signed(Path(self._dir.name))
        self.ca_cert = str(cert)
        self.keys: dict[str, dict] = {}
        self.tokens: dict[str, str] = {}  # bearer token -> principal
        self.roles: dict[str, dict[str, set[str]]] = {}  # key name -> principal -> roles
        self.delay = 0.0
        self.calls: list[str] = []
        self.lock = threading.Lock()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.start(context)
        self.vault_url = self.base_url

    def close(self):
        super().close()
        self._dir.cleanup()

    # --- admin (what az keyvault key create / rotate / set-attributes and role assignments do) ---

    def create_key(self, name: str, kty: str = "RSA") -> str:
        with self.lock:
            self.keys[name] = {"kty": kty, "versions": {}, "order": []}
            self.roles.setdefault(name, {})
        self.rotate(name)
        return f"{self.vault_url}/keys/{name}"

    def rotate(self, name: str) -> str:
        """A new current version (``az keyvault key rotate``); returns its version id."""
        with self.lock:
            key = self.keys[name]
            version = secrets.token_hex(16)
            material = (rsa.generate_private_key(public_exponent=65537, key_size=2048) if key["kty"] == "RSA"
                        else os.urandom(32))
            key["versions"][version] = {"material": material, "enabled": True}
            key["order"].append(version)
            return version

    def set_enabled(self, name: str, version: str, enabled: bool):
        with self.lock:
            self.keys[name]["versions"][version]["enabled"] = enabled

    def principal(self, name: str, roles: tuple[str, ...] = (CRYPTO_USER,), keys: tuple[str, ...] | None = None) -> str:
        """A bearer token for principal ``name`` holding ``roles`` on ``keys`` (all when None)."""
        token = "eyJ0eXAiOiJKV1QifQ.standin." + secrets.token_urlsafe(24)
        with self.lock:
            self.tokens[token] = name
            for key in keys or list(self.keys):
                self.roles.setdefault(key, {})[name] = set(roles)
        return token

    # --- HTTP --------------------------------------------------------------------------------

    def _handle(self, h, method):
        if self.delay:
            time.sleep(self.delay)  # the behaviour under test: a server slower than the client's timeout
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        path, _, query = h.path.partition("?")
        if "api-version=" not in query:
            return self._error(h, 400, "BadParameter", "The request URI contains an invalid API version.")
        auth = h.headers.get("Authorization", "")
        principal = self.tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if principal is None:
            code = "Unauthorized"
            message = "AKV10000: Request is missing a Bearer or PoP token." if not auth else \
                "AKV10032: Invalid issuer. Expected one of https://sts.windows.net/..., found none."
            return self._error(h, 401, code, message, challenge=True)
        parts = path.strip("/").split("/")
        if len(parts) < 2 or parts[0] != "keys":
            return self._error(h, 404, "NotFound", "The requested resource was not found.")
        name, version, operation = parts[1], (parts[2] if len(parts) > 2 else ""), (parts[3] if len(parts) > 3 else "")
        with self.lock:
            self.calls.append(f"{method} {'/'.join(parts)}")
            key = self.keys.get(name)
            if key is None or (version and version not in key["versions"]):
                return self._error(h, 404, "KeyNotFound", f"A key with (name/id) {name} was not found in this key "
                                                          "vault. If you recently deleted this key you may be able to "
                                                          "recover it using the correct recovery command.")
            version = version or key["order"][-1]
            entry = key["versions"][version]
            roles = self.roles.get(name, {}).get(principal, set())
            action = {"wrapkey": "wrap", "unwrapkey": "unwrap"}.get(operation, "read")
            if not (CRYPTO_USER in roles or (action == "read" and READER in roles)):
                return self._error(h, 403, "Forbidden", "Caller is not authorized to perform action on resource. "
                                   f"Action: 'Microsoft.KeyVault/vaults/keys/{action}/action'", inner="ForbiddenByRbac")
            kid = f"{self.vault_url}/keys/{name}/{version}"
            if method == "GET" and not operation:
                return self._reply(h, 200, self._bundle(kid, key["kty"], entry))
            if method == "POST" and operation in ("wrapkey", "unwrapkey"):
                if not entry["enabled"]:
                    op = "wrapKey" if operation == "wrapkey" else "unwrapKey"
                    return self._error(h, 403, "Forbidden", f"Operation {op} is not allowed on a disabled key.",
                                       inner="KeyDisabled")
                try:
                    body = json.loads(raw)
                    value = _unb64url(body["value"])
                except (ValueError, KeyError):
                    return self._error(h, 400, "BadParameter", "Property value is required.")
                result = self._crypt(key["kty"], entry["material"], body.get("alg"), operation, value)
                if result is None:
                    return self._error(h, 400, "BadParameter", "The parameter is incorrect.")
                return self._reply(h, 200, {"kid": kid, "value": _b64url(result)})
        return self._error(h, 405, "BadParameter", "Unsupported operation.")

    @staticmethod
    def _bundle(kid, kty, entry):
        jwk = {"kid": kid, "kty": kty, "key_ops": ["wrapKey", "unwrapKey", "encrypt", "decrypt"]}
        if kty == "RSA":
            numbers = entry["material"].public_key().public_numbers()
            jwk["n"] = _b64url(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big"))
            jwk["e"] = _b64url(numbers.e.to_bytes(3, "big"))
        now = int(time.time())
        return {"key": jwk, "attributes": {"enabled": entry["enabled"], "created": now, "updated": now,
                                           "recoveryLevel": "Recoverable+Purgeable", "recoverableDays": 90}}

    @staticmethod
    def _crypt(kty, material, alg, operation, value):
        try:
            if kty == "RSA" and alg == "RSA-OAEP-256":
                if operation == "wrapkey":
                    return material.public_key().encrypt(value, _OAEP)
                return material.decrypt(value, _OAEP)
            if kty == "oct-HSM" and alg == "A256KW":
                return aes_key_wrap(material, value) if operation == "wrapkey" else aes_key_unwrap(material, value)
        except (ValueError, InvalidUnwrap):
            return None
        return None

    def _error(self, h, status, code, message, inner=None, challenge=False):
        error = {"code": code, "message": message}
        if inner:
            error["innererror"] = {"code": inner}
        headers = {}
        if challenge:
            headers["WWW-Authenticate"] = (f'Bearer authorization="https://login.microsoftonline.com/{TENANT}", '
                                           'resource="https://vault.azure.net"')
        return self._reply(h, status, {"error": error}, headers)

    @staticmethod
    def _reply(h, status, payload, headers=None):
        data = json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json; charset=utf-8")
            h.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                h.send_header(name, value)
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client gave up (the slow-server test)
