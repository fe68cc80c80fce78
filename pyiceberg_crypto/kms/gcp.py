"""A KMS client for Google Cloud KMS (google-cloud-kms; ``pip install 'pyiceberg-crypto[gcp]'``).

    from pyiceberg_crypto.kms.loader import load_kms
    kms = load_kms("gcp", {})          # credentials: application default credentials
    register_kms(spark, kms)  # tables: encryption.key-id = projects/p/locations/l/keyRings/r/cryptoKeys/k

- the table's ``encryption.key-id`` is a CryptoKey resource name (purpose ``ENCRYPT_DECRYPT``);
- wrap = ``cryptoKeys.encrypt``, unwrap = ``cryptoKeys.decrypt``, both with
  ``additional_authenticated_data`` naming the key use (:data:`DEFAULT_AAD`), so a ciphertext made
  for another purpose with the same key does not decrypt here;
- end-to-end CRC32C as Google documents (https://cloud.google.com/kms/docs/data-integrity-guidelines),
  on every request and reply;
- the wrapped bytes are an envelope (:mod:`pyiceberg_crypto.kms._version_label`, magic ``PGC1``) holding
  the CryptoKeyVersion named in the EncryptResponse ``name`` and Cloud KMS's ciphertext:
  :meth:`GcpKms.key_version` is that version's id (``"3"``, no server call);
  :meth:`GcpKms.current_key_version` is the id of the CryptoKey's primary version.

Settings are ``gcp.*`` properties (``gcp.endpoint``, ``gcp.credentials-file``, ``gcp.auth``,
``gcp.timeout``, ``gcp.additional-authenticated-data``), else application default credentials;
REST transport, ``repr`` shows the endpoint only. Every setting, the CRC32C checks, permissions,
rotation and errors: docs/kms/gcp.md.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

from pyiceberg_crypto.kms import _version_label as version_label
from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.key_ids import PlainKeyIds
from pyiceberg_crypto.kms._crc32c import crc32c
from pyiceberg_crypto.kms._loopback import is_loopback_url

__all__ = ["GcpKms"]

PROVIDER = "Google Cloud KMS"
MAGIC = b"PGC1"
DEFAULT_AAD = "pyiceberg-crypto:iceberg-table-key-wrap"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
AUTH_METHODS = ("default", "anonymous")
PROPERTY_PREFIX = "gcp."
# Resource ids as Cloud KMS allows them (https://cloud.google.com/kms/docs/resource-hierarchy#retrieve_resource_id);
# project ids may carry a "domain:" prefix.
_CRYPTO_KEY = re.compile(r"^projects/[A-Za-z0-9.:-]+/locations/[A-Za-z0-9-]+/keyRings/[A-Za-z0-9_-]{1,63}"
                         r"/cryptoKeys/[A-Za-z0-9_-]{1,63}$")


class GcpKms(PlainKeyIds, KeyManagementClient):
    """Google Cloud KMS symmetric encrypt/decrypt through the REST transport.

    Args:
        endpoint: API endpoint URL (default Google's).
        credentials: a ``google.auth`` credentials object (e.g. impersonated); default: the file,
            else application default credentials.
        credentials_file: credentials JSON file (service account key or external account config).
        anonymous: no credentials; allowed only with a loopback ``endpoint`` (tests, emulators).
        timeout: seconds per request.
        additional_authenticated_data: AAD bound into every ciphertext (None: none).
    """

    def __init__(
        self,
        *,
        endpoint: str | None = None,
        credentials: Any = None,
        credentials_file: str | None = None,
        anonymous: bool = False,
        timeout: float = 10.0,
        additional_authenticated_data: str | None = DEFAULT_AAD,
    ):
        try:
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import kms_v1  # noqa: F401
        except ImportError:
            raise KmsError("the Google Cloud KMS client needs google-cloud-kms: "
                           "pip install 'pyiceberg-crypto[gcp]'") from None
        if timeout <= 0:
            raise KmsError(f"{PROVIDER}: gcp.timeout must be positive, got {timeout!r}")
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.aad = additional_authenticated_data.encode("utf-8") if additional_authenticated_data else None
        self._lock = threading.Lock()
        if anonymous:
            if not is_loopback_url(endpoint):
                raise KmsError(f"{PROVIDER}: gcp.auth=anonymous is only for a loopback test endpoint "
                               f"(gcp.endpoint=http://127.0.0.1:PORT), got endpoint {endpoint!r}")
            credentials = AnonymousCredentials()
        elif credentials is None and credentials_file:
            credentials = _load_credentials_file(credentials_file)
        self._credentials = credentials
        self._client: Any = None  # made at the first call: application default credentials are looked up then

    def _make_client(self) -> Any:
        import google.auth.exceptions
        from google.api_core.client_options import ClientOptions
        from google.cloud import kms_v1

        options = ClientOptions(api_endpoint=self.endpoint) if self.endpoint else None
        try:
            return kms_v1.KeyManagementServiceClient(credentials=self._credentials, transport="rest",
                                                     client_options=options)
        except google.auth.exceptions.DefaultCredentialsError:
            raise KmsError(f"{PROVIDER}: no credentials (set GOOGLE_APPLICATION_CREDENTIALS or "
                           "gcp.credentials-file, or run where application default credentials exist)") from None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> GcpKms:
        """Build from string properties and the environment (see the module docs)."""
        p = dict(properties)
        auth = p.get("gcp.auth", "default")
        if auth not in AUTH_METHODS:
            raise KmsError(f"{PROVIDER}: gcp.auth must be one of {AUTH_METHODS}, got {auth!r}")
        try:
            timeout = float(p.get("gcp.timeout", "10"))
        except ValueError:
            raise KmsError(f"{PROVIDER}: gcp.timeout must be a number of seconds, got {p['gcp.timeout']!r}") \
                from None
        aad = p.get("gcp.additional-authenticated-data", DEFAULT_AAD)
        return cls(endpoint=p.get("gcp.endpoint"), credentials_file=p.get("gcp.credentials-file"),
                   anonymous=auth == "anonymous", timeout=timeout,
                   additional_authenticated_data=None if aad.strip().lower() == "none" else aad)

    def initialize(self, properties: Mapping[str, str]) -> None:
        """Catalog properties ``pyiceberg-crypto.kms.gcp.*`` (prefix removed): rebuild the client
        when they carry ``gcp.`` settings; other properties are ignored."""
        mine = {k: v for k, v in properties.items() if k.startswith(PROPERTY_PREFIX)}
        if not mine or mine == getattr(self, "_configured_with", None):
            return
        fresh = GcpKms.from_properties(mine)
        with self._lock:
            self.endpoint, self.timeout, self.aad = fresh.endpoint, fresh.timeout, fresh.aad
            self._credentials, self._client = fresh._credentials, None
            self._configured_with = mine

    # --- KeyManagementClient ------------------------------------------------------------------

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        key = bytes(key)
        request: dict[str, Any] = {"name": wrapping_key_id, "plaintext": key, "plaintext_crc32c": crc32c(key)}
        if self.aad:
            request["additional_authenticated_data"] = self.aad
            request["additional_authenticated_data_crc32c"] = crc32c(self.aad)
        response = self._call("encrypt", wrapping_key_id, "encrypt", request)
        where = f"{PROVIDER} encrypt with key id {wrapping_key_id!r}"
        # https://cloud.google.com/kms/docs/data-integrity-guidelines#calculating_and_verifying_checksums
        verified_aad = response.verified_additional_authenticated_data_crc32c if self.aad else True
        if not (response.verified_plaintext_crc32c and verified_aad):
            raise KmsError(f"{where} failed: the request was corrupted in transit (CRC32C not verified)")
        if response.ciphertext_crc32c != crc32c(response.ciphertext):
            raise KmsError(f"{where} failed: the response was corrupted in transit (ciphertext CRC32C mismatch)")
        if not _version_of(response.name, wrapping_key_id):
            raise KmsError(f"{where} failed: the reply names key version {response.name!r}, not a version of that key")
        return version_label.pack(MAGIC, response.name, response.ciphertext)

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        version, ciphertext = version_label.unpack(MAGIC, wrapped, PROVIDER, wrapping_key_id)
        if not _version_of(version, wrapping_key_id):
            raise KmsError(f"{PROVIDER}: the wrapped key for key id {wrapping_key_id!r} was made by "
                           f"{version!r}, another key")
        request: dict[str, Any] = {"name": wrapping_key_id, "ciphertext": ciphertext,
                                   "ciphertext_crc32c": crc32c(ciphertext)}
        if self.aad:
            request["additional_authenticated_data"] = self.aad
            request["additional_authenticated_data_crc32c"] = crc32c(self.aad)
        response = self._call("decrypt", wrapping_key_id, "decrypt", request)
        if response.plaintext_crc32c != crc32c(response.plaintext):
            raise KmsError(f"{PROVIDER} decrypt with key id {wrapping_key_id!r} failed: the response was "
                           "corrupted in transit (plaintext CRC32C mismatch)")
        return bytes(response.plaintext)

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        """The CryptoKeyVersion id (``"3"``) recorded in the envelope at encrypt time (no server call)."""
        label = version_label.peek_label(MAGIC, wrapped)
        return label.rpartition("/cryptoKeyVersions/")[2] or None if label else None

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        """The id of the CryptoKey's primary version: the one ``encrypt`` uses now."""
        crypto_key = self._call("get", wrapping_key_id, "get_crypto_key", {"name": wrapping_key_id})
        primary = crypto_key.primary.name if crypto_key.primary else ""
        return primary.rpartition("/cryptoKeyVersions/")[2] or None

    def unwrap_key_version(self, wrapped: bytes, wrapping_key_id: str, version: str | None) -> bytes:
        """Cloud KMS picks the version from its ciphertext: decrypt names the CryptoKey."""
        return self.unwrap_key(wrapped, wrapping_key_id)

    def close(self) -> None:
        try:
            if self._client is not None:
                self._client.transport.close()
        except Exception:  # noqa: BLE001 - best effort
            pass

    def __repr__(self) -> str:
        return f"GcpKms(endpoint={self.endpoint or 'default'!r})"

    # --- internals ----------------------------------------------------------------------------

    def _call(self, operation: str, key_id: str, method: str, request: dict[str, Any]) -> Any:
        import google.api_core.exceptions as api
        import google.auth.exceptions
        import requests

        if not _CRYPTO_KEY.match(key_id or ""):
            raise UnknownKeyError(f"{PROVIDER}: key id {key_id!r} is not a CryptoKey resource name "
                                  "(projects/P/locations/L/keyRings/R/cryptoKeys/K)")
        where = f"{PROVIDER} {operation} with key id {key_id!r}"
        with self._lock:
            if self._client is None:
                try:
                    self._client = self._make_client()
                except KmsError as exc:
                    raise KmsError(f"{where} failed: {str(exc).removeprefix(PROVIDER + ': ')}") from None
            client, timeout = self._client, self.timeout
        try:
            return getattr(client, method)(request=request, retry=None, timeout=timeout)
        except api.NotFound as exc:
            raise UnknownKeyError(f"{where} failed: {_reason(exc)}") from None
        except (api.Unauthenticated, api.Unauthorized) as exc:  # REST maps HTTP 401 to Unauthorized
            raise KmsError(f"{where} refused: {_reason(exc)} (check the credentials)") from None
        except (api.PermissionDenied, api.Forbidden) as exc:  # REST maps HTTP 403 to Forbidden
            raise KmsError(f"{where} refused: {_reason(exc)} (the caller needs "
                           "roles/cloudkms.cryptoKeyEncrypterDecrypter on the key)") from None
        except api.GoogleAPICallError as exc:
            raise KmsError(f"{where} failed: {_reason(exc)}") from None
        except google.auth.exceptions.GoogleAuthError as exc:
            raise KmsError(f"{where} failed: cannot get credentials: {type(exc).__name__}: "
                           f"{_first_line(exc)}") from None
        except requests.exceptions.Timeout:
            raise KmsError(f"{where} failed: no answer from {self._host()} within {timeout:g}s") from None
        except requests.exceptions.RequestException as exc:
            raise KmsError(f"{where} failed: cannot reach {self._host()}: {type(exc).__name__}") from None

    def _host(self) -> str:
        return self.endpoint or "https://cloudkms.googleapis.com"


def _version_of(version_name: str, key_id: str) -> bool:
    """Is ``version_name`` a CryptoKeyVersion of CryptoKey ``key_id``? The project part may differ
    between project id and project number; everything after it must be equal."""
    head = "/".join(key_id.split("/")[2:]) + "/cryptoKeyVersions/"
    parts = version_name.split("/")
    return len(parts) == 10 and parts[0] == "projects" and "/".join(parts[2:]).startswith(head) \
        and parts[9].isdigit()


def _load_credentials_file(path: str) -> Any:
    """Credentials from a JSON file of a known type, loaded by that type's own loader (Google's
    advice for externally sourced credential files: never a generic loader)."""
    import json

    import google.auth.exceptions
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account

    try:
        kind = json.loads(open(path, encoding="utf-8").read()).get("type")  # noqa: SIM115
        if kind == "service_account":
            return service_account.Credentials.from_service_account_file(path, scopes=[CLOUD_PLATFORM_SCOPE])
        if kind == "authorized_user":
            return user_credentials.Credentials.from_authorized_user_file(path, scopes=[CLOUD_PLATFORM_SCOPE])
        if kind == "external_account":  # workload identity federation
            from google.auth import aws, identity_pool

            info = json.loads(open(path, encoding="utf-8").read())  # noqa: SIM115
            loader = aws if info.get("credential_source", {}).get("environment_id", "").startswith("aws") \
                else identity_pool
            return loader.Credentials.from_info(info, scopes=[CLOUD_PLATFORM_SCOPE])
    except OSError as exc:
        raise KmsError(f"{PROVIDER}: cannot read the credentials file {path!r}: {exc.strerror}") from None
    except (ValueError, KeyError, AttributeError, google.auth.exceptions.GoogleAuthError) as exc:
        raise KmsError(f"{PROVIDER}: cannot load the credentials file {path!r}: {type(exc).__name__}: "
                       f"{_first_line(exc)}") from None
    raise KmsError(f"{PROVIDER}: the credentials file {path!r} has type {kind!r}; expected service_account, "
                   "authorized_user or external_account")


def _reason(exc: Any) -> str:
    """``STATUS: message`` from a REST error reply (google.rpc.Status JSON), one line."""
    status, message = "", ""
    response = getattr(exc, "response", None)
    try:
        error = response.json().get("error", {})
        status, message = str(error.get("status", "")), str(error.get("message", ""))
    except Exception:  # noqa: BLE001 - not a JSON reply
        pass
    if not message:
        message = str(getattr(exc, "message", "") or exc).rpartition(": ")[2]
    text = f"{status}: {message}" if status else f"HTTP {getattr(exc, 'code', '?')}: {message}"
    return _first_line(text)


def _first_line(value: Any) -> str:
    return str(value).strip().splitlines()[0][:300] if str(value).strip() else type(value).__name__


def gcp_kms(properties: Mapping[str, str] | None = None) -> GcpKms:
    """Factory for ``load_kms("gcp", properties)``: :meth:`GcpKms.from_properties`."""
    kms = GcpKms.from_properties(properties or {})
    kms._configured_with = {k: v for k, v in (properties or {}).items() if k.startswith(PROPERTY_PREFIX)}
    return kms
