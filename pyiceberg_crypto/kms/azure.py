"""A KMS client for Azure Key Vault and Managed HSM keys (``pip install 'pyiceberg-crypto[azure]'``).

    from pyiceberg_crypto.kms.loader import load_kms
    kms = load_kms("azure", {})        # credential: DefaultAzureCredential
    register_kms(spark, kms)  # tables: encryption.key-id = https://lake-kv.vault.azure.net/keys/lake-orders

- the table's ``encryption.key-id`` is the key's identifier without a version: vault URL +
  ``/keys/<name>`` (Key Vault ``RSA`` / ``RSA-HSM`` keys, or Managed HSM ``oct-HSM`` keys);
- wrap = ``POST {vault}/keys/{name}/{version}/wrapkey`` with the current version, ``RSA-OAEP-256``
  (RSA keys) or ``A256KW`` (oct-HSM keys), always in the service;
- unwrap = ``POST {vault}/keys/{name}/{version}/unwrapkey`` with the **exact version** that wrapped;
- the wrapped bytes are an envelope (:mod:`pyiceberg_crypto.kms._version_label`, magic ``PAZ1``) holding
  ``"<algorithm> <kid>"`` from the wrap result and the wrapped key: :meth:`AzureKeyVaultKms.key_version`
  is the kid's version (no service call), :meth:`AzureKeyVaultKms.current_key_version` the key's
  current version.

Settings are ``azure.*`` properties (``azure.auth``: ``default``, ``client-secret``,
``managed-identity``, ``static-token``) or the environment (``AZURE_TENANT_ID``, ...); secrets only
from the environment or files. Every setting, the calls in detail, permissions, rotation and
errors: docs/kms/azure.md.
"""

from __future__ import annotations

import base64
import os
import re
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from pyiceberg_crypto.kms import _version_label as version_label
from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.key_ids import PlainKeyIds
from pyiceberg_crypto.kms._loopback import is_loopback_url

__all__ = ["AzureKeyVaultKms", "StaticTokenCredential"]

PROVIDER = "Azure Key Vault"
MAGIC = b"PAZ1"
AUTH_METHODS = ("default", "client-secret", "managed-identity", "static-token")
PROPERTY_PREFIX = "azure."
#: Key type -> the wrap algorithm (https://learn.microsoft.com/rest/api/keyvault/keys/wrap-key/wrap-key#jsonwebkeyencryptionalgorithm).
ALGORITHMS = {"RSA": "RSA-OAEP-256", "RSA-HSM": "RSA-OAEP-256", "oct": "A256KW", "oct-HSM": "A256KW"}
#: Key names and versions as Key Vault makes them (names: 1-127 of 0-9, a-z, A-Z, -); anything else
#: in a key id or a recorded kid (a crafted metadata.json) never reaches a request path.
_NAME = re.compile(r"^[0-9A-Za-z-]{1,127}$")
_VERSION = re.compile(r"^[0-9A-Za-z]{1,64}$")


def _env(name: str) -> str | None:
    return os.environ.get(name) or None


def _read_secret_file(path: str, what: str) -> str:
    try:
        return open(path, encoding="utf-8").read().strip()  # noqa: SIM115
    except OSError as exc:
        raise KmsError(f"{PROVIDER}: cannot read the {what} file {path!r}: {exc.strerror}") from None


class StaticTokenCredential:
    """A fixed bearer token (``azure.core.credentials.TokenCredential``): for a loopback test
    endpoint only; :class:`AzureKeyVaultKms` refuses it for any other vault URL."""

    def __init__(self, token: str):
        self._token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self._token, int(time.time()) + 3600)

    def __repr__(self) -> str:
        return "StaticTokenCredential(<hidden>)"


