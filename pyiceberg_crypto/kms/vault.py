"""A KMS client for HashiCorp Vault / OpenBao Transit (hvac; ``pip install 'pyiceberg-crypto[vault]'``).

    from pyiceberg_crypto.kms import load_kms
    kms = load_kms("vault", {"vault.address": "https://vault:8200"})   # token: VAULT_TOKEN
    register_kms(spark, kms)  # tables: TBLPROPERTIES ('encryption.key-id'='lake-orders')

- the table's ``encryption.key-id`` is the name of a Transit key (``aes256-gcm96``);
- wrap = ``POST /v1/<mount>/encrypt/<key>``, unwrap = ``POST /v1/<mount>/decrypt/<key>``, both with
  ``associated_data`` naming the key use (:data:`DEFAULT_ASSOCIATED_DATA`), so a Transit
  ciphertext made for another purpose with the same key does not decrypt here;
- the wrapped bytes are Transit's ciphertext string ``vault:v<N>:<base64>``; the key version is
  ``v<N>`` (``keys list`` / ``keys rewrap``); :meth:`VaultTransitKms.current_key_version` reads
  ``latest_version`` (``GET /v1/<mount>/keys/<key>``), and the re-wrap is Transit's ``rewrap``.

Settings come from properties or the environment; secrets only from the environment or files:

=========================  ==============================================================
``vault.address``          server URL; else ``VAULT_ADDR`` (``BAO_ADDR``)
``vault.auth``             ``token`` (default), ``approle`` or ``kubernetes``
``vault.token-file``       file holding the token; else ``VAULT_TOKEN`` (``BAO_TOKEN``)
``vault.role-id``          AppRole role id (else ``VAULT_ROLE_ID``)
``vault.secret-id-file``   AppRole secret id file; else ``VAULT_SECRET_ID``
``vault.kubernetes-role``  Kubernetes auth role
``vault.jwt-file``         service account JWT (default the pod's token file)
``vault.auth-mount``       auth method mount (default ``approle`` / ``kubernetes``)
``vault.mount``            Transit mount (default ``transit``)
``vault.namespace``        Vault Enterprise / OpenBao namespace; else ``VAULT_NAMESPACE``
``vault.ca-cert``          CA bundle for TLS; else ``VAULT_CACERT``
``vault.timeout``          seconds per HTTP request (default 10)
``vault.associated-data``  the AEAD associated data (default ``pyiceberg-crypto:iceberg-table-key-wrap``;
                           ``none`` for none)
=========================  ==============================================================
"""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError

DEFAULT_ASSOCIATED_DATA = "pyiceberg-crypto:iceberg-table-key-wrap"
DEFAULT_JWT_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
AUTH_METHODS = ("token", "approle", "kubernetes")
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


class VaultTransitKms(KeyManagementClient):
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
        verify: Any = ca_cert or _env("VAULT_CACERT") or True
        self._client = hvac.Client(
            url=self.address, namespace=namespace or _env("VAULT_NAMESPACE"), verify=verify, timeout=self.timeout
        )
        if auth == "token":
            token = token or _env("VAULT_TOKEN", "BAO_TOKEN")
            if not token:
                raise KmsError("Vault Transit: no token (set VAULT_TOKEN or vault.token-file)")
            self._client.token = token
        elif auth == "approle":
            if not role_id or not secret_id:
                raise KmsError("Vault Transit: AppRole auth needs vault.role-id and a secret id (VAULT_SECRET_ID "
                               "or vault.secret-id-file)")
            self._login("approle", auth_mount or "approle", {"role_id": role_id, "secret_id": secret_id})
        else:
            if not kubernetes_role:
                raise KmsError("Vault Transit: Kubernetes auth needs vault.kubernetes-role")
            self._login("kubernetes", auth_mount or "kubernetes",
                        {"role": kubernetes_role, "jwt": jwt or _read_secret_file(DEFAULT_JWT_FILE, "JWT")})

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> VaultTransitKms:
        """Build from string properties and the environment (see the module docs)."""
        p = dict(properties)
        if "vault.token" in p or "vault.secret-id" in p:
            raise KmsError("Vault Transit: secrets are not properties; use VAULT_TOKEN / vault.token-file, "
                           "VAULT_SECRET_ID / vault.secret-id-file")
        auth = p.get("vault.auth", "token")
        token = _read_secret_file(p["vault.token-file"], "token") if "vault.token-file" in p else None
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
            auth=auth, token=token, role_id=p.get("vault.role-id") or _env("VAULT_ROLE_ID"), secret_id=secret_id,
            kubernetes_role=p.get("vault.kubernetes-role"), jwt=jwt, auth_mount=p.get("vault.auth-mount"),
            ca_cert=p.get("vault.ca-cert"), timeout=timeout,
            associated_data=None if ad.strip().lower() == "none" else ad,
        )

    # --- KeyManagementClient ------------------------------------------------------------------

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
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

    def unwrap_key_version(self, wrapped: bytes, wrapping_key_id: str, version: str | None) -> bytes:
        """Transit picks the version from the ciphertext prefix itself."""
        return self.unwrap_key(wrapped, wrapping_key_id)

    def rewrap(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        """Transit ``rewrap``: the same key under the latest version, without the plaintext leaving Vault."""
        ciphertext = self._ciphertext(wrapped, wrapping_key_id)
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

    def _login(self, method: str, mount: str, body: dict[str, str]) -> None:
        import hvac.exceptions
        import requests

        try:
            response = self._client.adapter.post(f"/v1/auth/{mount}/login", json=body)
            token = (response or {}).get("auth", {}).get("client_token") if isinstance(response, dict) else None
        except hvac.exceptions.VaultError as exc:
            raise KmsError(f"Vault Transit: {method} login at {self.address} refused: {_errors(exc)}") from None
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
        try:
            if verb == "get":
                response = self._client.adapter.get(url)
            else:
                response = self._client.adapter.post(url, json=body)
        except hvac.exceptions.InvalidPath:
            raise UnknownKeyError(f"{where} failed: key not found") from None
        except hvac.exceptions.Forbidden as exc:
            raise KmsError(f"{where} refused: {_errors(exc)} (check the token and its policy)") from None
        except hvac.exceptions.InvalidRequest as exc:
            reason = _errors(exc)
            error = UnknownKeyError if "not found" in reason else KmsError
            raise error(f"{where} failed: {reason}") from None
        except hvac.exceptions.VaultError as exc:
            raise KmsError(f"{where} failed: {type(exc).__name__}: {_errors(exc)}") from None
        except requests.exceptions.Timeout:
            raise KmsError(f"{where} failed: no answer from {self.address} within {self.timeout:g}s") from None
        except requests.exceptions.RequestException as exc:
            raise KmsError(f"{where} failed: cannot reach {self.address}: {type(exc).__name__}") from None
        data = response.get("data") if isinstance(response, dict) else None
        if not isinstance(data, dict):
            raise KmsError(f"{where} failed: the reply has no data")
        return data


def _errors(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(str(e) for e in errors)[:300]
    return str(exc).split(", on ")[0][:300]


def vault_kms(properties: Mapping[str, str] | None = None) -> VaultTransitKms:
    """Factory for ``load_kms("vault", properties)``: :meth:`VaultTransitKms.from_properties`."""
    return VaultTransitKms.from_properties(properties or {})
