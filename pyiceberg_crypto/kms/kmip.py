"""A KMS client for KMIP servers and HSMs (PyKMIP; ``pip install 'pyiceberg-crypto[kmip]'``).

    from pyiceberg_crypto.kms.loader import load_kms
    kms = load_kms("kmip", {"kmip.host": "kmip.example", "kmip.client-cert": "/etc/lake/kmip/client.crt",
                            "kmip.client-key": "/etc/lake/kmip/client.key", "kmip.ca-cert": "/etc/lake/kmip/ca.crt"})
    register_kms(spark, kms)   # tables: TBLPROPERTIES ('encryption.key-id'='lake-orders')

The table's ``encryption.key-id`` names an AES key on the server by its Name attribute (the newest
Active key with that Name wraps: rotation is a new key with the same Name) or as ``uid:<UID>``. A
wrap is one KMIP Encrypt, an unwrap one Decrypt, with AES-GCM inside the server (KMIP 1.4 §4.29,
§4.30, §3.6), over mutual TLS. Settings are ``kmip.*`` properties, else ``PYICEBERG_CRYPTO_KMIP_*``
variables; :meth:`KmipKms.initialize` applies catalog properties later. Key ids, settings,
certificates, the wrap in detail, rotation and errors: docs/kms/kmip.md.

Wrapped-key format (version 1); the GCM additional data is ``bytes[0 : 6+n] || UTF-8 key id``::

    offset  size  field
    0       4     b"PKM1" (magic and format version)
    4       2     n = length of the wrapping key's Unique Identifier, big-endian
    6       n     the Unique Identifier (UTF-8): which key wrapped this blob
    6+n     1     m = IV length
    7+n     m     IV/Counter/Nonce
    7+n+m   16    GCM tag
    23+n+m  ...   ciphertext (as long as the wrapped key)
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.key_ids import PlainKeyIds

__all__ = ["KmipKms"]

PROVIDER = "KMIP"
DEFAULT_PORT = 5696
DEFAULT_TIMEOUT_SECONDS = 10.0
WRAPPED_MAGIC = b"PKM1"
TAG_LENGTH = 16
CLIENT_IV_LENGTH = 12
UID_PREFIX = "uid:"
ENV_PREFIX = "PYICEBERG_CRYPTO_KMIP_"
_UID_LENGTH = struct.Struct(">H")
_TTLV_HEADER = 8  # tag (3) + type (1) + length (4), KMIP 1.4 §9.1.1
_MAX_MESSAGE = 1 << 20
IV_SOURCES = ("client", "server")
VERSIONS = ("1.4", "2.0")
_SETTING_NAMES = ("host", "port", "client-cert", "client-key", "ca-cert", "server-name", "timeout", "version", "iv")


def _setting(properties: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    value = properties.get(f"kmip.{name}")
    if value:
        return value
    return os.environ.get(ENV_PREFIX + name.upper().replace("-", "_")) or default


@dataclass(frozen=True)
class _Settings:
    """Everything one connection needs, swapped as a whole by :meth:`KmipKms.initialize`."""

    host: str
    port: int
    server_name: str
    timeout: float
    version: str
    iv: str
    client_cert: str
    context: ssl.SSLContext = field(repr=False)
    kmip_version: Any = field(repr=False)

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def _build_settings(*, host: str, client_cert: str, client_key: str, ca_cert: str, port: int, server_name: str | None,
                    timeout: float, version: str, iv: str) -> _Settings:
    try:
        from kmip.core import enums
    except ImportError:
        raise KmsError("the KMIP KMS client needs PyKMIP: pip install 'pyiceberg-crypto[kmip]'") from None
    if version not in VERSIONS:
        raise KmsError(f"{PROVIDER}: kmip.version must be one of {VERSIONS}, got {version!r}")
    if iv not in IV_SOURCES:
        raise KmsError(f"{PROVIDER}: kmip.iv must be one of {IV_SOURCES}, got {iv!r}")
    if timeout <= 0:
        raise KmsError(f"{PROVIDER}: kmip.timeout must be positive, got {timeout!r}")
    # Verifies the chain and the server's name; trusts kmip.ca-cert only (not the system's CAs).
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=ca_cert)
    except (OSError, ssl.SSLError) as exc:
        raise KmsError(f"{PROVIDER}: cannot load the CA file {ca_cert!r} (kmip.ca-cert): {_reason(exc)}") from None
    try:
        context.load_cert_chain(client_cert, client_key)
    except (OSError, ssl.SSLError) as exc:
        raise KmsError(f"{PROVIDER}: cannot load the client certificate {client_cert!r} and key {client_key!r} "
                       f"(kmip.client-cert, kmip.client-key): {_reason(exc)}") from None
    return _Settings(host=host, port=int(port), server_name=server_name or host, timeout=float(timeout),
                     version=version, iv=iv, client_cert=client_cert, context=context,
                     kmip_version=enums.KMIPVersion.KMIP_1_4 if version == "1.4" else enums.KMIPVersion.KMIP_2_0)


def _arguments(properties: Mapping[str, str], *, environment: bool) -> dict[str, Any]:
    """``KmipKms`` keyword arguments from ``kmip.*`` properties (and the environment when asked)."""
    p = dict(properties)
    raw = {name: (_setting(p, name) if environment else p.get(f"kmip.{name}") or None) for name in _SETTING_NAMES}
    arguments: dict[str, Any] = {name.replace("-", "_"): value for name, value in raw.items() if value is not None}
    for name, kind in (("port", int), ("timeout", float)):
        if name in arguments:
            try:
                arguments[name] = kind(arguments[name])
            except ValueError:
                raise KmsError(f"{PROVIDER}: kmip.{name} must be a number, got {raw[name]!r}") from None
    return arguments


class KmipKms(PlainKeyIds, KeyManagementClient):
    """KMIP Encrypt/Decrypt (AES-GCM) with a key held by a KMIP server, over mutual TLS.

    ``repr`` shows the server and the certificate path, never key material. See the module docs
    for the key ids, the wrapped-key format and the settings. Usage::

        kms = KmipKms(host="kmip.example", client_cert="client.crt", client_key="client.key", ca_cert="ca.crt")
        wrapped = kms.wrap_key(kek, "lake-orders")          # Encrypt with the newest Active 'lake-orders'
        kms.key_version(wrapped, "lake-orders")             # the wrapping key's Unique Identifier
        assert kms.unwrap_key(wrapped, "lake-orders") == kek

    Args:
        host, port: the KMIP server. client_cert, client_key: this client's certificate and key
        (PEM files). ca_cert: CA bundle verifying the server (the only CAs trusted). server_name:
        the name checked in the server's certificate (default ``host``). timeout: seconds for one
        operation (connect, TLS handshake, requests and replies). version: ``"1.4"`` or ``"2.0"``.
        iv: ``"client"`` or ``"server"`` (who makes the GCM IV).
    """

    def __init__(
        self,
        *,
        host: str,
        client_cert: str,
        client_key: str,
        ca_cert: str,
        port: int = DEFAULT_PORT,
        server_name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        version: str = "1.4",
        iv: str = "client",
    ):
        self._arguments: dict[str, Any] = dict(host=host, client_cert=client_cert, client_key=client_key,
                                               ca_cert=ca_cert, port=port, server_name=server_name, timeout=timeout,
                                               version=version, iv=iv)
        self._settings = _build_settings(**self._arguments)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> KmipKms:
        """Build from ``kmip.*`` properties, else ``PYICEBERG_CRYPTO_KMIP_*`` variables (module docs)."""
        arguments = _arguments(properties, environment=True)
        missing = [f"kmip.{n}" for n in ("host", "client-cert", "client-key", "ca-cert")
                   if n.replace("-", "_") not in arguments]
        if missing:
            raise KmsError(f"{PROVIDER}: missing settings {', '.join(missing)} (properties or "
                           f"{ENV_PREFIX}* environment variables)")
        return cls(**arguments)

    def initialize(self, properties: Mapping[str, str]) -> None:
        """Apply ``kmip.*`` properties over the current settings (catalog properties
        ``pyiceberg-crypto.kms.kmip.*`` arrive here with the prefix removed); others are ignored.
        Calls already under way finish with the settings they started with."""
        changes = _arguments(properties, environment=False)
        if any(self._arguments.get(name) != value for name, value in changes.items()):
            arguments = {**self._arguments, **changes}
            self._settings = _build_settings(**arguments)
            self._arguments = arguments

    @property
    def host(self) -> str:
        """The KMIP server's host."""
        return self._settings.host

    @property
    def port(self) -> int:
        """The KMIP server's port."""
        return self._settings.port

    @property
    def timeout(self) -> float:
        """Seconds allowed for one operation (connect, TLS handshake, request and reply)."""
        return self._settings.timeout

    # --- KeyManagementClient ------------------------------------------------------------------

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        from kmip.core.messages import payloads

        with self._connection("Encrypt", wrapping_key_id) as session:
            uid = _current_uid(session, wrapping_key_id)
            header = WRAPPED_MAGIC + _UID_LENGTH.pack(len(uid.encode())) + uid.encode()
            iv = os.urandom(CLIENT_IV_LENGTH) if session.settings.iv == "client" else None
            reply = session.call("Encrypt", uid, payloads.EncryptRequestPayload(
                unique_identifier=uid, cryptographic_parameters=_gcm(session.settings), data=bytes(key),
                iv_counter_nonce=iv, auth_additional_data=header + wrapping_key_id.encode()))
        iv = iv or reply.iv_counter_nonce
        tag, ciphertext = reply.auth_tag, reply.data
        if not iv or not tag or len(tag) != TAG_LENGTH or ciphertext is None or len(ciphertext) != len(key):
            raise KmsError(f"{PROVIDER} Encrypt with key id {wrapping_key_id!r} (key UID {uid}) at "
                           f"{session.settings.where}: the reply has no GCM IV and 16-byte tag (does the server "
                           "support AES-GCM?)")
        return header + bytes([len(iv)]) + iv + tag + ciphertext

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        from kmip.core.messages import payloads

        header, uid, iv, tag, ciphertext = _parse(bytes(wrapped), wrapping_key_id)
        with self._connection("Decrypt", wrapping_key_id, uid) as session:
            reply = session.call("Decrypt", uid, payloads.DecryptRequestPayload(
                unique_identifier=uid, cryptographic_parameters=_gcm(session.settings), data=ciphertext,
                iv_counter_nonce=iv, auth_additional_data=header + wrapping_key_id.encode(), auth_tag=tag))
        if reply.data is None or len(reply.data) != len(ciphertext):
            raise KmsError(f"{PROVIDER} Decrypt with key id {wrapping_key_id!r} (key UID {uid}): no plaintext in "
                           "the reply")
        return bytes(reply.data)

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        """The Unique Identifier of the KMIP key that wrapped ``wrapped`` (from its header, no server call)."""
        try:
            return _parse(bytes(wrapped), wrapping_key_id)[1]
        except KmsError:
            return None

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        """The Unique Identifier :meth:`wrap_key` uses now: the newest Active key with that Name."""
        with self._connection("Locate", wrapping_key_id) as session:
            return _current_uid(session, wrapping_key_id)

    def unwrap_key_version(self, wrapped: bytes, wrapping_key_id: str, version: str | None) -> bytes:
        """Decrypt with the key UID in the blob's header (``version`` is that UID)."""
        return self.unwrap_key(wrapped, wrapping_key_id)

    def __repr__(self) -> str:
        cfg = self._settings
        return f"KmipKms(server={cfg.where!r}, client_cert={cfg.client_cert!r}, version={cfg.version!r})"

    # --- internals ----------------------------------------------------------------------------

    @contextmanager
    def _connection(self, operation: str, key_id: str, uid: str | None = None) -> Iterator[_Session]:
        """One mutual-TLS connection with the settings of this moment; every failure becomes one
        ``KmsError`` naming the provider, operation, key id and server."""
        cfg = self._settings
        where = f"{PROVIDER} {operation} with key id {key_id!r}" + (f" (key UID {uid})" if uid else "")
        deadline = time.monotonic() + cfg.timeout
        try:
            raw = socket.create_connection((cfg.host, cfg.port), timeout=cfg.timeout)
        except TimeoutError:
            raise KmsError(f"{where} failed: no connection to {cfg.where} within {cfg.timeout:g}s "
                           "(kmip.timeout)") from None
        except OSError as exc:
            raise KmsError(f"{where} failed: cannot reach {cfg.where}: {_reason(exc)}") from None
        try:
            try:
                raw.settimeout(max(deadline - time.monotonic(), 0.001))  # connect + handshake + reply <= timeout
                tls = cfg.context.wrap_socket(raw, server_hostname=cfg.server_name)
            except ssl.SSLCertVerificationError as exc:
                raise KmsError(f"{where} failed: the server certificate of {cfg.where} is not trusted "
                               f"(kmip.ca-cert, kmip.server-name): {exc.verify_message}") from None
            except (ssl.SSLError, ConnectionError) as exc:
                raise KmsError(f"{where} failed: TLS handshake with {cfg.where} refused ({_reason(exc)}); is "
                               "the client certificate (kmip.client-cert) issued by a CA the server trusts?") from None
            except TimeoutError:
                raise KmsError(f"{where} failed: no TLS handshake with {cfg.where} within {cfg.timeout:g}s "
                               "(kmip.timeout)") from None
            raw = tls
            yield _Session(cfg, tls, key_id, deadline)
        finally:
            try:
                raw.close()
            except OSError:
                pass


