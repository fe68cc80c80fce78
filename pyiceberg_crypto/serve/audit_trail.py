"""The audit trail of ``kms serve``: one JSON line per KMS operation of every face, chained and
signed, so that a removed, altered, reordered or truncated line is found offline.

    trail = AuditTrail("/var/log/lake/kms-audit.jsonl", key=load_or_create_audit_key("/etc/lake/audit.key"))
    trail.write({"face": "aws", "principal": "aws:trino", "operation": "unwrap", ...})   # AuditWriteError: refuse
    trail.close()
    report = verify_trail("/var/log/lake/kms-audit.jsonl", key=...)   # report.ok, report.problem

Each line is a JSON object with ``seq`` (1, 2, ... over the whole trail) and ``prev``, the SHA-256
(hex) of the previous line's bytes (without its newline); the first line of a trail has 64 zeros.
The chain runs across rotations: when the file reaches ``max_bytes`` it is renamed ``PATH.1``
(then ``PATH.2``, ... the oldest has the smallest number; none is ever deleted by the service)
and the next line, in a fresh ``PATH``, chains to the last line of the rotated file.

Every ``digest_every`` lines, at start, before a rotation, at close and at most
``digest_seconds`` after the last digest, a ``"kind": "digest"`` line carries
``hmac`` = HMAC-SHA256(key, ``"<seq>:<prev>"``) under a key kept apart from the log (its own file,
0600): rewriting the trail and its hashes from some line on needs that key to sign the next digest.

Files are created 0600 and only appended to. A line that cannot be written whole (disk full,
permissions, a read-only directory at rotation) raises :class:`AuditWriteError`: the service
refuses the operation (fail closed); bytes of a partial line are cut off before the next write.
Nothing written holds key bytes, blobs or secrets: callers pass names and ids only.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyiceberg_crypto.errors import InvalidArgumentError, PyicebergCryptoError

__all__ = ["GENESIS", "AuditKeyError", "AuditTrail", "AuditWriteError", "TrailReport", "load_or_create_audit_key",
           "rotated_files", "verify_trail"]

#: The ``prev`` of a trail's first line.
GENESIS = "0" * 64
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_DIGEST_EVERY = 1000
DEFAULT_DIGEST_SECONDS = 60.0
_ROTATED = re.compile(r"\.(\d+)$")


class AuditWriteError(PyicebergCryptoError, OSError):
    """A line of the audit trail could not be written: the operation it records is refused."""


class AuditKeyError(InvalidArgumentError):
    """The audit trail's signing key file cannot be read, made, or is unsafe (mode, size)."""


def load_or_create_audit_key(path: str | os.PathLike) -> bytes:
    """The digest-signing key in ``path`` (32 random bytes, hex), made 0600 when absent;
    :class:`AuditKeyError` if it is readable by others or malformed."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise AuditKeyError(f"cannot create the audit key file {path}: {exc.strerror or exc}") from None
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
    try:
        info = os.stat(path, follow_symlinks=False)
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise AuditKeyError(f"cannot read the audit key file {path}: {exc}") from None
    if info.st_mode & 0o077:
        raise AuditKeyError(f"the audit key file {path} is readable or writable by others: chmod 600 it")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise AuditKeyError(f"the audit key file {path} does not hold a hex key of 16 bytes or more")
    return key


def rotated_files(path: str | os.PathLike) -> list[Path]:
    """The rotated files of the trail at ``path`` (``PATH.1``, ``PATH.2``...), oldest first."""
    path = Path(path)
    found = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    for name in names:
        if name.startswith(path.name + "."):
            match = _ROTATED.fullmatch(name[len(path.name):])
            if match:
                found.append((int(match.group(1)), path.parent / name))
    return [p for _, p in sorted(found)]


def _digest_mac(key: bytes, seq: int, prev: str) -> str:
    return hmac.new(key, f"{seq}:{prev}".encode(), hashlib.sha256).hexdigest()


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
_STRING = json.encoder.encode_basestring_ascii


def _body(record: dict[str, Any]) -> str:
    """The fields of ``record`` as JSON object members (``,"key":value``...), fields whose value is
    None left out (ASCII, as ``json.dumps(..., separators=(",", ":"))`` writes them)."""
    parts = []
    for key, value in record.items():
        if value is None:  # unknown (a key version, a table): left out, the line stays short
            continue
        if type(value) is str:
            parts.append(f',"{key}":{_STRING(value)}')
        else:
            parts.append(f',{_STRING(key)}:{_ENCODE(value)}')
    return "".join(parts)


def _line(seq: int, stamp: str, body: str, prev: str) -> bytes:
    """One line of the trail: ``{"seq":..,"time":..,<body>,"prev":..}``."""
    return f'{{"seq":{seq},"time":"{stamp}"{body},"prev":"{prev}"}}'.encode()
_second: list = [None, ""]  # the last whole second formatted (one strftime per second, not per line)


def _now() -> str:
    """UTC time with microseconds, ``2026-11-28T10:41:07.512210Z``."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second[0] = second
    return f"{_second[1]}.{int((now - second) * 1_000_000):06d}Z"


