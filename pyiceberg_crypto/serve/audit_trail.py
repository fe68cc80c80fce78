"""The audit trail of ``kms serve``: one JSON line per KMS operation of every face, chained and
signed, so that a removed, altered, reordered or truncated line is found offline.

    trail = AuditTrail("/var/log/lake/kms-audit.jsonl", key=load_or_create_audit_key("/etc/lake/audit.key"))
    trail.write({"face": "aws", "principal": "aws:trino", "operation": "unwrap", ...})   # FileAccessError: refuse
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
permissions, a read-only directory at rotation) raises :class:`FileAccessError`: the service
refuses the operation (fail closed); bytes of a partial line are cut off before the next write.
Nothing written holds key bytes, blobs or secrets: callers pass names and ids only.

Group commit: a line is chained (``seq``, ``prev``) under the trail's lock, which is held only to
build it; the first caller that finds no write in progress writes every queued line in one
``write(2)``, the lock released meanwhile, and the others wait until the batch holding their line
is written. :meth:`AuditTrail.write` returns only once its line is in the file, as with one
``write(2)`` per line (the page cache; ``fsync`` at rotation and close, not per line or batch).
A batch that cannot be written fails every line in it and every line queued behind it (they
chain to it): each of those callers gets :class:`FileAccessError`, and the chain resumes after
the last line written.
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

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import FileAccessError, InvalidArgumentError

__all__ = ["GENESIS", "AuditTrail", "TrailReport", "load_or_create_audit_key",
           "rotated_files", "verify_trail"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"AuditKeyError": InvalidArgumentError, "AuditWriteError": FileAccessError})

#: The ``prev`` of a trail's first line.
GENESIS = "0" * 64
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_DIGEST_EVERY = 1000
DEFAULT_DIGEST_SECONDS = 60.0
_ROTATED = re.compile(r"\.(\d+)$")


def load_or_create_audit_key(path: str | os.PathLike) -> bytes:
    """The digest-signing key in ``path`` (32 random bytes, hex), made 0600 when absent;
    :class:`InvalidArgumentError` if it is readable by others or malformed."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise InvalidArgumentError(f"cannot create the audit key file {path}: {exc.strerror or exc}") from None
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
    try:
        info = os.stat(path, follow_symlinks=False)
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"cannot read the audit key file {path}: {exc}") from None
    if info.st_mode & 0o077:
        raise InvalidArgumentError(f"the audit key file {path} is readable or writable by others: chmod 600 it")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 16:
        raise InvalidArgumentError(f"the audit key file {path} does not hold a hex key of 16 bytes or more")
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
            raise InvalidArgumentError("the audit key must be 16 bytes or more")
        if not (isinstance(max_bytes, int) and max_bytes >= 1024 and isinstance(digest_every, int)
                and digest_every >= 1 and digest_seconds > 0):
            raise InvalidArgumentError("max_bytes must be >= 1024, digest_every >= 1, digest_seconds > 0")
        self.path = Path(path).absolute()
        self._key = key
        self.max_bytes, self.digest_every, self.digest_seconds = max_bytes, digest_every, digest_seconds
        self._lock = threading.Lock()
        self._written = threading.Condition(self._lock)  # a batch was written (or failed)
        self._writing = False  # a batch is being written (by the caller that took it)
        self._pending: list[bytes] = []  # lines chained, not yet written ...
        self._pending_slots: list[list] = []  # ... and their callers' slots
        self._pending_bytes = 0
        self._quote_cache: dict[str, str] = {}
        self._fd: int | None = None
        self._size = 0
        self._seq = 0
        self._prev = GENESIS
        self._written_head = (0, GENESIS)  # (seq, sha256) of the last line in the file
        self._since_digest = 0
        self._last_digest = time.monotonic()
        self._next_rotation = 1
        #: Lines that could not be written (the operations refused), over the service's life.
        self.failures = 0
        #: Lines written, and the write(2) calls that wrote them (group commit: fewer under load).
        self.lines = 0
        self.batches = 0

    # --- life cycle ---------------------------------------------------------------------------

    def open(self) -> AuditTrail:
        """Open (create 0600) the live file and continue its chain; :class:`FileAccessError` if it
        cannot be written or ends in a partial line (verify it, and move it away)."""
        with self._lock:
            rotated = rotated_files(self.path)
            self._next_rotation = int(_ROTATED.search(rotated[-1].name).group(1)) + 1 if rotated else 1
            last = _last_line(self.path) or (_last_line(rotated[-1]) if rotated else None)
            if last is not None:
                try:
                    self._seq = int(json.loads(last)["seq"])
                except (ValueError, KeyError, TypeError):
                    raise FileAccessError(f"the audit trail {self.path} ends in a line that is not one of its "
                                          "records (truncated?): run pyiceberg-crypto kms audit-log verify on it, "
                                          "then move it away") from None
                self._prev = hashlib.sha256(last).hexdigest()
            self._written_head = (self._seq, self._prev)
            self._open_file()
            self._write_locked({"kind": "start", "pid": os.getpid()})
            self._digest_locked()
        return self

    def _open_file(self) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise FileAccessError(f"cannot open the audit trail {self.path}: {_why(exc)}") from None
        try:
            info = os.fstat(fd)
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
        except OSError as exc:
            os.close(fd)
            raise FileAccessError(f"cannot make the audit trail {self.path} private (0600): {_why(exc)}") from None
        if info.st_size:
            with open(self.path, "rb") as existing:
                existing.seek(-1, os.SEEK_END)
                if existing.read(1) != b"\n":
                    os.close(fd)
                    raise FileAccessError(f"the audit trail {self.path} ends in a partial line: run pyiceberg-crypto "
                                          "kms audit-log verify on it, then move it away")
        self._fd, self._size = fd, info.st_size

    def close(self) -> None:
        """Write a last signed digest and close (idempotent; a failure is left unraised)."""
        with self._lock:
            if self._fd is None:
                return
            try:
                self._drain_locked()
                self._digest_locked(sync=True)
            except FileAccessError:
                pass
            os.close(self._fd)
            self._fd = None

    # --- writing ------------------------------------------------------------------------------

    def write(self, record: dict[str, Any]) -> str:
        """Append ``record`` (names and ids only, never secrets) with ``time``, ``seq`` and ``prev``;
        the line's SHA-256, once the line is written. :class:`FileAccessError` when it cannot be
        written whole (then the caller refuses the operation it records).

        Group commit: the line is chained under the lock (held only to build it), then the first
        caller that finds no write in progress writes every pending line in one write(2), the
        lock released meanwhile; the others wait until the batch holding their line is written
        (or failed). Same promise as one write(2) per line: nothing returns before its line is in
        the file (the kernel's page cache; fsync at rotation and close)."""
        body = _body(record)  # outside the lock: the lock holds only what orders the chain
        with self._lock:
            slot = self._append_locked(record, body)
            self._since_digest += 1
            if self._since_digest >= self.digest_every:
                self._append_digest_locked()
            self._commit_locked(slot)
            return slot[1]

    def write_operation(self, face: str, principal: str, peer: str, operation: str, key_id: str | None,
                        key_version: str | None, table: str | None, result: str, reason: str | None,
                        request_id: str, context: dict[str, str] | None = None) -> str:
        """:meth:`write` of one operation's record (the served KMS's hot path: the same line as
        ``write({"face": face, "principal": principal, ...})``, built without the generic encoder)."""
        quoted = self._quoted
        parts = [',"face":', quoted(face), ',"principal":', quoted(principal), ',"peer":', quoted(peer),
                 ',"operation":', quoted(operation)]
        if key_id is not None:
            parts += (',"key_id":', quoted(key_id))
        if key_version is not None:
            parts += (',"key_version":', quoted(key_version))
        if table is not None:
            parts += (',"table":', _STRING(table))
        parts += (',"result":', quoted(result))
        if reason is not None:
            parts += (',"reason":', quoted(reason))
        parts += (',"request_id":', _STRING(request_id))
        if context:
            parts += (',"encryption_context":', _ENCODE(context))
        body = "".join(parts)
        with self._lock:
            slot = self._append_locked(None, body)
            self._since_digest += 1
            if self._since_digest >= self.digest_every:
                self._append_digest_locked()
            self._commit_locked(slot)
            return slot[1]

    def _quoted(self, value: str) -> str:
        """``value`` as a JSON string (cached: principals, peers, key ids and reasons repeat; bounded)."""
        cache = self._quote_cache
        quoted = cache.get(value)
        if quoted is None:
            quoted = _STRING(value)
            if len(cache) < 4096:
                cache[value] = quoted
        return quoted

    def tick(self) -> None:
        """A signed digest if lines were written since the last one and ``digest_seconds`` passed
        (the service calls it every few seconds)."""
        with self._lock:
            if self._fd is not None and self._since_digest and \
                    time.monotonic() - self._last_digest >= self.digest_seconds:
                try:
                    self._commit_locked(self._append_digest_locked())
                except FileAccessError:
                    pass  # counted; the next operation's line tells again

    def _append_digest_locked(self) -> list:
        slot = self._append_locked({"kind": "digest", "hmac": _digest_mac(self._key, self._seq + 1, self._prev)})
        self._since_digest = 0
        self._last_digest = time.monotonic()
        return slot

    def _digest_locked(self, sync: bool = False) -> None:
        """A signed digest line, written now; ``sync``: then fsync the file (at rotation and close
        only: an fsync under the lock stalls every caller for milliseconds)."""
        self._write_locked({"kind": "digest", "hmac": _digest_mac(self._key, self._seq + 1, self._prev)})
        self._since_digest = 0
        self._last_digest = time.monotonic()
        if sync and self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError:
                pass

    def _write_locked(self, record: dict[str, Any], body: str | None = None) -> str:
        """Append ``record`` and write it (with every pending line) now, the lock held throughout
        (start, rotation, close: rare)."""
        slot = self._append_locked(record, body)
        self._drain_locked()
        if slot[0] is not True:
            raise FileAccessError(slot[0])
        return slot[1]

    def _append_locked(self, record: dict[str, Any] | None, body: str | None = None) -> list:
        """Chain ``record`` as the next line and queue it for the next batch; its slot
        ``[outcome, sha256]`` (outcome None until the batch is written: True, or why it was not)."""
        if self._fd is None:
            self.failures += 1
            raise FileAccessError(f"the audit trail {self.path} is not open")
        seq = self._seq + 1
        if body is None:
            body = _body(record)
        line = _line(seq, _now(), body, self._prev)
        data = line + b"\n"
        if self._size + self._pending_bytes + len(data) > self.max_bytes and (self._size or self._pending) \
                and (record is None or record.get("kind") != "digest"):
            self._drain_locked()
            self._rotate_locked()
            return self._append_locked(record, body)
        self._seq, self._prev = seq, hashlib.sha256(line).hexdigest()
        slot = [None, self._prev]
        self._pending.append(data)
        self._pending_slots.append(slot)
        self._pending_bytes += len(data)
        return slot

    def _commit_locked(self, slot: list) -> None:
        """Wait until the batch holding ``slot``'s line is written, writing it when no one else is
        (the lock is released while a batch is written and while waiting)."""
        while slot[0] is None:
            if self._writing:
                self._written.wait()
            else:
                self._flush_locked(release=True)
        if slot[0] is not True:
            raise FileAccessError(slot[0])

    def _drain_locked(self) -> None:
        """Every pending line written (or failed), the lock held (after any batch in progress);
        :class:`FileAccessError` if the pending lines could not be written."""
        while self._writing:
            self._written.wait()
        if self._pending:
            slot = self._pending_slots[-1]
            self._flush_locked(release=False)
            if slot[0] is not True:
                raise FileAccessError(slot[0])

    def _flush_locked(self, release: bool) -> None:
        """Write the pending lines in one write(2) (``release``: the lock released meanwhile, so
        that the next callers chain and queue theirs). On failure the batch's bytes are cut off,
        its lines and those queued behind it (chained to them) fail, and the chain resumes after
        the last line written."""
        batch, slots = self._pending, self._pending_slots
        self._pending, self._pending_slots, self._pending_bytes = [], [], 0
        head = (self._seq, self._prev)
        data = b"".join(batch) if len(batch) > 1 else batch[0]
        fd, size = self._fd, self._size
        self._writing = True
        if release:
            self._lock.release()
        try:
            try:
                written = os.write(fd, data)
                why = None if written == len(data) else "short write (disk full?)"
            except OSError as exc:
                why = _why(exc)
        finally:
            if release:
                self._lock.acquire()
            self._writing = False
        if why is None:
            self._size = size + len(data)
            self._written_head = head
            self.lines += len(slots)
            self.batches += 1
            for slot in slots:
                slot[0] = True
        else:
            self._cut_back()
            error = f"cannot write to the audit trail {self.path}: {why}"
            slots += self._pending_slots  # chained to the failed lines: they cannot be written either
            self._pending, self._pending_slots, self._pending_bytes = [], [], 0
            self._seq, self._prev = self._written_head
            self.failures += len(slots)
            for slot in slots:
                slot[0] = error
        self._written.notify_all()

    def _cut_back(self) -> None:
        """Remove the bytes of a partial batch (the chain resumes after the last whole line)."""
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
            raise FileAccessError(f"cannot rotate the audit trail {self.path}: {target} exists")
        try:
            os.rename(self.path, target)
        except OSError as exc:
            self.failures += 1
            raise FileAccessError(f"cannot rotate the audit trail {self.path}: {_why(exc)}") from None
        os.close(self._fd)
        self._fd = None
        self._next_rotation += 1
        try:
            self._open_file()
        except FileAccessError:
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
        raise FileAccessError(f"cannot read the audit trail {path}: {_why(exc)}") from None
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