@dataclass
class _Session:
    """One open connection: :meth:`call` sends one request message and returns its response payload."""

    settings: _Settings
    tls: ssl.SSLSocket
    key_id: str
    deadline: float

    def call(self, name: str, uid: str | None, payload: Any) -> Any:
        from kmip.core import enums, primitives, utils
        from kmip.core.messages import contents, messages

        cfg = self.settings
        where = f"{PROVIDER} {name} with key id {self.key_id!r}" + (f" (key UID {uid})" if uid else "")
        operation = {"Encrypt": enums.Operation.ENCRYPT, "Decrypt": enums.Operation.DECRYPT,
                     "Locate": enums.Operation.LOCATE, "Get Attributes": enums.Operation.GET_ATTRIBUTES}[name]
        major, minor = (int(x) for x in cfg.version.split("."))
        request = messages.RequestMessage(
            request_header=messages.RequestHeader(protocol_version=contents.ProtocolVersion(major, minor),
                                                  batch_count=contents.BatchCount(1)),
            batch_items=[messages.RequestBatchItem(
                operation=primitives.Enumeration(enums.Operation, operation, tag=enums.Tags.OPERATION),
                request_payload=payload)])
        stream = utils.BytearrayStream()
        request.write(stream, cfg.kmip_version)
        try:
            self.tls.settimeout(max(self.deadline - time.monotonic(), 0.001))
            self.tls.sendall(bytes(stream.buffer))
            header = _recv_exact(self.tls, _TTLV_HEADER, self.deadline)
            length = struct.unpack(">I", header[4:])[0]
            if length > _MAX_MESSAGE:
                raise KmsError(f"{where} failed: reply of {length} bytes from {cfg.where} is too large")
            body = _recv_exact(self.tls, length, self.deadline)
        except TimeoutError:
            raise KmsError(f"{where} failed: no answer from {cfg.where} within {cfg.timeout:g}s "
                           "(kmip.timeout)") from None
        except (ssl.SSLError, OSError, EOFError) as exc:
            # TLS 1.3 servers report a refused client certificate on the first read, not in the handshake.
            raise KmsError(f"{where} failed: the connection to {cfg.where} was closed ({_reason(exc)}); is the "
                           "client certificate (kmip.client-cert) issued by a CA the server trusts?") from None
        response = messages.ResponseMessage()
        try:
            response.read(utils.BytearrayStream(header + body), cfg.kmip_version)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is one clear error
            raise KmsError(f"{where} failed: cannot decode the reply from {cfg.where}: "
                           f"{type(exc).__name__}") from None
        if len(response.batch_items) != 1:
            raise KmsError(f"{where} failed: the reply has {len(response.batch_items)} batch items, expected 1")
        item = response.batch_items[0]
        if item.result_status.value != enums.ResultStatus.SUCCESS:
            _raise_failure(item, name, f"{where} failed at {cfg.where}")
        return item.response_payload


