"""The audit trail of ``kms serve``: one JSON line per KMS operation of every face, chained and
signed, so that a removed, altered, reordered or truncated line, a removed digest or file, and a
cut tail are found offline.

    trail = AuditTrail("/var/log/lake/kms-audit.jsonl", key=load_or_create_audit_key("/etc/lake/audit.key"),
                       witness="/mnt/other-disk/kms-audit.witness").open()
    trail.write({"face": "aws", "principal": "aws:trino", "operation": "unwrap", ...})   # FileAccessError: refuse
    trail.close()                                                                          # the stop digest
    report = verify_trail("/var/log/lake/kms-audit.jsonl", key=..., witness=...)   # report.verified, report.problem

Each line carries ``seq`` and ``prev`` (the SHA-256 of the line before it), across rotations
(``PATH.1``, ``PATH.2``, ... never deleted by the service). Format 2: digests form their own
signed chain (each names the previous one and the lines and file it covers), a start line records
the cadence and what a restart found at the tail, a stop digest ends each run, and an optional
witness receives each digest. Lines are written in group commits. The formats, the writing, what
:func:`verify_trail` proves and what it cannot (lines after the last witnessed digest):
docs/how-to/govern-keys.md#how-the-trail-is-written. A line that cannot be written whole raises
:class:`FileAccessError` and the service refuses the operation (fail closed).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import FileAccessError, InvalidArgumentError
from pyiceberg_crypto.listener.files import check_operator_directory, read_operator_file

__all__ = ["GENESIS", "AuditTrail", "TrailReport", "load_or_create_audit_key",
           "rotated_files", "trail_account", "verify_trail"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"AuditKeyError": InvalidArgumentError, "AuditWriteError": FileAccessError})

#: The ``prev`` of a trail's first line (and the ``prev_digest`` of its first format 2 digest).
GENESIS = "0" * 64
#: The trail format this version writes (``"format"`` of its start lines).
FORMAT = 2
DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_DIGEST_EVERY = 1000
DEFAULT_DIGEST_SECONDS = 60.0
#: When a digest is written besides every N lines and M seconds (the start line says so).
DIGEST_AT = ("start", "rotation", "stop")
_ROTATED = re.compile(r"\.(\d+)$")

log = logging.getLogger("pyiceberg_crypto.kms.serve")


def _open_for_append(path: Path, what: str) -> int:
    """``path`` opened to append to (made 0600 when new, never through a symlink), once its directory
    passed the operator-file check; FileAccessError naming ``what`` otherwise. The caller checks the file."""
    _check_directory(path.parent, what, FileAccessError)
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise FileAccessError(f"cannot open the {what} {path}: {_symlink_or(exc)}") from None


def _check_directory(directory: Path, what: str, error: type[Exception]) -> None:
    """The operator-file check of ``directory`` (:func:`~pyiceberg_crypto.listener.files.check_operator_directory`:
    owned by this user or root, not writable by others), a directory writable by others accepted
    only with the sticky bit (others cannot rename or remove this user's files in it). A missing
    directory is left to the open that follows (its error names it)."""
    try:
        info = os.stat(directory)
    except OSError:
        return
    try:
        if info.st_mode & stat.S_ISVTX and info.st_uid in (os.geteuid(), 0):
            return
        check_operator_directory(directory, what)
    except FileAccessError as exc:
        raise error(f"{exc}") from None


def _check_file(fd: int, path: Path, what: str, error: type[Exception]) -> os.stat_result:
    """The operator-file check of an open file: a regular file of this user, not writable by others."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise error(f"the {what} {path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise error(f"the {what} {path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()}): "
                    "refused, another user may have planted or rewritten it")
    if info.st_mode & 0o022:
        raise error(f"the {what} {path} is writable by other users (mode {stat.S_IMODE(info.st_mode):o}): "
                    "refused, chmod 600 it once you have checked it")
    return info


def load_or_create_audit_key(path: str | os.PathLike, *, create: bool = True) -> bytes:
    """The digest-signing key in ``path`` (32 random bytes, hex), made 0600 when absent (``create``);
    :class:`InvalidArgumentError` if it is unsafe (a symlink, another user's, readable by others, in a
    directory others can write) or malformed. ``create=False`` (``audit-log verify --key-file``):
    read only, the owner not checked (an auditor may verify as another user)."""
    path = Path(path)
    if create:
        if not path.parent.is_dir():
            raise InvalidArgumentError(f"cannot create the audit key file {path}: its directory {path.parent} does not exist")
        _check_directory(path.parent.absolute(), "audit key", InvalidArgumentError)
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
            data = read_operator_file(path, "audit key file", private=True, limit=4096)
        except FileAccessError as exc:
            raise InvalidArgumentError(str(exc)) from None
    else:
        try:
            info = os.stat(path, follow_symlinks=False)
            data = path.read_bytes()[:4097]
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read the audit key file {path}: {exc.strerror or exc}") from None
        if info.st_mode & 0o077:
            raise InvalidArgumentError(f"the audit key file {path} is readable or writable by others: chmod 600 it")
    try:
        key = bytes.fromhex(data.decode().strip())
    except (ValueError, UnicodeDecodeError):
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
    """Format 1's signature: of ``"<seq>:<prev>"``."""
    return hmac.new(key, f"{seq}:{prev}".encode(), hashlib.sha256).hexdigest()


def _digest_mac2(key: bytes, seq: int, stamp: str, prev: str, n: int, reason: str, first: int, last: int,
                 file: int, prev_digest: str) -> str:
    """Format 2's signature: of every field of the digest line but ``hmac`` (see module doc)."""
    message = json.dumps(["digest", FORMAT, seq, stamp, prev, n, reason, first, last, file, prev_digest],
                         separators=(",", ":"))
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def _record_mac(key: bytes, record: dict) -> str | None:
    """The signature a digest record should carry (None: its fields are not those of a digest)."""
    try:
        if "n" not in record:
            return _digest_mac(key, record["seq"], record["prev"])
        first, last = record["lines"]
        return _digest_mac2(key, record["seq"], record["time"], record["prev"], record["n"], record["reason"],
                            first, last, record["file"], record["prev_digest"])
    except (KeyError, TypeError, ValueError):
        return None


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


@dataclass
class _Tail:
    """What :meth:`AuditTrail.open` found at the end of an existing trail."""

    seq: int = 0
    prev: str = GENESIS
    digests: int = 0  # the number (n) of the last format 2 digest, 0 if none
    prev_digest: str = GENESIS  # its hmac
    digest_seq: int = 0  # the seq of the last digest (any format), 0 if none
    unsigned: int = 0  # lines after it
    stopped: bool = False  # the last line is a stop digest
    mismatch: str | None = None  # why the tail does not match its last digest
    found: bool = False  # the trail had lines


class AuditTrail:
    """The append-only, chained, signed JSON-lines trail at ``path`` (see module doc).

    Args:
        path: the live file (rotated ones beside it). key: the digest-signing key.
        max_bytes: rotate once the live file is this large. digest_every / digest_seconds: how often
            a signed digest line is written (lines / seconds, whichever first).
        witness: a file (ideally on another disk or host) that receives a copy of each signed digest.
    """

    def __init__(self, path: str | os.PathLike, key: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 digest_every: int = DEFAULT_DIGEST_EVERY, digest_seconds: float = DEFAULT_DIGEST_SECONDS,
                 witness: str | os.PathLike | None = None, replica: str | None = None):
        if not isinstance(key, bytes) or len(key) < 16:
            raise InvalidArgumentError("the audit key must be 16 bytes or more")
        if not (isinstance(max_bytes, int) and max_bytes >= 1024 and isinstance(digest_every, int)
                and digest_every >= 1 and digest_seconds > 0):
            raise InvalidArgumentError("max_bytes must be >= 1024, digest_every >= 1, digest_seconds > 0")
        self.path = Path(path).absolute()
        self.witness = Path(witness).absolute() if witness is not None else None
        if self.witness is not None and self.witness.parent == self.path.parent:
            log.warning("the audit witness %s is in the audit trail's directory: keep it on another disk or host "
                        "(whoever can cut the trail should not reach the witness)", self.witness)
        self._key = key
        # one of several replicas: its id on every record it writes (``"replica"``), so that their
        # trails together are one account (:func:`trail_account`)
        self.replica = replica
        self.max_bytes, self.digest_every, self.digest_seconds = max_bytes, digest_every, float(digest_seconds)
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
        # The digest chain: the last digest's number, its hmac, and the seq of the last digest line.
        self._digest_n, self._prev_digest, self._digest_seq = 0, GENESIS, 0
        # The same and the lines since that digest, as of the last line in the file.
        self._written_head = (0, GENESIS, 0, GENESIS, 0, 0)
        self._since_digest = 0
        self._last_digest = time.monotonic()
        self._next_rotation = 1
        self._closed = False
        self._reopen_from: str | None = None  # a rotation renamed the live file; the next one is not open yet
        self._refused_closed = 0  # lines refused while the trail could not be reopened
        self._witness_fd: int | None = None
        self._witness_backlog: list[bytes] = []  # signed digests the witness has not received yet
        #: Lines that could not be written (the operations refused), over the service's life.
        self.failures = 0
        #: Signed digests that could not be written to the witness (retried with the next one).
        self.witness_failures = 0
        #: Lines written, and the write(2) calls that wrote them (group commit: fewer under load).
        self.lines = 0
        self.batches = 0

    # --- life cycle ---------------------------------------------------------------------------

    def open(self) -> AuditTrail:
        """Check the existing tail (see module doc), open (create 0600) the live file, write the start
        line and its digest. :class:`FileAccessError` if it cannot be written, is unsafe (another
        user's, writable by others, a symlink), is written by another running service, or ends in a
        partial line or a line that is not a record (verify it, and move it away)."""
        with self._lock:
            _check_directory(self.path.parent, "audit trail", FileAccessError)
            rotated = rotated_files(self.path)
            for file in rotated:
                _check_path(file, "audit trail file", FileAccessError)
            self._next_rotation = int(_ROTATED.search(rotated[-1].name).group(1)) + 1 if rotated else 1
            self._open_file()
            try:
                tail = self._read_tail(rotated)
                if self.witness is not None:
                    self._open_witness()
                    self._check_witness(tail)
            except BaseException:
                self._close_fd()
                raise
            self._seq, self._prev = tail.seq, tail.prev
            self._digest_n, self._prev_digest, self._digest_seq = tail.digests, tail.prev_digest, tail.digest_seq
            self._since_digest = tail.unsigned
            self._written_head = (self._seq, self._prev, self._digest_n, self._prev_digest, self._digest_seq,
                                  self._since_digest)
            start: dict[str, Any] = {"kind": "start", "format": FORMAT, "pid": os.getpid(),
                                     "digest_every": self.digest_every, "digest_seconds": self.digest_seconds,
                                     "digest_at": list(DIGEST_AT)}
            if tail.found:
                start.update(after_digest=tail.digests, previous_stop=tail.stopped, unsigned_lines=tail.unsigned)
                if tail.mismatch:
                    start["tail_mismatch"] = f"resumed after a tail that does not match digest {tail.digests}: " \
                                             f"{tail.mismatch}"
                    log.error("the audit trail %s: %s (recorded in the trail; verify will report it)", self.path,
                              start["tail_mismatch"])
                elif not tail.stopped:
                    log.warning("the audit trail %s did not end with a stop digest (the service was killed?): "
                                "%d line(s) after digest %d resumed as they are (recorded in the start line)",
                                self.path, tail.unsigned, tail.digests)
            try:
                self._write_locked(start)
                self._digest_locked("start")
            except BaseException:
                self._close_fd()
                raise
        return self

    def _read_tail(self, rotated: list[Path]) -> _Tail:
        """The chain's head, the last digest and what follows it (see module doc: restart)."""
        tail = _Tail()
        files = [*rotated[-2:], self.path] if self.path.exists() else rotated[-2:]
        entries: list[tuple[Path, bytes]] = []
        for file in reversed(files):
            try:
                data = file.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise FileAccessError(f"cannot read the audit trail {file}: {_why(exc)}") from None
            lines = [(file, line) for line in data.split(b"\n")[:-1]]
            entries[:0] = lines
            if any(b'"kind":"digest"' in line for _, line in lines):
                break
        if not entries:
            return tail
        tail.found = True
        records = []
        for _, line in entries:
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            records.append(record if isinstance(record, dict) else None)
        last = records[-1]
        if last is None or not isinstance(last.get("seq"), int):
            raise FileAccessError(f"the audit trail {entries[-1][0]} ends in a line that is not one of its records "
                                  "(truncated?): run pyiceberg-crypto kms audit-log verify on it, then move it away")
        tail.seq, tail.prev = last["seq"], hashlib.sha256(entries[-1][1]).hexdigest()
        at = next((i for i in range(len(records) - 1, -1, -1)
                   if records[i] is not None and records[i].get("kind") == "digest"), None)
        if at is None:
            tail.unsigned = len(records)
            tail.mismatch = f"no digest in its last {len(entries)} line(s) ({', '.join(sorted({f.name for f, _ in entries}))})"
            return tail
        digest = records[at]
        tail.digest_seq = digest.get("seq") if isinstance(digest.get("seq"), int) else 0
        if isinstance(digest.get("n"), int):
            tail.digests, tail.prev_digest = digest["n"], str(digest.get("hmac", ""))
        tail.unsigned = len(records) - at - 1
        tail.stopped = at == len(records) - 1 and digest.get("reason") == "stop"
        expected = _record_mac(self._key, digest)
        if expected is None or not hmac.compare_digest(str(digest.get("hmac", "")), expected):
            tail.mismatch = f"its signature does not check (line seq {tail.digest_seq}: rewritten, or another key)"
            return tail
        prev, seq = hashlib.sha256(entries[at][1]).hexdigest(), tail.digest_seq
        for (file, line), record in zip(entries[at + 1:], records[at + 1:]):
            seq += 1
            if record is None or record.get("seq") != seq or record.get("prev") != prev:
                tail.mismatch = f"the lines after it do not chain to it (at seq {seq} in {file.name})"
                return tail
            prev = hashlib.sha256(line).hexdigest()
        return tail

    def _open_witness(self) -> None:
        fd = _open_for_append(self.witness, "audit witness")
        try:
            _check_file(fd, self.witness, "audit witness", FileAccessError)
        except BaseException:
            os.close(fd)
            raise
        self._witness_fd = fd

    def _check_witness(self, tail: _Tail) -> None:
        """The witness's last digest against the trail's: a later one means the trail was cut."""
        last = _last_line(self.witness)
        if last is None or tail.mismatch:
            return
        try:
            record = json.loads(last)
            n, seq = int(record["n"]), int(record["seq"])
        except (ValueError, KeyError, TypeError):
            tail.mismatch = f"the witness {self.witness} ends in a line that is not a digest"
            return
        if n > tail.digests or seq > tail.seq:
            tail.found = True
            tail.mismatch = (f"the witness {self.witness} holds digest {n} (seq {seq}), which the trail does not reach "
                             f"(it ends at seq {tail.seq}, digest {tail.digests}): the trail was cut")
        elif n == tail.digests and hmac.compare_digest(str(record.get("hmac")), tail.prev_digest) is False:
            tail.mismatch = f"the witness {self.witness} holds another digest {n} than the trail"

    def _open_file(self) -> None:
        fd = _open_for_append(self.path, "audit trail")
        try:
            info = _check_file(fd, self.path, "audit trail", FileAccessError)
            for attempt in range(50):  # a verify holds a shared lock for an instant: not a service
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == 49:
                        raise FileAccessError(f"the audit trail {self.path} is being written by another running "
                                              "service (it holds the file's lock): one trail per service") from None
                    time.sleep(0.02)
            if info.st_mode & 0o077:
                os.fchmod(fd, 0o600)
        except OSError as exc:
            os.close(fd)
            if isinstance(exc, FileAccessError):
                raise
            raise FileAccessError(f"cannot make the audit trail {self.path} private (0600): {_why(exc)}") from None
        if info.st_size:
            with open(self.path, "rb") as existing:
                existing.seek(-1, os.SEEK_END)
                if existing.read(1) != b"\n":
                    os.close(fd)
                    raise FileAccessError(f"the audit trail {self.path} ends in a partial line: run pyiceberg-crypto "
                                          "kms audit-log verify on it, then move it away")
        self._fd, self._size = fd, info.st_size

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes with it
            self._fd = None

    def close(self) -> None:
        """Write the stop digest and close (idempotent; a failure is left unraised: the trail then
        does not end with a stop digest, and verify says so)."""
        with self._lock:
            if self._fd is None and self._reopen_from is not None and not self._closed:
                try:
                    self._reopen_locked()  # a last try, so that the run still ends with its stop digest
                except FileAccessError:
                    pass
            self._closed = True
            if self._fd is None:
                self._close_witness()
                return
            try:
                self._drain_locked()
                self._digest_locked("stop", sync=True)
            except FileAccessError:
                pass
            self._close_fd()
            self._close_witness()

    def _close_witness(self) -> None:
        if self._witness_fd is not None:
            try:
                os.fsync(self._witness_fd)
            except OSError:
                pass
            os.close(self._witness_fd)
            self._witness_fd = None

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
        if self.replica is not None and "replica" not in record:
            record = {**record, "replica": self.replica}
        body = _body(record)  # outside the lock: the lock holds only what orders the chain
        with self._lock:
            slot = self._append_locked(record, body)
            if self._since_digest >= self.digest_every:
                self._append_locked(None, sign="lines")
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
        if self.replica is not None:
            parts += (',"replica":', quoted(self.replica))
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
            if self._since_digest >= self.digest_every:
                self._append_locked(None, sign="lines")
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
        """Reopen the trail if a rotation left it closed; a signed digest if lines were written since
        the last one and ``digest_seconds`` passed (the service calls it every few seconds)."""
        with self._lock:
            if self._fd is None and self._reopen_from is not None and not self._closed:
                try:
                    self._reopen_locked()
                except FileAccessError:
                    return
            if self._fd is not None and self._since_digest and \
                    time.monotonic() - self._last_digest >= self.digest_seconds:
                try:
                    self._commit_locked(self._append_locked(None, sign="seconds"))
                except FileAccessError:
                    pass  # counted; the next operation's line tells again

    def _digest_locked(self, reason: str, sync: bool = False) -> None:
        """A signed digest line, written now; ``sync``: then fsync the file (at rotation and close
        only: an fsync under the lock stalls every caller for milliseconds)."""
        slot = self._append_locked(None, sign=reason)
        self._drain_locked()
        if slot[0] is not True:
            raise FileAccessError(slot[0])
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

    def _append_locked(self, record: dict[str, Any] | None, body: str | None = None, sign: str | None = None) -> list:
        """Chain ``record`` (``sign``: a digest for that reason) as the next line and queue it for the
        next batch; its slot ``[outcome, sha256, digest line or None]`` (outcome None until the batch
        is written: True, or why it was not)."""
        if self._fd is None:
            if self._reopen_from is not None and not self._closed:
                self._reopen_locked()
            else:
                self.failures += 1
                raise FileAccessError(f"the audit trail {self.path} is not open")
        seq = self._seq + 1
        stamp = _now()
        if sign is not None:
            n, first, file = self._digest_n + 1, self._digest_seq + 1, self._next_rotation
            mac = _digest_mac2(self._key, seq, stamp, self._prev, n, sign, first, seq - 1, file, self._prev_digest)
            body = _body({"kind": "digest", "n": n, "reason": sign, "lines": [first, seq - 1], "file": file,
                          "prev_digest": self._prev_digest, "hmac": mac})
        elif body is None:
            body = _body(record)
        line = _line(seq, stamp, body, self._prev)
        data = line + b"\n"
        if sign is None and self._size + self._pending_bytes + len(data) > self.max_bytes \
                and (self._size or self._pending):
            self._drain_locked()
            self._rotate_locked()
            return self._append_locked(record, body)
        self._seq, self._prev = seq, hashlib.sha256(line).hexdigest()
        if sign is not None:
            self._digest_n, self._prev_digest, self._digest_seq = n, mac, seq
            self._since_digest = 0
            self._last_digest = time.monotonic()
        else:
            self._since_digest += 1
        slot = [None, self._prev, data if sign is not None else None]
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
        the last line written. Signed digests written go to the witness."""
        batch, slots = self._pending, self._pending_slots
        self._pending, self._pending_slots, self._pending_bytes = [], [], 0
        head = (self._seq, self._prev, self._digest_n, self._prev_digest, self._digest_seq, self._since_digest)
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
                if slot[2] is not None:
                    self._witness_backlog.append(slot[2])
            if self._witness_backlog and self._witness_fd is not None:
                self._deliver_witness_locked()
        else:
            self._cut_back()
            error = f"cannot write to the audit trail {self.path}: {why}"
            slots += self._pending_slots  # chained to the failed lines: they cannot be written either
            self._pending, self._pending_slots, self._pending_bytes = [], [], 0
            (self._seq, self._prev, self._digest_n, self._prev_digest, self._digest_seq,
             self._since_digest) = self._written_head
            self.failures += len(slots)
            for slot in slots:
                slot[0] = error
        self._written.notify_all()

    def _deliver_witness_locked(self) -> None:
        """The signed digests not yet in the witness, appended to it (a failure is logged, counted
        and retried with the next digest; verify --witness proves the trail up to what it holds)."""
        data = b"".join(self._witness_backlog)
        try:
            written = os.write(self._witness_fd, data)
            if written != len(data):
                raise OSError(errno.ENOSPC, "short write (disk full?)")
        except OSError as exc:
            self.witness_failures += 1
            if self.witness_failures == 1 or self.witness_failures % 100 == 0:
                log.error("cannot write to the audit witness %s: %s (%d failure(s); retried with the next digest)",
                          self.witness, _why(exc), self.witness_failures)
            return
        self._witness_backlog.clear()

    def _cut_back(self) -> None:
        """Remove the bytes of a partial batch (the chain resumes after the last whole line)."""
        try:
            if os.fstat(self._fd).st_size > self._size:
                os.ftruncate(self._fd, self._size)
        except OSError:
            pass

    def _rotate_locked(self) -> None:
        """The live file becomes ``PATH.N`` (after a signed digest); a fresh one continues the chain.
        A rename that fails leaves the live file open (the next operation retries); a fresh file
        that cannot be made leaves the trail closed until :meth:`_reopen_locked` succeeds, at a
        later operation or tick (operations are refused meanwhile)."""
        self._digest_locked("rotation", sync=True)
        target = self.path.with_name(f"{self.path.name}.{self._next_rotation}")
        if os.path.lexists(target):
            self.failures += 1
            raise FileAccessError(f"cannot rotate the audit trail {self.path}: {target} exists")
        try:
            os.rename(self.path, target)
        except OSError as exc:
            self.failures += 1
            raise FileAccessError(f"cannot rotate the audit trail {self.path}: {_why(exc)}") from None
        self._close_fd()
        self._next_rotation += 1
        self._reopen_from = target.name
        self._reopen_locked()

    def _reopen_locked(self) -> None:
        """Make the live file after a rotation (:class:`FileAccessError` while it cannot be made)."""
        try:
            self._open_file()
        except FileAccessError as exc:
            self.failures += 1
            self._refused_closed += 1
            raise FileAccessError(f"{exc} (after rotating it to {self._reopen_from}; retried at each operation, "
                                  "which is refused until then)") from None
        source, refused = self._reopen_from, self._refused_closed
        self._reopen_from, self._refused_closed = None, 0
        self._write_locked({"kind": "rotated", "from": source, "refused_while_closed": refused or None})
        if refused:
            log.warning("the audit trail %s reopened after %d refused operation(s)", self.path, refused)
            self._digest_locked("reopen")


def _check_path(path: Path, what: str, error: type[Exception]) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise error(f"cannot read the {what} {path}: {_symlink_or(exc)}") from None
    try:
        _check_file(fd, path, what, error)
    finally:
        os.close(fd)


def _symlink_or(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symlink: refused (point the option at the file itself)"
    return _why(exc)


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


def _running(path: Path) -> bool:
    """Whether a service holds the trail's lock (it is writing the live file now)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


@dataclass
class TrailReport:
    """What :func:`verify_trail` found.

    ``ok``: no problem found (else ``problem`` names the first: file, line, what). ``verified``: ok,
    the signatures were checked, the trail is in format 2 at its end, and it ends with a stop digest
    or its service is still running (``running``). ``older_format``: the trail's last run is in
    format 1 (missing digests and a cut tail cannot be found). ``witnessed``: the number of the
    witness's last digest, which the trail reaches. ``notes``: what was found and is not a problem
    (a run killed before its stop digest, acknowledged by the next start)."""

    ok: bool
    problem: str
    files: int
    lines: int
    digests: int
    signatures_checked: bool
    verified: bool = False
    running: bool = False
    older_format: bool = False
    witnessed: int | None = None
    unsigned_tail: int = 0
    last_digest: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """What ``kms audit-log verify`` prints: without a key, the first line says the signatures
        were not checked; "verified" only for a verified trail."""
        out = []
        if not self.signatures_checked:
            out.append("signatures NOT checked (no --key-file): NOT verified; anyone can rebuild a trail that "
                       "passes the checks below without the key")
        if not self.ok:
            out.append(f"NOT INTACT: {self.problem}")
            return "\n".join(out)
        counts = f"{self.lines} lines in {self.files} file(s), {self.digests} digests"
        witness = f"; it reaches the witness's last digest ({self.witnessed})" if self.witnessed is not None else ""
        if self.older_format:
            out.append(f"older format (format 1, written before digests were numbered): {counts}; the chain"
                       f"{' and the signatures' if self.signatures_checked else ''} check, but a removed digest or "
                       "a cut tail cannot be found in this format: NOT verified (a service of this version "
                       "continues it in format 2)")
        elif self.verified and self.running:
            out.append(f"verified up to digest {self.last_digest}: {counts} (signatures checked, no digest missing"
                       f"{witness}); the service is still running (it holds the trail's lock): the "
                       f"{self.unsigned_tail} line(s) after that digest are not signed yet")
        elif self.verified:
            out.append(f"verified: {counts} (signatures checked, no digest missing, ends with the stop digest "
                       f"{self.last_digest}{witness})")
        else:
            state = "the service is still running" if self.running else "it ends with a stop digest"
            out.append(f"consistent: {counts}, no digest number missing, {state}{witness}")
        out.extend(f"note: {note}" for note in self.notes)
        return "\n".join(out)


def verify_trail(path: str | os.PathLike, key: bytes | None = None,
                 witness: str | os.PathLike | None = None) -> TrailReport:
    """Check the trail at ``path`` (its rotated files first): the chain, the sequence numbers, the
    digest chain (numbers, the previous digest each names, the lines and file each covers, the
    cadence its start line records), a stop digest at its end, and with ``key`` every signature;
    with ``witness`` that the trail reaches the witness's last digest. The report names the first
    problem (see module doc). :class:`InvalidArgumentError` when ``path`` has no trail at all, or
    ``witness`` is not a file."""
    path = Path(path)
    files = rotated_files(path)
    numbers = [int(_ROTATED.search(f.name).group(1)) for f in files]
    if path.exists():
        files.append(path)
    if not files:
        raise InvalidArgumentError(f"no audit trail at {path} (nor rotated files {path.name}.N beside it)")
    witness_lines = None
    if witness is not None:
        try:
            witness_lines = Path(witness).read_bytes().split(b"\n")[:-1]
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read the audit witness {witness}: {_why(exc)}") from None
    checked = key is not None

    def failed(problem: str, lines: int = 0, digests: int = 0) -> TrailReport:
        return TrailReport(False, problem, len(files), lines, digests, checked)

    if numbers and numbers != list(range(1, len(numbers) + 1)):
        missing = sorted(set(range(1, max(numbers) + 1)) - set(numbers))
        return failed(f"rotated file {path.name}.{missing[0]} is missing (removed)")
    entries: list[tuple[Path, int, bytes, int]] = []  # file, line number, bytes, file number
    for file_no, file in enumerate(files, start=1):
        try:
            data = file.read_bytes()
        except OSError as exc:
            return failed(f"{file}: unreadable ({_why(exc)})")
        partial = bool(data) and not data.endswith(b"\n")
        if partial and file == path and _running(path):  # a batch being written now: not yet a line
            data, partial = data[:data.rfind(b"\n") + 1], False
        if partial and file != files[-1]:
            return failed(f"{file} line {len(data.splitlines())}: truncated (a partial last line)")
        if partial:
            data = data[:data.rfind(b"\n") + 1]
        for number, line in enumerate(data.split(b"\n")[:-1], start=1):
            entries.append((file, number, line, file_no))
        if partial:
            entries.append((file, -1, b"", file_no))
    records: list[dict | None] = []
    for _, _, line, _ in entries:
        try:
            parsed = json.loads(line) if line else None
        except ValueError:
            parsed = None
        records.append(parsed if isinstance(parsed, dict) else None)
    lines = digests = 0
    prev, expected_seq = None, None
    n2, mac2 = 0, GENESIS  # the last format 2 digest: its number and hmac
    digest_seq, digest_where, since = 0, "the trail's start", 0  # the last digest (any format), lines after it
    run: dict | None = None  # the current run: its start's format, cadence, where
    prev_every = None  # the previous run's digest_every (format 2)
    stop = False  # the last line so far is a stop digest
    awaiting = None  # a start line whose digest has not come yet
    notes: list[str] = []
    by_n: dict[int, bytes] = {}
    for index, (file, number, line, file_no) in enumerate(entries):
        where = f"{file} line {number}"
        if number == -1:
            return failed(f"{file}: truncated (a partial last line)", lines, digests)
        record = records[index]
        if record is None or not isinstance(record.get("seq"), int) or not isinstance(record.get("prev"), str):
            return failed(f"{where}: altered (not a record of the trail)", lines, digests)
        seq = record["seq"]
        if prev is None:
            if seq != 1 or record["prev"] != GENESIS:
                return failed(f"{where}: the trail starts at seq {seq}, not at seq 1 with prev 0...0 "
                              "(earlier lines or files removed, or this line altered)", lines, digests)
        elif seq != expected_seq or record["prev"] != prev:
            return failed(_explain(entries, records, index, expected_seq, prev), lines, digests)
        kind = record.get("kind")
        if index == 0 and kind != "start":
            return failed(f"{where}: the trail's first line is not a start line (altered, or the trail rebuilt)")
        if awaiting is not None and kind not in ("digest", "start"):
            return failed(f"{where}: the start line before it ({awaiting}) is not followed by its signed digest "
                          "(removed, or the trail rebuilt without the key)", lines, digests)
        if kind == "start":
            fmt = record.get("format", 1)
            if record.get("tail_mismatch"):
                return failed(f"{where}: the service {record['tail_mismatch']}", lines, digests)
            if fmt != 1:
                if fmt != FORMAT or not isinstance(record.get("digest_every"), int) or record["digest_every"] < 1:
                    return failed(f"{where}: a start line of an unknown format or without its cadence (altered)",
                                  lines, digests)
                if run is not None:
                    said = (record.get("previous_stop"), record.get("unsigned_lines"), record.get("after_digest"))
                    if said != (stop, since, n2):
                        return failed(f"{where}: this start line does not record what precedes it (the previous run "
                                      f"ended {'with its stop digest' if stop else 'without a stop digest'}, "
                                      f"{since} line(s) after digest {n2}; it says previous_stop={said[0]}, "
                                      f"unsigned_lines={said[1]}, after_digest={said[2]}): lines were removed or "
                                      "added before it", lines, digests)
            if awaiting is not None:  # the run before could not write its start digest: it never served
                if fmt == 1:
                    return failed(f"{where}: the start line before it ({awaiting}) is not followed by its signed "
                                  "digest (removed, or the trail rebuilt without the key)", lines, digests)
                notes.append(f"the start at {awaiting} was not followed by its digest (that service could not "
                             "start); the next start recorded it")
            elif run is not None and not stop and run["format"] != 1:
                notes.append(f"the run that started at {run['where']} (pid {run['pid']}) ended without a stop digest "
                             f"(killed?): its {since} line(s) after {digest_where} were signed only by the next "
                             "start's digest")
            prev_every = run["every"] if run is not None and run["format"] != 1 else None
            run = {"format": fmt, "every": record.get("digest_every"), "where": where, "pid": record.get("pid")}
            awaiting = where
        if kind == "digest":
            digests += 1
            numbered = "n" in record
            if run is not None and numbered != (run["format"] != 1):
                return failed(f"{where}: a digest of another format than its run's start line (altered or forged)",
                              lines, digests)
            if numbered:
                n = record.get("n")
                if not isinstance(n, int):
                    return failed(f"{where}: altered (a digest without a number)", lines, digests)
                if n > n2 + 1:
                    gap = f"digest {n2 + 1}" if n == n2 + 2 else f"digests {n2 + 1}..{n - 1}"
                    return failed(f"{where}: {gap} missing (removed) between {digest_where} (digest {n2}) and this "
                                  f"digest {n}", lines, digests)
                if n != n2 + 1:
                    return failed(f"{where}: digest {n} where digest {n2 + 1} was due (reordered or replayed)",
                                  lines, digests)
                if record.get("prev_digest") != mac2:
                    return failed(f"{where}: digest {n} names another previous digest than digest {n2} at "
                                  f"{digest_where} (a digest was replaced)", lines, digests)
                if record.get("lines") != [digest_seq + 1, seq - 1]:
                    return failed(f"{where}: digest {n} says it covers lines {record.get('lines')}, but the lines "
                                  f"since the previous digest are {digest_seq + 1}..{seq - 1} (a digest was "
                                  "removed)", lines, digests)
                if record.get("file") != file_no:
                    return failed(f"{where}: digest {n} was written in file number {record.get('file')}, this is "
                                  f"file number {file_no} (rotated files removed or renamed)", lines, digests)
                bound = run["every"] if run is not None else None
                if awaiting is not None:
                    bound = None if prev_every is None else prev_every + 1
                if bound is not None and since > bound:
                    return failed(f"{where}: digest {n} covers {since} lines, more than the {bound} its run's start "
                                  f"line allows (digest_every): a digest was removed before it", lines, digests)
                n2, mac2 = n, str(record.get("hmac"))
                by_n[n] = line
            if key is not None:
                expected = _record_mac(key, record)
                if expected is None or not hmac.compare_digest(str(record.get("hmac", "")), expected):
                    return failed(f"{where}: the signed digest does not match (the trail before it was rewritten, "
                                  "or another key)", lines, digests)
            digest_seq, digest_where, since = seq, where, 0
            stop = record.get("reason") == "stop"
            awaiting = None
        else:
            since += 1
            stop = False
        prev = hashlib.sha256(line).hexdigest()
        expected_seq = seq + 1
        lines += 1
    if not lines:
        return failed("the trail has no line (emptied?)")
    if awaiting is not None and not _running(path):
        return failed(f"the start line at {awaiting} is not followed by its signed digest", lines, digests)
    if digests == 0:
        return failed("the trail has no signed digest: a service writes one right after each start line "
                      "(rebuilt without the key?)", lines, digests)
    report = TrailReport(True, "", len(files), lines, digests, checked, notes=notes, unsigned_tail=since,
                         last_digest=n2)
    if witness_lines is not None:
        for number, line in enumerate(witness_lines, start=1):
            try:
                copy = json.loads(line)
                n = int(copy["n"])
            except (ValueError, KeyError, TypeError):
                return failed(f"{witness} line {number}: not a digest of the trail", lines, digests)
            if n not in by_n:
                if n > n2:
                    try:
                        final = json.loads(witness_lines[-1])
                    except ValueError:
                        final = copy
                    missing = f"digest {n}" if final.get("n") == n else f"digests {n}..{final.get('n')}"
                    return failed(f"the trail is cut: the witness {witness} holds digest {final.get('n')} (seq "
                                  f"{final.get('seq')}, {final.get('time')}), but the trail ends at seq "
                                  f"{expected_seq - 1}, {since} line(s) after digest {n2} ({missing} missing)",
                                  lines, digests)
                return failed(f"digest {n} of the witness {witness} is not in the trail", lines, digests)
            if by_n[n] != line:
                return failed(f"digest {n} differs between the trail and the witness {witness} (line {number})",
                              lines, digests)
        report.witnessed = int(json.loads(witness_lines[-1])["n"]) if witness_lines else None
        if not witness_lines:
            notes.append(f"the witness {witness} holds no digest yet")
    if run is None or run["format"] == 1:
        report.older_format = True
        return report
    report.running = _running(path)
    if isinstance(run.get("every"), int) and since > run["every"]:
        return failed(f"the trail ends {since} line(s) after digest {n2} ({digest_where}), more than the "
                      f"{run['every']} its run's start line allows between digests (digest_every): digests after "
                      "it were removed", lines, digests)
    if not stop and not report.running:
        return failed(f"the trail does not end with a stop digest: it ends {since} line(s) after digest {n2} "
                      f"({digest_where}); the service was killed, or lines after that digest were cut (with a "
                      "witness, verify --witness tells which; a copy of a live trail ends so too: verify the live "
                      "file, which its service holds, or a copy taken after the stop)", lines, digests)
    report.verified = checked
    return report


def _explain(entries, records, index: int, expected_seq: int, prev: str) -> str:
    file, number, _, _ = entries[index]
    seq = records[index]["seq"]
    where = f"{file} line {number}"
    before_file, before_number, _, _ = entries[index - 1]
    if seq == expected_seq:  # in sequence, but the previous line's bytes changed (or this prev)
        return f"{before_file} line {before_number}: altered (line {number} of {file.name} chains to other bytes)"
    if seq > expected_seq:
        later = [r["seq"] for r in records[index + 1:] if r is not None and isinstance(r.get("seq"), int)]
        if any(expected_seq <= s < seq for s in later):
            return f"{where}: reordered (seq {seq} where seq {expected_seq} was due)"
        count = seq - expected_seq
        return f"{where}: {count} line(s) removed before it (seq {expected_seq}..{seq - 1} missing)"
    return f"{where}: reordered (seq {seq} after seq {expected_seq - 1})"


#: The key of one line of :func:`trail_account`: (principal, key id, operation, result).
AccountKey = tuple[str, str, str, str]


def trail_account(paths: Iterable[str | os.PathLike]) -> dict[AccountKey, Counter]:
    """One account over the trails of several replicas (or one service): per principal, key id,
    operation and result, how many operations each replica recorded (its ``"replica"`` id; a line
    without one counts under its trail's path). Reads the operation records only: verify each
    trail first (:func:`verify_trail`), this proves nothing about them. InvalidArgumentError for a
    path with no trail, or a file that cannot be read::

        for (principal, key_id, operation, result), by_replica in trail_account(paths).items(): ...
    """
    account: dict[AccountKey, Counter] = {}
    for path in paths:
        path = Path(path)
        files = rotated_files(path) + ([path] if path.exists() else [])
        if not files:
            raise InvalidArgumentError(f"no audit trail at {path} (nor rotated files {path.name}.N beside it)")
        for file in files:
            try:
                data = file.read_bytes()
            except OSError as exc:
                raise InvalidArgumentError(f"cannot read the audit trail {file}: {_why(exc)}") from None
            for line in data.split(b"\n"):
                try:
                    record = json.loads(line) if line else None
                except ValueError:
                    continue
                if not isinstance(record, dict) or "operation" not in record or "principal" not in record:
                    continue
                key = (str(record["principal"]), str(record.get("key_id") or "-"), str(record["operation"]),
                       str(record.get("result") or "-"))
                account.setdefault(key, Counter())[str(record.get("replica") or path)] += 1
    return account
