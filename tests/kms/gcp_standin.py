"""A local stand-in of the Google Cloud KMS v1 REST API (the documented wire format), on 127.0.0.1.

Implements only what :mod:`pyiceberg_crypto.kms.gcp` uses, as documented:

- ``POST /v1/{name=projects/*/locations/*/keyRings/*/cryptoKeys/**}:encrypt`` and ``:decrypt``
  (https://cloud.google.com/kms/docs/reference/rest/v1/projects.locations.keyRings.cryptoKeys/encrypt,
  .../decrypt), with the CRC32C fields of
  https://cloud.google.com/kms/docs/data-integrity-guidelines (int64 as JSON strings, bytes base64);
- ``GET /v1/{name=projects/*/locations/*/keyRings/*/cryptoKeys/*}`` (.../cryptoKeys/get): the
  CryptoKey with its ``primary`` CryptoKeyVersion and its ``state``
  (https://cloud.google.com/kms/docs/reference/rest/v1/projects.locations.keyRings.cryptoKeys.cryptoKeyVersions#CryptoKeyVersionState);
- errors as ``google.rpc.Status`` JSON ``{"error": {"code", "message", "status"}}``
  (https://cloud.google.com/apis/design/errors#http_mapping);
- OAuth 2.0 bearer tokens: a service account's self-signed JWT (RS256, checked against the
  account's public key), or an access token from ``POST /token`` (the JWT-bearer grant,
  https://developers.google.com/identity/protocols/oauth2/service-account#httprest); IAM per key:
  ``roles/cloudkms.cryptoKeyEncrypterDecrypter`` for encrypt/decrypt, ``cloudkms.cryptoKeys.get``
  for get.

Ciphertexts are ``version id (4, big-endian) || nonce (12) || AES-256-GCM(plaintext, aad)``:
opaque to the client, like Cloud KMS's, and a wrong key, AAD or version fails for real. Not the
real service: it is how the provider is tested (docs/kms/gcp.md).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import struct
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto.kms._crc32c import crc32c

from tests.kms.http_standin import HttpStandIn

ENCRYPTER_DECRYPTER = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
VIEWER = "roles/cloudkms.viewer"
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND"}


def _b64url(data: bytes) -> bytes:
    return base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4))


class CloudKmsStandIn(HttpStandIn):
    """``address`` = ``http://127.0.0.1:PORT`` (set it as ``gcp.endpoint``)."""

    def __init__(self, project: str = "lake-project", location: str = "europe-west1", key_ring: str = "lake"):
        self.parent = f"projects/{project}/locations/{location}/keyRings/{key_ring}"
        self.keys: dict[str, dict] = {}
        self.accounts: dict[str, rsa.RSAPublicKey] = {}  # service account email -> public key
        self.iam: dict[str, dict[str, set[str]]] = {}  # CryptoKey name -> member -> roles
        self.access_tokens: dict[str, str] = {}  # token -> email
        self.delay = 0.0
        self.unauthenticated = False  # reject every credential (a revoked or deleted account)
        self.corrupt = False  # flip a bit of the ciphertext / plaintext in replies (a damaged network path)
        self.drops_checksums = False  # as if the *_crc32c request fields never arrived (a proxy dropped them)
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.start()
        self.address = self.base_url

    # --- admin (what gcloud kms keys create / versions create|disable|destroy and IAM bindings do) ---

    def create_key(self, name: str) -> str:
        full = f"{self.parent}/cryptoKeys/{name}"
        with self.lock:
            self.keys[full] = {"versions": {1: {"key": os.urandom(32), "state": "ENABLED"}}, "primary": 1}
            self.iam.setdefault(full, {})
        return full

    def rotate(self, full: str) -> int:
        """A new version that becomes primary (``gcloud kms keys versions create --primary``)."""
        with self.lock:
            key = self.keys[full]
            version = max(key["versions"]) + 1
            key["versions"][version] = {"key": os.urandom(32), "state": "ENABLED"}
            key["primary"] = version
            return version

    def set_state(self, full: str, version: int, state: str):
        """``ENABLED``, ``DISABLED`` or ``DESTROYED`` (destroy drops the key material)."""
        with self.lock:
            entry = self.keys[full]["versions"][version]
            entry["state"] = state
            if state == "DESTROYED":
                entry["key"] = None

    def service_account(self, directory: Path, email: str = "lake-writer@lake-project.iam.gserviceaccount.com",
                        roles: tuple[str, ...] = (ENCRYPTER_DECRYPTER, VIEWER), key: str | None = None) -> Path:
        """A service account key file (JSON, as the console makes it) whose ``token_uri`` is this
        stand-in; the account gets ``roles`` on CryptoKey ``key`` (all keys when None)."""
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        with self.lock:
            self.accounts[email] = private.public_key()
            for name in ([key] if key else list(self.keys)):
                self.iam.setdefault(name, {})[email] = set(roles)
        path = directory / f"{email.split('@')[0]}.json"
        path.write_text(json.dumps({
            "type": "service_account", "project_id": self.parent.split("/")[1], "private_key_id": secrets.token_hex(8),
            "private_key": private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()).decode(),
            "client_email": email, "client_id": str(secrets.randbits(60)),
            "token_uri": f"{self.address}/token", "universe_domain": "googleapis.com"}))
        path.chmod(0o600)
        return path

    # --- HTTP --------------------------------------------------------------------------------

    def _handle(self, h, method):
        if self.delay:
            time.sleep(self.delay)  # the behaviour under test: a server slower than the client's timeout
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        path = h.path.split("?")[0]
        if path == "/token" and method == "POST":
            return self._token(h, raw)
        member = self._authenticate(h.headers.get("Authorization", ""))
        if member is None:
            return self._error(h, 401, "Request had invalid authentication credentials. Expected OAuth 2 access "
                                       "token, login cookie or other valid authentication credential.")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return self._error(h, 400, "Invalid JSON payload received.")
        name, _, verb = path.removeprefix("/v1/").partition(":")
        with self.lock:
            self.calls.append(f"{verb or method} {name}")
            key = self.keys.get(name)
            roles = self.iam.get(name, {}).get(member, set())
            needed = {"encrypt": "useToEncrypt", "decrypt": "useToDecrypt"}.get(verb, "get")
            allowed = (ENCRYPTER_DECRYPTER in roles) if verb in ("encrypt", "decrypt") else (VIEWER in roles)
            if key is None:
                return self._error(h, 404, f"CryptoKey {name} not found.")
            if not allowed:
                permission = f"cloudkms.cryptoKeyVersions.{needed}" if verb else "cloudkms.cryptoKeys.get"
                return self._error(h, 403, f"Permission '{permission}' denied on resource '{name}' "
                                           "(or it may not exist).")
            if method == "GET" and not verb:
                return self._reply(h, 200, self._crypto_key(name, key))
            if method == "POST" and verb == "encrypt":
                return self._encrypt(h, name, key, body)
            if method == "POST" and verb == "decrypt":
                return self._decrypt(h, name, key, body)
        return self._error(h, 404, f"The requested URL {path} was not found.")

    def _crypto_key(self, name, key):
        version = key["primary"]
        return {"name": name, "purpose": "ENCRYPT_DECRYPT",
                "primary": {"name": f"{name}/cryptoKeyVersions/{version}",
                            "state": key["versions"][version]["state"], "protectionLevel": "SOFTWARE",
                            "algorithm": "GOOGLE_SYMMETRIC_ENCRYPTION"},
                "versionTemplate": {"protectionLevel": "SOFTWARE", "algorithm": "GOOGLE_SYMMETRIC_ENCRYPTION"}}

    def _encrypt(self, h, name, key, body):
        plaintext = base64.b64decode(body.get("plaintext", ""))
        aad = base64.b64decode(body.get("additionalAuthenticatedData", ""))
        # "If the checksum does not match, the request fails with INVALID_ARGUMENT" (EncryptRequest docs).
        if self.drops_checksums:
            body = {k: v for k, v in body.items() if not k.endswith("Crc32c")}
        if "plaintextCrc32c" in body and int(body["plaintextCrc32c"]) != crc32c(plaintext):
            return self._error(h, 400, "The checksum in field plaintext_crc32c did not match the data in field "
                                       "plaintext.")
        version = key["primary"]
        entry = key["versions"][version]
        if entry["state"] != "ENABLED":
            return self._error(h, 400, f"{name}/cryptoKeyVersions/{version} is not enabled, current state is: "
                                       f"{entry['state']}.", "FAILED_PRECONDITION")
        nonce = os.urandom(12)
        ciphertext = struct.pack(">I", version) + nonce + AESGCM(entry["key"]).encrypt(nonce, plaintext, aad or None)
        checksum = crc32c(ciphertext)
        if self.corrupt:
            ciphertext = bytes([ciphertext[0] ^ 1]) + ciphertext[1:]
        return self._reply(h, 200, {
            "name": f"{name}/cryptoKeyVersions/{version}", "ciphertext": base64.b64encode(ciphertext).decode(),
            "ciphertextCrc32c": str(checksum),
            "verifiedPlaintextCrc32c": "plaintextCrc32c" in body,
            "verifiedAdditionalAuthenticatedDataCrc32c": "additionalAuthenticatedDataCrc32c" in body,
            "protectionLevel": "SOFTWARE"})

    def _decrypt(self, h, name, key, body):
        ciphertext = base64.b64decode(body.get("ciphertext", ""))
        aad = base64.b64decode(body.get("additionalAuthenticatedData", ""))
        if "ciphertextCrc32c" in body and int(body["ciphertextCrc32c"]) != crc32c(ciphertext):
            return self._error(h, 400, "The checksum in field ciphertext_crc32c did not match the data in field "
                                       "ciphertext.")
        if len(ciphertext) < 4 + 12 + 16:
            return self._error(h, 400, "Decryption failed: the ciphertext is invalid.")
        (version,) = struct.unpack(">I", ciphertext[:4])
        entry = key["versions"].get(version)
        if entry is None:
            return self._error(h, 400, "Decryption failed: the ciphertext is invalid.")
        if entry["state"] != "ENABLED":
            return self._error(h, 400, f"{name}/cryptoKeyVersions/{version} is not enabled, current state is: "
                                       f"{entry['state']}.", "FAILED_PRECONDITION")
        try:
            plaintext = AESGCM(entry["key"]).decrypt(ciphertext[4:16], ciphertext[16:], aad or None)
        except Exception:  # noqa: BLE001 - InvalidTag
            return self._error(h, 400, "Decryption failed: the ciphertext is invalid.")
        checksum = crc32c(plaintext)
        if self.corrupt:
            plaintext = bytes([plaintext[0] ^ 1]) + plaintext[1:]
        return self._reply(h, 200, {"plaintext": base64.b64encode(plaintext).decode(),
                                    "plaintextCrc32c": str(checksum),
                                    "usedPrimary": version == key["primary"], "protectionLevel": "SOFTWARE"})

    # --- OAuth 2.0 ----------------------------------------------------------------------------

    def _verify_jwt(self, token: str) -> dict | None:
        try:
            head, payload, signature = token.encode().split(b".")
            claims = json.loads(_b64url(payload))
            public = self.accounts[claims["iss"]]
            public.verify(_b64url(signature), head + b"." + payload, padding.PKCS1v15(), hashes.SHA256())
        except Exception:  # noqa: BLE001 - any malformed, unknown or forged token
            return None
        return claims if claims.get("exp", 0) > time.time() - 30 else None

    def _authenticate(self, header: str) -> str | None:
        if self.unauthenticated or not header.startswith("Bearer "):
            return None
        token = header.removeprefix("Bearer ").strip()
        with self.lock:
            if token in self.access_tokens:
                return self.access_tokens[token]
        claims = self._verify_jwt(token)  # a self-signed JWT (https://google.aip.dev/auth/4111)
        return claims["iss"] if claims else None

    def _token(self, h, raw):
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        claims = self._verify_jwt(form.get("assertion", ""))
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" or not claims \
                or self.unauthenticated:
            return self._reply(h, 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
        token = "ya29.standin-" + secrets.token_hex(16)
        with self.lock:
            self.access_tokens[token] = claims["iss"]
        return self._reply(h, 200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    # --- replies ------------------------------------------------------------------------------

    def _error(self, h, code, message, status=None):
        return self._reply(h, code, {"error": {"code": code, "message": message,
                                               "status": status or _STATUS.get(code, "UNKNOWN")}})

    @staticmethod
    def _reply(h, status, payload):
        data = json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json; charset=UTF-8")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the slow-server test)