def _raise_failure(item: Any, operation: str, where: str) -> None:
    """One ``KmsError`` for a failed batch item: KMIP's Result Reason and Result Message (KMIP 1.4 §6.9-6.11)."""
    from kmip.core import enums

    reason = item.result_reason.value if item.result_reason is not None else None
    message = str(item.result_message.value)[:300] if item.result_message is not None else ""
    reason_name = reason.name.replace("_", " ").lower() if reason is not None else "failed"
    text = f"{where}: {reason_name}: {message}".rstrip(": ")
    if reason == enums.ResultReason.ITEM_NOT_FOUND:
        raise UnknownKeyError(text + " (destroyed, or never existed)")
    if reason == enums.ResultReason.PERMISSION_DENIED:
        raise KmsError(text + " (the key must be Active, and this client identity allowed to use it)")
    if reason == enums.ResultReason.AUTHENTICATION_NOT_SUCCESSFUL:
        raise KmsError(text + " (the server refused this client certificate)")
    if operation == "Decrypt" and reason in (enums.ResultReason.GENERAL_FAILURE,
                                             enums.ResultReason.CRYPTOGRAPHIC_FAILURE):
        raise KmsError(text + " (a wrapped key that does not authenticate: tampered, or wrapped for another key "
                              "id, fails this way)")
    raise KmsError(text)


