"""A KMS client for HashiCorp Vault / OpenBao Transit (hvac; ``pip install 'pyiceberg-crypto[vault]'``).

    from pyiceberg_crypto.kms import load_kms
    kms = load_kms("vault", {"vault.address": "https://vault:8200"})   # token: VAULT_TOKEN
    register_kms(spark, kms)  # tables: TBLPROPERTIES ('encryption.key-id'='lake-orders')

- the table's ``encryption.key-id`` is the name of a Transit key (``aes256-gcm96``);
- wrap = ``POST /v1/<mount>/encrypt/<key>``, unwrap = ``POST /v1/<mount>/decrypt/<key>``, both with
  ``associated_data`` naming the key use (:data:`DEFAULT_ASSOCIATED_DATA`), so a Transit
  ciphertext made for another purpose with the same key does not decrypt here;
- the wrapped bytes are Transit's ciphertext string ``vault:v<N>:<base64>``; the key version is
  ``v<N>``; :meth:`VaultTransitKms.current_key_version` reads ``latest_version``;
- a missing key is refused on the first wrap, never created by Transit's ``encrypt``;
- a token refused mid-run (expired, revoked) is replaced once and the call retried.

Settings come from ``vault.*`` properties or the environment (``VAULT_ADDR``, ``VAULT_TOKEN``, ...);
secrets only from the environment or files. Authentication: a token (``vault.token-file``),
AppRole or Kubernetes (``vault.auth``). Every setting, the minimal policy, rotation, errors and how
it is tested: docs/kms/vault.md.
"""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.key_ids import PlainKeyIds

__all__ = ["VaultAccessDeniedError", "VaultTransitKms"]

DEFAULT_ASSOCIATED_DATA = "pyiceberg-crypto:iceberg-table-key-wrap"
DEFAULT_JWT_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
AUTH_METHODS = ("token", "approle", "kubernetes")
_TLS_HINT = ("cannot verify the TLS certificate of {} (set vault.ca-cert or VAULT_CACERT to the CA that "
             "signed it)")
_VERSION = re.compile(rb"^vault:v(\d+):")


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _read_secret_file(path: str, what: str) -> str:
    try:
        return open(path, encoding="utf-8").read().strip()  # noqa: SIM115
    except OSError as exc:
        raise KmsError(f"Vault Transit: cannot read the {what} file {path!r}: {exc.strerror}") from None


class VaultAccessDeniedError(KmsError):
    """Vault refused the token (403) even after one refresh: expired, revoked, or not allowed by its policy."""