class AuditTrail:
    """The append-only, chained, signed JSON-lines trail at ``path`` (see module doc).

    Args:
        path: the live file (rotated ones beside it). key: the digest-signing key.
        max_bytes: rotate once the live file is this large. digest_every / digest_seconds: how often
            a signed digest line is written (lines / seconds, whichever first).
    """

    def __init__(self, path: str | os.PathLike, key: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 digest_every: int = DEFAULT_DIGEST_EVERY, digest_seconds: float = DEFAULT_DIGEST_SECONDS):
        if not isinstance(key, bytes) or len(key) < 16:
            raise AuditKeyError("the audit key must be 16 bytes or more")
        if not (isinstance(max_bytes, int) and max_bytes >= 1024 and isinstance(digest_every, int)
                and digest_every >= 1 and digest_seconds > 0):
            raise InvalidArgumentError("max_bytes must be >= 1024, digest_every >= 1, digest_seconds > 0")
        self.path = Path(path).absolute()
        self._key = key
        self.max_bytes, self.digest_every, self.digest_seconds = max_bytes, digest_every, digest_seconds
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        self._seq = 0
        self._prev = GENESIS
        self._since_digest = 0
        self._last_digest = time.monotonic()
        self._next_rotation = 1
        #: Lines that could not be written (the operations refused), over the service's life.
        self.failures = 0
        self.lines = 0

    # --- life cycle ---------------------------------------------------------------------------

    def open(self) -> AuditTrail:
        """Open (create 0600) the live file and continue its chain; :class:`AuditWriteError` if it
        cannot be written or ends in a partial line (verify it, and move it away)."""
        with self._lock:
            rotated = rotated_files(self.path)
            self._next_rotation = int(_ROTATED.search(rotated[-1].name).group(1)) + 1 if rotated else 1
            last = _last_line(self.path) or (_last_line(rotated[-1]) if rotated else None)
            if last is not None:
                try:
                    self._seq = int(json.loads(last)["seq"])
                except (ValueError, KeyError, TypeError):
                    raise AuditWriteError(f"the audit trail {self.path} ends in a line that is not one of its "
                                          "records (truncated?): run pyiceberg-crypto kms audit-log verify on it, "
                                          "then move it away") from None
                self._prev = hashlib.sha256(last).hexdigest()
            self._open_file()
            self._write_locked({"kind": "start", "pid": os.getpid()})
            self._digest_locked()
        return self

    def _open_file(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise AuditWriteError(f"cannot open the audit trail {self.path}: {_why(exc)}") from None
        try:
            info = os.fstat(fd)
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
        except OSError as exc:
            os.close(fd)
            raise AuditWriteError(f"cannot make the audit trail {self.path} private (0600): {_why(exc)}") from None
        if info.st_size:
            with open(self.path, "rb") as existing:
                existing.seek(-1, os.SEEK_END)
                if existing.read(1) != b"\n":
                    os.close(fd)
                    raise AuditWriteError(f"the audit trail {self.path} ends in a partial line: run pyiceberg-crypto "
                                          "kms audit-log verify on it, then move it away")
        self._fd, self._size = fd, info.st_size

    def close(self) -> None:
        """Write a last signed digest and close (idempotent; a failure is left unraised)."""
        with self._lock:
            if self._fd is None:
                return
            try:
                self._digest_locked(sync=True)
            except AuditWriteError:
                pass
            os.close(self._fd)
            self._fd = None

    # --- writing ------------------------------------------------------------------------------

    def write(self, record: dict[str, Any]) -> str:
        """Append ``record`` (names and ids only, never secrets) with ``time``, ``seq`` and ``prev``;
        the line's SHA-256. :class:`AuditWriteError` when it cannot be written whole."""
        body = _body(record)  # outside the lock: the lock holds only what orders the chain
        with self._lock:
            digest = self._write_locked(record, body)
            self._since_digest += 1
            if self._since_digest >= self.digest_every:
                self._digest_locked()
            return digest

    def tick(self) -> None:
        """A signed digest if lines were written since the last one and ``digest_seconds`` passed
        (the service calls it every few seconds)."""
        with self._lock:
            if self._fd is not None and self._since_digest and \
                    time.monotonic() - self._last_digest >= self.digest_seconds:
                try:
                    self._digest_locked()
                except AuditWriteError:
                    pass  # counted; the next operation's line tells again

    def _digest_locked(self, sync: bool = False) -> None:
        """A signed digest line; ``sync``: then fsync the file (at rotation and close only: an fsync
        under the lock stalls every caller for milliseconds)."""
        self._write_locked({"kind": "digest", "hmac": _digest_mac(self._key, self._seq + 1, self._prev)})
        self._since_digest = 0
        self._last_digest = time.monotonic()
        if sync and self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError:
                pass

    def _write_locked(self, record: dict[str, Any], body: str | None = None) -> str:
        if self._fd is None:
            self.failures += 1
            raise AuditWriteError(f"the audit trail {self.path} is not open")
        seq = self._seq + 1
        if body is None:
            body = _body(record)
        line = _line(seq, _now(), body, self._prev)
        data = line + b"\n"
        if self._size + len(data) > self.max_bytes and self._size and record.get("kind") != "digest":
            self._rotate_locked()
            return self._write_locked(record, body)
        try:
            written = os.write(self._fd, data)
        except OSError as exc:
            self._cut_back()
            self.failures += 1
            raise AuditWriteError(f"cannot write to the audit trail {self.path}: {_why(exc)}") from None
        if written != len(data):
            self._cut_back()
            self.failures += 1
            raise AuditWriteError(f"cannot write to the audit trail {self.path}: short write (disk full?)")
        self._size += written
        self._seq, self._prev = seq, hashlib.sha256(line).hexdigest()
        self.lines += 1
        return self._prev

    def _cut_back(self) -> None:
        """Remove the bytes of a partial line (the chain resumes after the last whole one)."""
        try:
            if os.fstat(self._fd).st_size > self._size:
                os.ftruncate(self._fd, self._size)
        except OSError:
            pass

    def _rotate_locked(self) -> None:
        """The live file becomes ``PATH.N`` (after a signed digest); a fresh one continues the chain."""
        self._digest_locked(sync=True)
        target = self.path.with_name(f"{self.path.name}.{self._next_rotation}")
        if os.path.lexists(target):
            self.failures += 1
            raise AuditWriteError(f"cannot rotate the audit trail {self.path}: {target} exists")
        try:
            os.rename(self.path, target)
        except OSError as exc:
            self.failures += 1
            raise AuditWriteError(f"cannot rotate the audit trail {self.path}: {_why(exc)}") from None
        os.close(self._fd)
        self._fd = None
        self._next_rotation += 1
        try:
            self._open_file()
        except AuditWriteError:
            self.failures += 1
            raise
        self._write_locked({"kind": "rotated", "from": target.name})


def _why(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno, "") if exc.errno else ""
    return f"{name} {exc.strerror}".strip() if exc.strerror else str(exc)


def _last_line(path: Path) -> bytes | None:
    """The last whole line of ``path`` without its newline (None: no file, or empty)."""
    try:
        with open(path, "rb") as source:
            source.seek(0, os.SEEK_END)
            size = source.tell()
            if not size:
                return None
            chunk = b""
            at = size
            while at > 0:
                step = min(65536, at)
                at -= step
                source.seek(at)
                chunk = source.read(step) + chunk
                if chunk.count(b"\n") >= 2 or at == 0:
                    break
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AuditWriteError(f"cannot read the audit trail {path}: {_why(exc)}") from None
    body = chunk[:-1] if chunk.endswith(b"\n") else chunk
    return body.rsplit(b"\n", 1)[-1]


@dataclass
class TrailReport:
    """What :func:`verify_trail` found: ``ok``, the first ``problem`` (file, line, what), counts."""

    ok: bool
    problem: str
    files: int
    lines: int
    digests: int
    signatures_checked: bool

    def summary(self) -> str:
        if not self.ok:
            return f"NOT INTACT: {self.problem}"
        signed = "signatures checked" if self.signatures_checked else "signatures NOT checked (no --key-file)"
        return f"intact: {self.lines} lines in {self.files} file(s), {self.digests} signed digests ({signed})"


def verify_trail(path: str | os.PathLike, key: bytes | None = None) -> TrailReport:
    """Check the trail at ``path`` (its rotated files first): the chain, the sequence numbers, and
    with ``key`` every digest's signature. The report names the first removed, altered, reordered or
    truncated line. :class:`InvalidArgumentError` when ``path`` has no trail at all."""
    path = Path(path)
    files = rotated_files(path)
    numbers = [int(_ROTATED.search(f.name).group(1)) for f in files]
    if path.exists():
        files.append(path)
    if not files:
        raise InvalidArgumentError(f"no audit trail at {path} (nor rotated files {path.name}.N beside it)")
    lines = digests = 0
    if numbers and numbers != list(range(1, len(numbers) + 1)):
        missing = sorted(set(range(1, max(numbers) + 1)) - set(numbers))
        return TrailReport(False, f"rotated file {path.name}.{missing[0]} is missing (removed)", len(files), 0, 0,
                           key is not None)
    entries: list[tuple[Path, int, bytes]] = []
    for file in files:
        try:
            data = file.read_bytes()
        except OSError as exc:
            return TrailReport(False, f"{file}: unreadable ({_why(exc)})", len(files), 0, 0, key is not None)
        partial = bool(data) and not data.endswith(b"\n")
        if partial and file != files[-1]:
            return TrailReport(False, f"{file} line {len(data.splitlines())}: truncated (a partial last line)",
                               len(files), 0, 0, key is not None)
        if partial:
            data = data[:data.rfind(b"\n") + 1]
        for number, line in enumerate(data.split(b"\n")[:-1], start=1):
            entries.append((file, number, line))
        if partial:
            entries.append((file, -1, b""))
    prev, expected_seq = None, None
    records: list[dict | None] = []
    for _, _, line in entries:
        try:
            parsed = json.loads(line) if line else None
        except ValueError:
            parsed = None
        records.append(parsed if isinstance(parsed, dict) else None)
    for index, (file, number, line) in enumerate(entries):
        where = f"{file} line {number}"
        if number == -1:
            return TrailReport(False, f"{file}: truncated (a partial last line)", len(files), lines, digests,
                               key is not None)
        record = records[index]
        if record is None or not isinstance(record.get("seq"), int) or not isinstance(record.get("prev"), str):
            return TrailReport(False, f"{where}: altered (not a record of the trail)", len(files), lines, digests,
                               key is not None)
        seq = record["seq"]
        if prev is None:
            if seq != 1 or record["prev"] != GENESIS:
                return TrailReport(False, f"{where}: the trail starts at seq {seq}, not at seq 1 with prev 0...0 "
                                          "(earlier lines or files removed, or this line altered)",
                                   len(files), lines, digests, key is not None)
        else:
            if seq != expected_seq or record["prev"] != prev:
                problem = _explain(entries, records, index, expected_seq, prev)
                return TrailReport(False, problem, len(files), lines, digests, key is not None)
        if record.get("kind") == "digest":
            digests += 1
            if key is not None and not hmac.compare_digest(str(record.get("hmac", "")),
                                                           _digest_mac(key, seq, record["prev"])):
                return TrailReport(False, f"{where}: the signed digest does not match (the trail before it was "
                                          "rewritten, or another key)", len(files), lines, digests, True)
        prev = hashlib.sha256(line).hexdigest()
        expected_seq = seq + 1
        lines += 1
    return TrailReport(True, "", len(files), lines, digests, key is not None)


def _explain(entries, records, index: int, expected_seq: int, prev: str) -> str:
    file, number, _ = entries[index]
    seq = records[index]["seq"]
    where = f"{file} line {number}"
    before_file, before_number, _ = entries[index - 1]
    if seq == expected_seq:  # in sequence, but the previous line's bytes changed (or this prev)
        return f"{before_file} line {before_number}: altered (line {number} of {file.name} chains to other bytes)"
    if seq > expected_seq:
        later = [r["seq"] for r in records[index + 1:] if r is not None and isinstance(r.get("seq"), int)]
        if any(expected_seq <= s < seq for s in later):
            return f"{where}: reordered (seq {seq} where seq {expected_seq} was due)"
        count = seq - expected_seq
        return f"{where}: {count} line(s) removed before it (seq {expected_seq}..{seq - 1} missing)"
    return f"{where}: reordered (seq {seq} after seq {expected_seq - 1})"