def _gcm(cfg: _Settings) -> Any:
    """Cryptographic Parameters for AES-GCM with a 16-byte tag (KMIP 1.4 §3.6)."""
    from kmip.core import attributes, enums

    return attributes.CryptographicParameters(
        block_cipher_mode=enums.BlockCipherMode.GCM, cryptographic_algorithm=enums.CryptographicAlgorithm.AES,
        tag_length=TAG_LENGTH, random_iv=cfg.iv == "server")


def _current_uid(session: _Session, key_id: str) -> str:
    """The UID that wraps for ``key_id`` now: ``uid:<UID>`` itself, else the newest Active key with that Name."""
    if key_id.startswith(UID_PREFIX):
        uid = key_id[len(UID_PREFIX):]
        if not uid:
            raise UnknownKeyError(f"{PROVIDER}: key id {key_id!r} names no UID")
        return uid
    if not key_id:
        raise UnknownKeyError(f"{PROVIDER}: empty key id")
    from kmip.core import enums
    from kmip.core.factories.attributes import AttributeFactory
    from kmip.core.messages import payloads

    factory = AttributeFactory()
    located = session.call("Locate", None, payloads.LocateRequestPayload(attributes=[
        factory.create_attribute(enums.AttributeType.NAME, key_id),
        factory.create_attribute(enums.AttributeType.STATE, enums.State.ACTIVE),
        factory.create_attribute(enums.AttributeType.OBJECT_TYPE, enums.ObjectType.SYMMETRIC_KEY),
    ])).unique_identifiers or []
    if not located:
        raise UnknownKeyError(f"{PROVIDER} Locate with key id {key_id!r} at {session.settings.where}: no Active "
                              "symmetric key has this Name (or this client may not see it)")
    if len(located) == 1:
        return located[0]
    # Several Active keys share the Name (a rotation that left the old key Active): the newest
    # Initial Date (KMIP 1.4 §3.23) wraps; equal dates keep Locate's order (later wins).
    newest: tuple[int, int, str] | None = None
    for position, uid in enumerate(located):
        attrs = session.call("Get Attributes", uid, payloads.GetAttributesRequestPayload(
            unique_identifier=uid, attribute_names=["Initial Date"])).attributes or []
        date = next((a.attribute_value.value for a in attrs if a.attribute_name.value == "Initial Date"), 0)
        candidate = (int(date or 0), position, uid)
        newest = candidate if newest is None or candidate > newest else newest
    return newest[2]