class VaultTransitKms(PlainKeyIds, KeyManagementClient):
    """Vault / OpenBao Transit through hvac. ``repr`` shows address, mount and auth method only.

    Args:
        address: server URL. mount: Transit mount path. namespace: Vault namespace.
        auth: ``token``, ``approle`` or ``kubernetes``. token: for ``token`` auth (not kept in repr).
        role_id, secret_id: AppRole. kubernetes_role, jwt: Kubernetes auth.
        auth_mount: mount of the auth method. ca_cert: CA bundle path. timeout: seconds per request.
        associated_data: AEAD associated data bound into every ciphertext (None: none).
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        mount: str = "transit",
        namespace: str | None = None,
        auth: str = "token",
        token: str | None = None,
        role_id: str | None = None,
        secret_id: str | None = None,
        kubernetes_role: str | None = None,
        jwt: str | None = None,
        auth_mount: str | None = None,
        ca_cert: str | None = None,
        token_file: str | None = None,
        secret_id_file: str | None = None,
        timeout: float = 10.0,
        associated_data: str | None = DEFAULT_ASSOCIATED_DATA,
    ):
        try:
            import hvac
        except ImportError:
            raise KmsError("the Vault Transit KMS client needs hvac: pip install 'pyiceberg-crypto[vault]'") from None
        if auth not in AUTH_METHODS:
            raise KmsError(f"Vault Transit: vault.auth must be one of {AUTH_METHODS}, got {auth!r}")
        self.address = address or _env("VAULT_ADDR", "BAO_ADDR")
        if not self.address:
            raise KmsError("Vault Transit: no server address (set vault.address or VAULT_ADDR)")
        self.mount = mount.strip("/")
        self.auth = auth
        self.timeout = float(timeout)
        self.associated_data = associated_data
        self._lock = threading.Lock()
        self._known_keys: set[str] = set()
        self._token_file = token_file
        self._secret_id_file = secret_id_file
        self._login_args: tuple[str, str, dict[str, str]] | None = None
        verify: Any = ca_cert or _env("VAULT_CACERT") or True
        self._client = hvac.Client(
            url=self.address, namespace=namespace or _env("VAULT_NAMESPACE"), verify=verify, timeout=self.timeout
        )
        if auth == "token":
            if token is None and token_file:
                token = _read_secret_file(token_file, "token")
            token = token or _env("VAULT_TOKEN", "BAO_TOKEN")
            if not token:
                raise KmsError("Vault Transit: no token (set VAULT_TOKEN or vault.token-file)")
            self._client.token = token
        elif auth == "approle":
            if not role_id or not secret_id:
                raise KmsError("Vault Transit: AppRole auth needs vault.role-id and a secret id (VAULT_SECRET_ID "
                               "or vault.secret-id-file)")
            self._login_args = ("approle", auth_mount or "approle", {"role_id": role_id, "secret_id": secret_id})
            self._login(*self._login_args)
        else:
            if not kubernetes_role:
                raise KmsError("Vault Transit: Kubernetes auth needs vault.kubernetes-role")
            self._login_args = ("kubernetes", auth_mount or "kubernetes",
                                {"role": kubernetes_role, "jwt": jwt or _read_secret_file(DEFAULT_JWT_FILE, "JWT")})
            self._login(*self._login_args)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> VaultTransitKms:
        """Build from string properties and the environment (see the module docs)."""
        p = dict(properties)
        if "vault.token" in p or "vault.secret-id" in p:
            raise KmsError("Vault Transit: secrets are not properties; use VAULT_TOKEN / vault.token-file, "
                           "VAULT_SECRET_ID / vault.secret-id-file")
        auth = p.get("vault.auth", "token")
        secret_id = (_read_secret_file(p["vault.secret-id-file"], "secret id") if "vault.secret-id-file" in p
                     else _env("VAULT_SECRET_ID"))
        jwt = _read_secret_file(p.get("vault.jwt-file", DEFAULT_JWT_FILE), "JWT") if auth == "kubernetes" else None
        ad = p.get("vault.associated-data", DEFAULT_ASSOCIATED_DATA)
        try:
            timeout = float(p.get("vault.timeout", "10"))
        except ValueError:
            raise KmsError(f"Vault Transit: vault.timeout must be a number of seconds, got {p['vault.timeout']!r}") \
                from None
        return cls(
            address=p.get("vault.address"), mount=p.get("vault.mount", "transit"), namespace=p.get("vault.namespace"),
            auth=auth, token_file=p.get("vault.token-file"), secret_id_file=p.get("vault.secret-id-file"),
            role_id=p.get("vault.role-id") or _env("VAULT_ROLE_ID"), secret_id=secret_id,
            kubernetes_role=p.get("vault.kubernetes-role"), jwt=jwt, auth_mount=p.get("vault.auth-mount"),
            ca_cert=p.get("vault.ca-cert"), timeout=timeout,
            associated_data=None if ad.strip().lower() == "none" else ad,
        )

    # --- KeyManagementClient ------------------------------------------------------------------

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        if wrapping_key_id not in self._known_keys:
            self._check_key_exists(wrapping_key_id)
        body = {"plaintext": base64.b64encode(bytes(key)).decode("ascii"), **self._ad()}
        data = self._call("encrypt", wrapping_key_id, "post", f"encrypt/{wrapping_key_id}", body)
        return data["ciphertext"].encode("ascii")

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        ciphertext = self._ciphertext(wrapped, wrapping_key_id)
        data = self._call("decrypt", wrapping_key_id, "post", f"decrypt/{wrapping_key_id}",
                          {"ciphertext": ciphertext, **self._ad()})
        try:
            return base64.b64decode(data["plaintext"], validate=True)
        except (KeyError, ValueError, TypeError):
            raise KmsError(f"Vault Transit decrypt with key id {wrapping_key_id!r}: no plaintext in the reply") \
                from None

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        """``v<N>``, the Transit key version in the ciphertext prefix ``vault:v<N>:`` (no server call)."""
        match = _VERSION.match(bytes(wrapped))
        return f"v{int(match.group(1))}" if match else None

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        """``v<latest_version>`` of the Transit key: the version ``encrypt`` uses now."""
        data = self._call("read key", wrapping_key_id, "get", f"keys/{wrapping_key_id}", None)
        latest = data.get("latest_version")
        return f"v{int(latest)}" if latest is not None else None

    def key_versions(self, wrapping_key_id: str) -> frozenset[str] | None:
        """``v<N>`` of every version the Transit key holds (its ``keys`` map; none for an unknown key)."""
        try:
            data = self._call("read key", wrapping_key_id, "get", f"keys/{wrapping_key_id}", None)
        except UnknownKeyError:
            return frozenset()
        return frozenset(f"v{int(version)}" for version in (data.get("keys") or {}))

    def unwrap_key_version(self, wrapped: bytes, wrapping_key_id: str, version: str | None) -> bytes:
        """Transit picks the version from the ciphertext prefix itself."""
        return self.unwrap_key(wrapped, wrapping_key_id)

    def rewrap(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        """The same key under the latest version of the Transit key.

        With associated data (the default), decrypt + encrypt: Transit's ``rewrap`` endpoint takes
        no ``associated_data`` (measured on OpenBao 2.7: it fails to authenticate such a
        ciphertext), so the KEK passes through this process, as it does on every unwrap. Without
        associated data, Transit's ``rewrap``: the plaintext never leaves the server."""
        ciphertext = self._ciphertext(wrapped, wrapping_key_id)
        if self.associated_data is not None:
            return self.wrap_key(self.unwrap_key(wrapped, wrapping_key_id), wrapping_key_id)
        data = self._call("rewrap", wrapping_key_id, "post", f"rewrap/{wrapping_key_id}",
                          {"ciphertext": ciphertext, **self._ad()})
        return data["ciphertext"].encode("ascii")

    def close(self) -> None:
        try:
            self._client.adapter.close()
        except Exception:  # noqa: BLE001 - best effort
            pass

    def __repr__(self) -> str:
        return f"VaultTransitKms(address={self.address!r}, mount={self.mount!r}, auth={self.auth!r})"

    # --- internals ----------------------------------------------------------------------------

    def _ad(self) -> dict[str, str]:
        if self.associated_data is None:
            return {}
        return {"associated_data": base64.b64encode(self.associated_data.encode()).decode("ascii")}

    @staticmethod
    def _ciphertext(wrapped: bytes, key_id: str) -> str:
        try:
            text = bytes(wrapped).decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if not text.startswith("vault:v"):
            raise KmsError(f"Vault Transit: the wrapped key for key id {key_id!r} is not a Transit ciphertext "
                           "(vault:v<N>:...)")
        return text

    def _check_key_exists(self, key_id: str) -> None:
        """Refuse a Transit key that does not exist (encrypt would create it); remembered once seen."""
        try:
            self._call("read key", key_id, "get", f"keys/{key_id}", None)
        except UnknownKeyError:
            raise UnknownKeyError(
                f"Vault Transit encrypt with key id {key_id!r} (mount {self.mount!r}) refused: the Transit key is "
                f"not found, and encrypt would create a new one; create it on purpose (bao write -f "
                f"{self.mount}/keys/{key_id}) or fix the table's encryption.key-id") from None
        except VaultAccessDeniedError:
            pass  # no read permission on keys/<key>: the policy decides (grant update, not create, on encrypt)
        self._known_keys.add(key_id)

    def _refresh_token(self, refused_token: str | None) -> bool:
        """A token refused: take the token file's current token, or log in again. True if a new
        token is in place (the call is worth one retry)."""
        with self._lock:
            if self._client.token != refused_token:
                return True  # another thread already replaced it
            if self.auth == "token":
                if not self._token_file:
                    return False
                try:
                    token = _read_secret_file(self._token_file, "token")
                except KmsError:
                    return False
                if not token or token == refused_token:
                    return False
                self._client.token = token
                return True
            if self._login_args is None:
                return False
            method, mount, body = self._login_args
            body = dict(body)
            if method == "approle" and self._secret_id_file:
                body["secret_id"] = _read_secret_file(self._secret_id_file, "secret id")
            try:
                self._login(method, mount, body)
            except KmsError:
                return False
            return True

    def _login(self, method: str, mount: str, body: dict[str, str]) -> None:
        import hvac.exceptions
        import requests

        try:
            response = self._client.adapter.post(f"/v1/auth/{mount}/login", json=body)
            token = (response or {}).get("auth", {}).get("client_token") if isinstance(response, dict) else None
        except hvac.exceptions.VaultError as exc:
            raise KmsError(f"Vault Transit: {method} login at {self.address} refused: {_errors(exc)}") from None
        except requests.exceptions.SSLError:
            raise KmsError(f"Vault Transit: {method} login failed: {_TLS_HINT.format(self.address)}") from None
        except requests.exceptions.RequestException as exc:
            raise KmsError(f"Vault Transit: {method} login at {self.address} failed: {type(exc).__name__}") from None
        if not token:
            raise KmsError(f"Vault Transit: {method} login at {self.address} returned no client token")
        self._client.token = token

    def _call(self, operation: str, key_id: str, verb: str, path: str, body: dict[str, Any] | None) -> dict:
        import hvac.exceptions
        import requests

        if not key_id or "/" in key_id or ".." in key_id:
            raise UnknownKeyError(f"Vault Transit: invalid key name {key_id!r}")
        url = f"/v1/{self.mount}/{path}"
        where = f"Vault Transit {operation} with key id {key_id!r} (mount {self.mount!r})"
        for attempt in (1, 2):
            token = self._client.token
            try:
                if verb == "get":
                    response = self._client.adapter.get(url)
                else:
                    response = self._client.adapter.post(url, json=body)
                break
            except hvac.exceptions.Forbidden as exc:
                if attempt == 1 and self._refresh_token(token):
                    continue
                raise VaultAccessDeniedError(f"{where} refused: {_errors(exc)} (the {self._token_source()} expired, was "
                                        "revoked, or its policy does not allow this)") from None
            except hvac.exceptions.InvalidPath:
                raise UnknownKeyError(f"{where} failed: key not found") from None
            except hvac.exceptions.InvalidRequest as exc:
                reason = _errors(exc)
                error = UnknownKeyError if "not found" in reason else KmsError
                raise error(f"{where} failed: {reason}") from None
            except hvac.exceptions.VaultError as exc:
                raise KmsError(f"{where} failed: {type(exc).__name__}: {_errors(exc)}") from None
            except requests.exceptions.SSLError:
                raise KmsError(f"{where} failed: {_TLS_HINT.format(self.address)}") from None
            except requests.exceptions.Timeout:
                raise KmsError(f"{where} failed: no answer from {self.address} within {self.timeout:g}s") from None
            except requests.exceptions.RequestException as exc:
                raise KmsError(f"{where} failed: cannot reach {self.address}: {type(exc).__name__}") from None
        data = response.get("data") if isinstance(response, dict) else None
        if not isinstance(data, dict):
            raise KmsError(f"{where} failed: the reply has no data")
        return data


    def _token_source(self) -> str:
        if self.auth != "token":
            return f"token of the {self.auth} login (logged in again once)"
        return "token (the token file read again)" if self._token_file else "token"


def _errors(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(str(e) for e in errors)[:300]
    return str(exc).split(", on ")[0][:300]


def vault_kms(properties: Mapping[str, str] | None = None) -> VaultTransitKms:
    """Factory for ``load_kms("vault", properties)``: :meth:`VaultTransitKms.from_properties`."""
    return VaultTransitKms.from_properties(properties or {})