class AzureKeyVaultKms(PlainKeyIds, KeyManagementClient):
    """Azure Key Vault / Managed HSM wrapKey and unwrapKey. ``repr`` shows the auth method only.

    Args:
        credential: any ``azure.core.credentials.TokenCredential`` (default: from ``auth``).
        auth: ``default``, ``client-secret``, ``managed-identity`` or ``static-token``.
        tenant_id, client_id, client_secret: for ``client-secret`` (client_id also picks a
            user-assigned managed identity). token: for ``static-token`` (loopback vaults only).
        ca_cert: CA bundle path for TLS. timeout: seconds per HTTP request.
    """

    def __init__(
        self,
        *,
        credential: Any = None,
        auth: str = "default",
        tenant_id: str | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        token: str | None = None,
        ca_cert: str | None = None,
        timeout: float = 10.0,
    ):
        try:
            import azure.identity
            import azure.keyvault.keys  # noqa: F401
        except ImportError:
            raise KmsError("the Azure Key Vault KMS client needs azure-keyvault-keys and azure-identity: "
                           "pip install 'pyiceberg-crypto[azure]'") from None
        if auth not in AUTH_METHODS:
            raise KmsError(f"{PROVIDER}: azure.auth must be one of {AUTH_METHODS}, got {auth!r}")
        if timeout <= 0:
            raise KmsError(f"{PROVIDER}: azure.timeout must be positive, got {timeout!r}")
        self.auth = auth if credential is None else type(credential).__name__
        self.ca_cert = ca_cert
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        self._key_clients: dict[str, Any] = {}
        self._static = auth == "static-token" and credential is None
        if credential is not None:
            self._credential = credential
        elif auth == "static-token":
            if not token:
                raise KmsError(f"{PROVIDER}: azure.auth=static-token needs azure.token-file")
            self._credential = StaticTokenCredential(token)
        elif auth == "client-secret":
            tenant_id, client_id = tenant_id or _env("AZURE_TENANT_ID"), client_id or _env("AZURE_CLIENT_ID")
            client_secret = client_secret or _env("AZURE_CLIENT_SECRET")
            if not (tenant_id and client_id and client_secret):
                raise KmsError(f"{PROVIDER}: client-secret auth needs azure.tenant-id, azure.client-id and a secret "
                               "(AZURE_CLIENT_SECRET or azure.client-secret-file)")
            self._credential = azure.identity.ClientSecretCredential(tenant_id, client_id, client_secret)
        elif auth == "managed-identity":
            self._credential = azure.identity.ManagedIdentityCredential(client_id=client_id or _env("AZURE_CLIENT_ID"))
        else:
            self._credential = azure.identity.DefaultAzureCredential()

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> AzureKeyVaultKms:
        """Build from string properties and the environment (see the module docs)."""
        p = dict(properties)
        if "azure.client-secret" in p or "azure.token" in p:
            raise KmsError(f"{PROVIDER}: secrets are not properties; use AZURE_CLIENT_SECRET / "
                           "azure.client-secret-file, azure.token-file")
        try:
            timeout = float(p.get("azure.timeout", "10"))
        except ValueError:
            raise KmsError(f"{PROVIDER}: azure.timeout must be a number of seconds, got {p['azure.timeout']!r}") \
                from None
        auth = p.get("azure.auth", "default")
        secret = (_read_secret_file(p["azure.client-secret-file"], "client secret")
                  if "azure.client-secret-file" in p else None)
        token = _read_secret_file(p["azure.token-file"], "token") if "azure.token-file" in p else None
        return cls(auth=auth, tenant_id=p.get("azure.tenant-id"), client_id=p.get("azure.client-id"),
                   client_secret=secret, token=token, ca_cert=p.get("azure.ca-cert"), timeout=timeout)

    def initialize(self, properties: Mapping[str, str]) -> None:
        """Catalog properties ``pyiceberg-crypto.kms.azure.*`` (prefix removed): reconfigure when
        they carry ``azure.`` settings; other properties are ignored."""
        mine = {k: v for k, v in properties.items() if k.startswith(PROPERTY_PREFIX)}
        if not mine or mine == getattr(self, "_configured_with", None):
            return
        fresh = AzureKeyVaultKms.from_properties(mine)
        with self._lock:
            self.auth, self.ca_cert, self.timeout = fresh.auth, fresh.ca_cert, fresh.timeout
            self._credential, self._static = fresh._credential, fresh._static
            self._key_clients = {}
            self._configured_with = mine

    # --- KeyManagementClient ------------------------------------------------------------------

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        vault, name = self._parse(wrapping_key_id)
        current = self._call("get key", wrapping_key_id, lambda: self._key_client(vault).get_key(name))
        version = current.properties.version
        if not current.properties.enabled:
            raise KmsError(f"{PROVIDER} wrapKey with key id {wrapping_key_id!r} refused: the current version "
                           f"{version} is disabled")
        key_type = str(getattr(current.key_type, "value", current.key_type))
        algorithm = ALGORITHMS.get(key_type)
        if algorithm is None:
            raise KmsError(f"{PROVIDER}: key id {wrapping_key_id!r} is a {key_type} key; "
                           "use an RSA key (Key Vault) or an oct-HSM key (Managed HSM)")
        reply = self._operation("wrapKey", wrapping_key_id, vault, f"/keys/{name}/{version}/wrapkey",
                                algorithm, bytes(key))
        kid = str(reply.get("kid", ""))
        if self._split_kid(kid, wrapping_key_id) != (vault.lower(), name.lower(), version):
            raise KmsError(f"{PROVIDER} wrapKey with key id {wrapping_key_id!r} failed: the result names key "
                           f"{kid!r}, not version {version} of that key")
        return version_label.pack(MAGIC, f"{algorithm} {kid}", _unb64url(reply["value"]))

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        vault, name = self._parse(wrapping_key_id)
        label, encrypted = version_label.unpack(MAGIC, wrapped, PROVIDER, wrapping_key_id)
        algorithm, _, kid = label.partition(" ")
        if algorithm not in set(ALGORITHMS.values()):
            raise KmsError(f"{PROVIDER}: the wrapped key for key id {wrapping_key_id!r} names algorithm "
                           f"{algorithm!r}, not one this KMS uses")
        kid_vault, kid_name, version = self._split_kid(kid, wrapping_key_id)
        if (kid_vault, kid_name) != (vault.lower(), name.lower()) or not version:
            raise KmsError(f"{PROVIDER}: the wrapped key for key id {wrapping_key_id!r} was made by {kid!r}, "
                           "another key")
        reply = self._operation(f"unwrapKey (version {version})", wrapping_key_id, vault,
                                f"/keys/{name}/{version}/unwrapkey", algorithm, encrypted)
        return _unb64url(reply["value"])

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        """The key version in the wrap result's ``kid``, recorded in the envelope (no service call)."""
        label = version_label.peek_label(MAGIC, wrapped)
        if not label or " " not in label:
            return None
        return label.partition(" ")[2].rstrip("/").rpartition("/")[2] or None

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        """The key's current version (``GET {vault}/keys/{name}``): the one :meth:`wrap_key` uses."""
        vault, name = self._parse(wrapping_key_id)
        return self._call("get key", wrapping_key_id, lambda: self._key_client(vault).get_key(name)).properties.version

    def unwrap_key_version(self, wrapped: bytes, wrapping_key_id: str, version: str | None) -> bytes:
        """The envelope names the exact version that wrapped; unwrap always uses it."""
        return self.unwrap_key(wrapped, wrapping_key_id)

    def close(self) -> None:
        with self._lock:
            clients = list(self._key_clients.values())
            self._key_clients = {}
        for client in clients:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - best effort
                pass

    def __repr__(self) -> str:
        return f"AzureKeyVaultKms(auth={self.auth!r})"

    # --- internals ----------------------------------------------------------------------------

    @staticmethod
    def _parse(key_id: str) -> tuple[str, str]:
        """``(vault URL, key name)`` of a versionless key identifier."""
        from azure.keyvault.keys import KeyVaultKeyIdentifier

        try:
            parsed = KeyVaultKeyIdentifier(key_id)
        except (ValueError, TypeError, AttributeError):
            parsed = None
        segments = urlparse(key_id).path.strip("/").split("/")
        if parsed is None or not key_id.lower().startswith("https://") or segments[0] != "keys" \
                or not _NAME.match(parsed.name or ""):
            raise UnknownKeyError(f"{PROVIDER}: key id {key_id!r} is not a key identifier "
                                  "(https://<vault>.vault.azure.net/keys/<name>)")
        if parsed.version:
            raise UnknownKeyError(f"{PROVIDER}: key id {key_id!r} names a version; use the key without it "
                                  f"({parsed.vault_url}/keys/{parsed.name}) so rotation takes effect")
        return _origin(parsed.vault_url), parsed.name

    @staticmethod
    def _split_kid(kid: str, key_id: str) -> tuple[str, str, str | None]:
        from azure.keyvault.keys import KeyVaultKeyIdentifier

        try:
            parsed = KeyVaultKeyIdentifier(kid)
        except (ValueError, TypeError, AttributeError):
            parsed = None
        if parsed is None or not _NAME.match(parsed.name or "") or not _VERSION.match(parsed.version or ""):
            raise KmsError(f"{PROVIDER}: the wrapped key for key id {key_id!r} names an invalid kid {kid!r}")
        return _origin(parsed.vault_url).lower(), parsed.name.lower(), parsed.version  # names are case-insensitive

    def _options(self, vault: str) -> dict[str, Any]:
        loopback = is_loopback_url(vault)
        if self._static and not loopback:
            raise KmsError(f"{PROVIDER}: azure.auth=static-token is only for a loopback test vault, not {vault!r}")
        options: dict[str, Any] = {"connection_timeout": self.timeout, "read_timeout": self.timeout, "retry_total": 0}
        if self.ca_cert:
            options["connection_verify"] = self.ca_cert
        if loopback:  # the test stand-in's challenge names Azure's resource, not 127.0.0.1
            options["verify_challenge_resource"] = False
        return options

    def _key_client(self, vault: str) -> Any:
        from azure.keyvault.keys import KeyClient

        with self._lock:
            client = self._key_clients.get(vault)
            if client is None:
                client = self._key_clients[vault] = KeyClient(vault, self._credential, **self._options(vault))
            return client

    def _operation(self, operation: str, key_id: str, vault: str, path: str, algorithm: str, value: bytes) -> dict:
        """``POST {vault}{path}`` (wrapkey / unwrapkey) through the SDK's pipeline: challenge auth,
        TLS, api-version. Always in the service: azure-keyvault-keys' CryptographyClient would wrap
        locally, and for a Managed HSM ``oct-HSM`` key (no ``k`` in its JWK) 4.11.3 wraps with a
        random local key that nothing can unwrap (seen against the stand-in)."""
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
        from azure.core.rest import HttpRequest

        def send() -> dict:
            request = HttpRequest("POST", path, json={"alg": algorithm, "value": _b64url(value)})
            response = self._key_client(vault).send_request(request)
            if response.status_code == 401:
                raise ClientAuthenticationError(response=response)
            if response.status_code == 404:
                raise ResourceNotFoundError(response=response)
            if response.status_code >= 400:
                raise HttpResponseError(response=response)
            reply = response.json()
            if not isinstance(reply, dict) or not isinstance(reply.get("value"), str):
                raise HttpResponseError(message="the reply has no value", response=response)
            return reply

        return self._call(operation, key_id, send)

    def _call(self, operation: str, key_id: str, function: Any) -> Any:
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ResourceNotFoundError,
            ServiceRequestError,
            ServiceRequestTimeoutError,
            ServiceResponseError,
            ServiceResponseTimeoutError,
        )

        where = f"{PROVIDER} {operation} with key id {key_id!r}"
        try:
            return function()
        except ResourceNotFoundError as exc:
            raise UnknownKeyError(f"{where} failed: {_reason(exc)}") from None
        except ClientAuthenticationError as exc:
            raise KmsError(f"{where} refused: {_reason(exc)} (check the credential)") from None
        except HttpResponseError as exc:
            if exc.status_code == 403:
                hint = "" if "KeyDisabled" in _reason(exc) else (
                    " (the caller needs get, wrapKey and unwrapKey on the key: the role Key Vault Crypto Service "
                    "Encryption User)")
                raise KmsError(f"{where} refused: {_reason(exc)}{hint}") from None
            raise KmsError(f"{where} failed: {_reason(exc)}") from None
        except (ServiceRequestTimeoutError, ServiceResponseTimeoutError):
            raise KmsError(f"{where} failed: no answer within {self.timeout:g}s") from None
        except ServiceResponseError as exc:
            if "timed out" in str(exc).lower() or "timeout" in type(exc.inner_exception).__name__.lower():
                raise KmsError(f"{where} failed: no answer within {self.timeout:g}s") from None
            raise KmsError(f"{where} failed: {type(exc).__name__}: {_first_line(exc)}") from None
        except ServiceRequestError as exc:
            raise KmsError(f"{where} failed: cannot reach the vault: {_first_line(exc)}") from None


def _origin(url: str) -> str:
    """``https://host[:port]`` without the default port (Key Vault's kids never carry ``:443``)."""
    return url[: -len(":443")] if url.endswith(":443") else url


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _reason(exc: Any) -> str:
    """``Code (inner code): message`` of a Key Vault error reply, one line."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None) or f"HTTP {getattr(exc, 'status_code', '?')}"
    inner = getattr(error, "innererror", None) or {}
    inner_code = inner.get("code") if isinstance(inner, dict) else None
    message = getattr(error, "message", None) or getattr(exc, "message", None) or str(exc)
    return _first_line(f"{code}{f' ({inner_code})' if inner_code else ''}: {message}")


def _first_line(value: Any) -> str:
    text = str(value).strip()
    return text.splitlines()[0][:300] if text else type(value).__name__


def azure_kms(properties: Mapping[str, str] | None = None) -> AzureKeyVaultKms:
    """Factory for ``load_kms("azure", properties)``: :meth:`AzureKeyVaultKms.from_properties`."""
    kms = AzureKeyVaultKms.from_properties(properties or {})
    kms._configured_with = {k: v for k, v in (properties or {}).items() if k.startswith(PROPERTY_PREFIX)}
    return kms