def _recv_exact(tls: ssl.SSLSocket, size: int, deadline: float) -> bytes:
    chunks, received = [], 0
    while received < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        tls.settimeout(remaining)
        chunk = tls.recv(min(size - received, 65536))
        if not chunk:
            raise EOFError("the server closed the connection")
        chunks.append(chunk)
        received += len(chunk)
    return b"".join(chunks)


def _parse(wrapped: bytes, key_id: str) -> tuple[bytes, str, bytes, bytes, bytes]:
    """(header, uid, iv, tag, ciphertext) of a ``PKM1`` blob; ``KmsError`` naming the key id if malformed."""
    bad = KmsError(f"{PROVIDER}: the wrapped key for key id {key_id!r} is not a KMIP-wrapped key (PKM1)")
    if len(wrapped) < 7 or not wrapped.startswith(WRAPPED_MAGIC):
        raise bad
    (uid_length,) = _UID_LENGTH.unpack_from(wrapped, 4)
    end = 6 + uid_length
    if uid_length == 0 or len(wrapped) < end + 1:
        raise bad
    try:
        uid = wrapped[6:end].decode("utf-8")
    except UnicodeDecodeError:
        raise bad from None
    iv_length = wrapped[end]
    body = end + 1 + iv_length
    if iv_length == 0 or len(wrapped) <= body + TAG_LENGTH:
        raise bad
    return wrapped[:end], uid, wrapped[end + 1:body], wrapped[body:body + TAG_LENGTH], wrapped[body + TAG_LENGTH:]


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
    return f"{type(exc).__name__}: {text}"[:200]


def kmip_kms(properties: Mapping[str, str] | None = None) -> KmipKms:
    """Factory for ``load_kms("kmip", properties)``: :meth:`KmipKms.from_properties`."""
    return KmipKms.from_properties(properties or {})
