"""A KMS whose master keys live in a keystore file the user controls, with key rotation.

Create a keystore and a master key with the CLI (no key bytes are ever printed), then use it::

    pyiceberg-crypto keystore create /etc/lake/keys.json
    pyiceberg-crypto keystore add /etc/lake/keys.json orders-key
    pyiceberg-crypto keystore rotate /etc/lake/keys.json orders-key   # later: new version
    from pyiceberg_crypto.kms import KeystoreKms
    kms = KeystoreKms("/etc/lake/keys.json")
    register_kms(spark, kms)       # tables use TBLPROPERTIES ('encryption.key-id'='orders-key')

The file is JSON, mode 0600 (refused when group or others have any access), written atomically
under a lock. :meth:`KeystoreKms.wrap_key` uses a key id's newest version and records it in the
blob, so :meth:`~KeystoreKms.unwrap_key` keeps working after a rotation; a changed file is re-read.
The file format, compromised versions, writes and rotation in Iceberg: docs/kms/keystore.md.

**Wrapped-key format** (version 1, 36 bytes + key length; AES-GCM additional data
``b"PKW1" || version (4 bytes) || UTF-8 key id``)::

    offset  size  field
    0       4     magic and format version: b"PKW1"
    4       4     master key version, unsigned big-endian
    8       12    AES-GCM nonce (random)
    20      n+16  AES-GCM ciphertext of the key, then the 16-byte tag
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import stat
import struct
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pyiceberg_crypto._atomic import PRIVATE, write_atomically
from pyiceberg_crypto.kms import aws_face_blob
from pyiceberg_crypto.kms.base import KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.key_ids import PlainKeyIds, canonical_key_id
from pyiceberg_crypto.properties import AES_KEY_LENGTHS

__all__ = ["InsecureKeystoreError", "Keystore", "KeystoreError", "KeystoreKms", "MalformedKeystoreError",
           "MasterKeyVersion"]

FILE_FORMAT = "pyiceberg-crypto-keystore"
FILE_FORMAT_VERSION = 1
#: Environment variable naming the keystore file when no ``keystore.path`` property is given.
KEYSTORE_ENV = "PYICEBERG_CRYPTO_KEYSTORE"
#: KMS property naming the keystore file.
KEYSTORE_PATH_PROPERTY = "keystore.path"

WRAPPED_MAGIC = b"PKW1"
NONCE_LENGTH = 12
TAG_LENGTH = 16
_HEADER = struct.Struct(">4sI")  # magic, master key version
WRAPPED_OVERHEAD = _HEADER.size + NONCE_LENGTH + TAG_LENGTH
DEFAULT_KEY_LENGTH = 32


class KeystoreError(KmsError):
    """The keystore file cannot be used or changed; the message names the file and the fix."""


class InsecureKeystoreError(KeystoreError):
    """The keystore file is accessible to group or others."""


class MalformedKeystoreError(KeystoreError):
    """The keystore file is not a valid keystore (bad JSON, format, version or key)."""


@dataclass(frozen=True)
class MasterKeyVersion:
    """One version of a master key. ``repr`` never shows the key bytes."""

    key_id: str
    version: int
    created: str
    key: bytes = field(repr=False)
    compromised: str | None = None  # when it was marked compromised (ISO 8601 UTC); None: not marked

    @property
    def length(self) -> int:
        return len(self.key)


class Keystore:
    """The keystore file: load, check permissions, and change it atomically.

    ``Keystore(path).keys`` is a snapshot ``{key_id: [MasterKeyVersion, ...]}`` (oldest first).
    Changes (:meth:`add_key`, :meth:`rotate_key`) lock, re-read, write and return the new state.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    # --- reading ------------------------------------------------------------------------------

    def load(self) -> dict[str, list[MasterKeyVersion]]:
        """Read and validate the file; raise :class:`KeystoreError` naming the problem."""
        try:
            fd = os.open(self.path, os.O_RDONLY)  # symlinks allowed (e.g. mounted secrets)
        except FileNotFoundError:
            raise KeystoreError(
                f"keystore {self.path} does not exist "
                f"(create it with: pyiceberg-crypto keystore create {self.path})"
            ) from None
        except OSError as exc:
            raise KeystoreError(f"cannot open keystore {self.path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "rb") as handle:
            check_permissions(self.path, os.fstat(handle.fileno()))
            raw = handle.read()
        return _parse(self.path, raw)

    def signature(self) -> tuple[int, int, int] | None:
        """(inode, size, mtime) of the file, to notice changes by other processes; None if gone."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    # --- writing ------------------------------------------------------------------------------

    def create(self) -> None:
        """Create an empty keystore (mode 0600); refuse if the file exists."""
        with self._locked():
            if self.path.exists():
                raise KeystoreError(f"keystore {self.path} already exists; refusing to overwrite it")
            self._write({})

    def add_key(self, key_id: str, length: int = DEFAULT_KEY_LENGTH) -> MasterKeyVersion:
        """Add a new master key ``key_id`` (version 1) of ``length`` random bytes."""
        _check_key_id(key_id)
        if length not in AES_KEY_LENGTHS:
            raise KeystoreError(f"master key length must be 16, 24 or 32 bytes, got {length}")
        with self._locked():
            keys = self.load()
            if key_id in keys:
                raise KeystoreError(
                    f"key id {key_id!r} already exists in {self.path} "
                    f"(to make a new version: pyiceberg-crypto keystore rotate {self.path} {key_id})"
                )
            added = _new_version(key_id, 1, length)
            keys[key_id] = [added]
            self._write(keys)
            return added

    def rotate_key(self, key_id: str) -> MasterKeyVersion:
        """Add a new version of ``key_id`` (same length as its newest); old versions are kept."""
        with self._locked():
            keys = self.load()
            if key_id not in keys:
                raise UnknownKeyError(f"key id {key_id!r} is not in keystore {self.path}")
            newest = keys[key_id][-1]
            added = _new_version(key_id, newest.version + 1, newest.length)
            keys[key_id].append(added)
            self._write(keys)
            return added

    def remove_version(self, key_id: str, version: int, *, backup: bool = True) -> Path | None:
        """Delete one old version of ``key_id`` (retire it after every table was re-wrapped).

        Before the change, the file as it was is copied to a timestamped backup beside it (mode
        0600; its path is returned): a retired version is otherwise gone for good. Check first that
        no table needs the version (``pyiceberg-crypto keys where-used``; ``keystore retire`` does).
        The newest version is never removed (it wraps new keys). Raises UnknownKeyError for an
        unknown key id or version."""
        with self._locked():
            keys = self.load()
            versions = self._removable(keys, key_id, version)
            saved = self._backup() if backup else None
            keys[key_id] = [v for v in versions if v.version != version]
            self._write(keys)
            return saved

    def mark_compromised(self, key_id: str, version: int) -> MasterKeyVersion:
        """Record that ``version`` of ``key_id`` leaked (``pyiceberg-crypto keystore compromised``).

        The flag is stored in the file (the version's ``compromised`` time) and the bytes are kept:
        decryption goes on working until every table is re-encrypted (``keys reencrypt``); the
        audit and ``keys where-used --compromised`` name the tables that still depend on it.
        Marking again keeps the first time. Raises UnknownKeyError for an unknown key id or version."""
        with self._locked():
            keys = self.load()
            versions = keys.get(key_id)
            if not versions:
                raise UnknownKeyError(f"key id {key_id!r} is not in keystore {self.path}")
            found = [v for v in versions if v.version == version]
            if not found:
                raise UnknownKeyError(f"key id {key_id!r} has no version {version} in keystore {self.path} "
                                      f"(versions: {', '.join(str(v.version) for v in versions)})")
            if found[0].compromised:
                return found[0]
            marked = replace(found[0], compromised=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            keys[key_id] = [marked if v.version == version else v for v in versions]
            self._write(keys)
            return marked

    def check_removable(self, key_id: str, version: int) -> None:
        """Raise what :meth:`remove_version` would (unknown key id or version, the newest version)."""
        self._removable(self.load(), key_id, version)

    def _removable(self, keys: dict[str, list[MasterKeyVersion]], key_id: str, version: int) -> list[MasterKeyVersion]:
        versions = keys.get(key_id)
        if not versions:
            raise UnknownKeyError(f"key id {key_id!r} is not in keystore {self.path}")
        if version not in [v.version for v in versions]:
            raise UnknownKeyError(f"key id {key_id!r} has no version {version} in keystore {self.path} "
                                  f"(versions: {', '.join(str(v.version) for v in versions)})")
        if version == versions[-1].version:
            raise KeystoreError(f"version {version} is the newest of key id {key_id!r}: it wraps new keys and "
                                "cannot be retired (rotate first)")
        return versions

    def _backup(self) -> Path:
        """Copy the keystore as it is to ``<name>.<UTC time>.bak`` beside it (0600, never overwritten)."""
        data = self.path.read_bytes()
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for attempt in range(100):
            target = self.path.with_name(f"{self.path.name}.{stamp}{f'.{attempt}' if attempt else ''}.bak")
            try:
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                continue
            except OSError as exc:
                raise KeystoreError(f"cannot back up keystore {self.path} to {target}: {exc.strerror or exc}; "
                                    "nothing changed") from None
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            return target
        raise KeystoreError(f"cannot back up keystore {self.path}: too many backups named {stamp}; nothing changed")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive advisory lock on ``<path>.lock`` (serializes writers across processes)."""
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise KeystoreError(f"cannot lock keystore {self.path} ({lock_path}): {exc.strerror or exc}") from None
        try:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
                fcntl = None
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, keys: Mapping[str, list[MasterKeyVersion]]) -> None:
        """Write ``keys`` to a 0600 temporary file next to the keystore, fsync, rename over it."""
        document = {
            "format": FILE_FORMAT,
            "format-version": FILE_FORMAT_VERSION,
            "keys": {
                key_id: [
                    {"version": v.version, "created": v.created, "key": base64.b64encode(v.key).decode(),
                     **({"compromised": v.compromised} if v.compromised else {})}
                    for v in versions
                ]
                for key_id, versions in sorted(keys.items())
            },
        }
        data = (json.dumps(document, indent=2) + "\n").encode()
        try:
            write_atomically(self.path, data, mode=PRIVATE)
        except OSError as exc:
            raise KeystoreError(f"cannot write keystore {self.path}: {exc.strerror or exc}") from None


def check_permissions(path: Path, st: os.stat_result) -> None:
    """Refuse a keystore that group or others can access, with the command that fixes it."""
    if os.name != "posix":  # pragma: no cover - no POSIX modes to check
        return
    if not stat.S_ISREG(st.st_mode):
        raise KeystoreError(f"keystore {path} is not a regular file")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise InsecureKeystoreError(
            f"keystore {path} is accessible by group or others (mode {mode:04o}); "
            f"master keys must be private to their owner: run `chmod 600 {path}`"
        )


class KeystoreKms(PlainKeyIds, KeyManagementClient):
    """A :class:`KeyManagementClient` backed by a keystore file (see the module docs).

    Thread-safe: calls from many JVM threads at once are fine. The file is re-read when it changes
    on disk (e.g. ``pyiceberg-crypto keystore rotate`` or ``retire`` from another process): every
    wrap and unwrap checks its stat first, so a retired version stops unwrapping at once.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self._keystore = Keystore(path)
        self._lock = threading.Lock()
        self._signature: tuple[int, int, int] | None = None
        self._keys: dict[str, list[MasterKeyVersion]] = {}
        self._ciphers: dict[tuple[str, int], AESGCM] = {}
        self._refresh()

    @property
    def path(self) -> Path:
        return self._keystore.path

    @property
    def keystore(self) -> Keystore:
        """The underlying file (to add or rotate keys from Python)."""
        return self._keystore

    def key_ids(self) -> list[str]:
        """The master key ids in the keystore."""
        with self._lock:
            return sorted(self._keys)

    def versions(self, key_id: str) -> list[int]:
        """The versions of ``key_id``, oldest first."""
        with self._lock:
            return [v.version for v in self._versions(key_id)]

    def rotate_key(self, key_id: str) -> int:
        """Add a new version of ``key_id`` to the file and use it for new wraps; returns it."""
        added = self._keystore.rotate_key(key_id)
        self._refresh()
        return added.version

    def retire_version(self, key_id: str, version: int) -> Path | None:
        """Remove an old version of ``key_id`` from the file, after a backup (see
        :meth:`Keystore.remove_version`; check first with :mod:`pyiceberg_crypto.keys.where_used`)."""
        saved = self._keystore.remove_version(key_id, version)
        self._refresh()
        return saved

    # --- KeyManagementClient ------------------------------------------------------------------

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        """The master key version recorded in a ``PKW1`` blob (read from its header, no unwrap), also
        inside the AWS face's blob (:mod:`~pyiceberg_crypto.kms.aws_face_blob`, which wraps one)."""
        wrapped = bytes(wrapped)
        if aws_face_blob.is_face_blob(wrapped):
            try:
                wrapped = aws_face_blob.parse(wrapped)[1]
            except aws_face_blob.InvalidCiphertextError:
                return None
        if len(wrapped) < _HEADER.size or wrapped[:4] != WRAPPED_MAGIC:
            return None
        return str(_HEADER.unpack(wrapped[: _HEADER.size])[1])

    def compromised_versions(self, wrapping_key_id: str) -> frozenset[str]:
        """The versions of ``wrapping_key_id`` marked compromised in the keystore file
        (:meth:`Keystore.mark_compromised`); an unknown key id has none."""
        self._refresh()
        with self._lock:
            return frozenset(str(v.version) for v in self._keys.get(wrapping_key_id, ()) if v.compromised)

    def key_versions(self, wrapping_key_id: str) -> frozenset[str] | None:
        """The versions of ``wrapping_key_id`` in the keystore file (none for an unknown key id)."""
        self._refresh()
        with self._lock:
            return frozenset(str(v.version) for v in self._keys.get(wrapping_key_id, ()))

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        self._refresh()
        with self._lock:
            versions = self._versions(wrapping_key_id)
        return str(versions[-1].version)

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        self._refresh()
        with self._lock:
            newest = self._versions(wrapping_key_id)[-1]
            cipher = self._cipher(newest)
        header = _HEADER.pack(WRAPPED_MAGIC, newest.version)
        nonce = os.urandom(NONCE_LENGTH)
        return header + nonce + cipher.encrypt(nonce, bytes(key), _aad(header, wrapping_key_id))

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        wrapped = bytes(wrapped)
        if len(wrapped) <= WRAPPED_OVERHEAD or wrapped[:4] != WRAPPED_MAGIC:
            raise KmsError(
                f"wrapped key for key id {wrapping_key_id!r} is not a keystore wrapped key "
                f"(format {WRAPPED_MAGIC.decode()}, at least {WRAPPED_OVERHEAD + 1} bytes; got {len(wrapped)} bytes)"
            )
        header = wrapped[: _HEADER.size]
        _, version = _HEADER.unpack(header)
        # A stat of the file per unwrap (a few microseconds): a version retired or a key removed by
        # another process (``keystore retire``) stops unwrapping at once in a running service,
        # which may only ever unwrap (Trino) and so would otherwise never re-read the file.
        self._refresh()
        master = self._find_version(wrapping_key_id, version)
        with self._lock:
            cipher = self._cipher(master)
        nonce = wrapped[_HEADER.size : _HEADER.size + NONCE_LENGTH]
        try:
            return cipher.decrypt(nonce, wrapped[_HEADER.size + NONCE_LENGTH :], _aad(header, wrapping_key_id))
        except InvalidTag:
            raise KmsError(
                f"wrapped key does not authenticate under key id {wrapping_key_id!r} version {version} "
                "(tampered wrapped key, or wrapped for another key id or keystore: use the keystore the table "
                "was written with; a key of the same id added elsewhere is another key)"
            ) from None

    def __repr__(self) -> str:
        return f"KeystoreKms(path={str(self.path)!r}, key_ids={self.key_ids()})"

    def __reduce__(self):
        """Pickle as the path only (e.g. into Spark tasks): keys are re-read from the file there."""
        return (type(self), (str(self.path),))

    # --- internals ----------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Re-read the file if it changed on disk since the last read."""
        signature = self._keystore.signature()
        if signature is not None and signature == self._signature:
            return
        keys = self._keystore.load()  # raises with the reason (missing, insecure, malformed)
        with self._lock:
            self._keys = keys
            self._signature = signature
            self._ciphers = {k: c for k, c in self._ciphers.items() if _still_there(keys, k)}

    def _find_version(self, key_id: str, version: int) -> MasterKeyVersion:
        for attempt in range(2):
            with self._lock:
                for candidate in self._keys.get(key_id, ()):
                    if candidate.version == version:
                        return candidate
            if attempt == 0:
                self._refresh()  # another process may have rotated since we last read the file
        with self._lock:
            if key_id not in self._keys:  # unwrapping: a key added now is another key, it opens nothing written
                raise UnknownKeyError(
                    f"key id {key_id!r} is not in keystore {self.path}, so what it wrapped cannot be opened: this "
                    "keystore lacks the master key that wrapped this table's keys. Use the keystore the table was "
                    "written with (the keystore.path of its writers' KMS), or restore that file from its backup; "
                    "a key added now (keystore add) is a new random key and cannot open existing data")
            known = [v.version for v in self._keys[key_id]]
        raise UnknownKeyError(f"key id {key_id!r} has no version {version} in {self.path} (versions: {known}): use "
                              "the keystore the table was written with, or restore this one from its backup "
                              "(keystore retire writes one beside it)")

    def _versions(self, key_id: str) -> list[MasterKeyVersion]:
        try:
            return self._keys[key_id]
        except KeyError:
            raise UnknownKeyError(f"key id {key_id!r} is not in keystore {self.path} (add it: "
                                  f"pyiceberg-crypto keystore add {self.path} {key_id})") from None

    def _cipher(self, master: MasterKeyVersion) -> AESGCM:
        slot = (master.key_id, master.version)
        cipher = self._ciphers.get(slot)
        if cipher is None:
            cipher = self._ciphers[slot] = AESGCM(master.key)
        return cipher


def keystore_kms(properties: Mapping[str, str] | None = None) -> KeystoreKms:
    """Factory for ``load_kms("keystore", {"keystore.path": PATH})`` (or ``$PYICEBERG_CRYPTO_KEYSTORE``)."""
    path = (properties or {}).get(KEYSTORE_PATH_PROPERTY) or os.environ.get(KEYSTORE_ENV)
    if not path:
        raise KeystoreError(
            f"the keystore KMS needs a file: set the property {KEYSTORE_PATH_PROPERTY!r} "
            f"or the environment variable {KEYSTORE_ENV}"
        )
    return KeystoreKms(path)


# --- file format ------------------------------------------------------------------------------


def _aad(header: bytes, key_id: str) -> bytes:
    return header + key_id.encode("utf-8")


def _still_there(keys: Mapping[str, list[MasterKeyVersion]], slot: tuple[str, int]) -> bool:
    return any(v.version == slot[1] for v in keys.get(slot[0], ()))


def _new_version(key_id: str, version: int, length: int) -> MasterKeyVersion:
    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return MasterKeyVersion(key_id, version, created, os.urandom(length))


def _check_key_id(key_id: str) -> None:
    if not isinstance(key_id, str) or not key_id.strip() or key_id != key_id.strip():
        raise KeystoreError(f"key id must be a non-empty string without surrounding spaces, got {key_id!r}")
    if canonical_key_id(key_id) != key_id:
        raise KeystoreError(f"key id {key_id!r} is an alias or ARN form, which names key "
                            f"{canonical_key_id(key_id)!r} (pyiceberg_crypto.kms.key_ids): add that name instead")


def _parse(path: Path, raw: bytes) -> dict[str, list[MasterKeyVersion]]:
    def bad(reason: str) -> KeystoreError:
        return MalformedKeystoreError(f"keystore {path} is malformed: {reason}")

    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"not JSON ({type(exc).__name__} at byte {getattr(exc, 'pos', '?')})") from None
    if not isinstance(document, dict) or document.get("format") != FILE_FORMAT:
        raise bad(f"'format' must be {FILE_FORMAT!r}")
    if document.get("format-version") != FILE_FORMAT_VERSION:
        raise bad(f"unsupported format-version {document.get('format-version')!r} (this reader: 1)")
    entries = document.get("keys")
    if not isinstance(entries, dict):
        raise bad("'keys' must be an object of key id -> list of versions")
    keys: dict[str, list[MasterKeyVersion]] = {}
    for key_id, versions in entries.items():
        if not isinstance(versions, list) or not versions:
            raise bad(f"key id {key_id!r} has no versions")
        parsed = []
        for entry in versions:
            version = entry.get("version") if isinstance(entry, dict) else None
            if not isinstance(version, int) or isinstance(version, bool) or not 0 < version < 2**32:
                raise bad(f"key id {key_id!r} has a version that is not a positive 32-bit integer")
            try:
                key = base64.b64decode(entry.get("key", ""), validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise bad(f"key id {key_id!r} version {version}: 'key' is not base64") from None
            if len(key) not in AES_KEY_LENGTHS:
                raise bad(f"key id {key_id!r} version {version}: key must be 16, 24 or 32 bytes, got {len(key)}")
            compromised = entry.get("compromised")
            if compromised is not None and (not isinstance(compromised, str) or not compromised):
                raise bad(f"key id {key_id!r} version {version}: 'compromised' must be the time it was marked")
            parsed.append(MasterKeyVersion(key_id, version, str(entry.get("created", "")), key, compromised))
        parsed.sort(key=lambda v: v.version)
        if len({v.version for v in parsed}) != len(parsed):
            raise bad(f"key id {key_id!r} lists a version twice")
        keys[key_id] = parsed
    return keys
