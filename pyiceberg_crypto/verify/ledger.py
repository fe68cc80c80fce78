"""The verification ledger: the verifier's trusted memory of what it already proved.

A ledger is a small JSON file, one per table, that only an OK run advances::

    ledger = Ledger.load("/var/lib/verify/orders.ledger.json")   # absent file: empty ledger
    ledger.last            # LedgerEntry of the last OK run, or None
    check = history_check(meta, metadata_hash, ledger.last)      # TableCheck "history"
    ledger.record(entry)   # atomic: write a temporary file, fsync, rename, fsync the directory

What it records after an OK run: the table's UUID and location (and catalog name when verified
through Spark), the verified snapshot id and sequence number, the metadata.json location and its
SHA-256 (Base64, as the metastore's ``metadata_hash``), the time and the mode. The next run
verifies only what is newer, after checking that the table is a continuation of that state: same
UUID, sequence number not below, the recorded snapshot (while still listed) an ancestor of the
current one, and the recorded metadata.json unchanged if it is still the current one.

The ledger is only as trustworthy as where it is kept: keep it where the verifier can write and
the table's writers and storage administrators cannot (the verifier's own volume or bucket).
Run one verifier per ledger at a time: two concurrent runs each write their own OK state, and the
later write wins (the ledger may then point at the older of the two: more work next time, never
less checking).
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from pyiceberg_crypto._atomic import PRIVATE, write_atomically
from pyiceberg_crypto.errors import LedgerError
from pyiceberg_crypto.io import open_regular_file
from pyiceberg_crypto.table.metadata import TableMetadata
from pyiceberg_crypto.verify.report import DIVERGED, OK, TableCheck

__all__ = ["Ledger", "LedgerEntry", "LedgerError"]

LEDGER_FORMAT = "pyiceberg-crypto-ledger"
LEDGER_VERSION = 1
HISTORY_KEPT = 50  # earlier entries kept in the file for audit (the newest is ``last``)
MAX_LEDGER_BYTES = 1 << 20


#: Fields a ledger entry may lack (written by an earlier version).
OPTIONAL_FIELDS = ("table_name", "files_verified")


@dataclass(frozen=True)
class LedgerEntry:
    """One OK verification, as remembered."""

    table_uuid: str | None
    table_location: str | None
    snapshot_id: int | None  # None: the table had no snapshot yet
    sequence_number: int
    metadata_location: str
    metadata_hash: str
    verified_at: str  # ISO 8601, UTC
    mode: str
    table_name: str | None = None  # catalog.db.table, when verified through Spark
    #: Files verified OK so far: this run's, plus the earlier runs' when this run went on from the
    #: ledger (mode "since"); None when an earlier entry was recorded before the count was kept.
    files_verified: int | None = None

    @staticmethod
    def now() -> str:
        return datetime.now(timezone.utc).isoformat(timespec="seconds")

    @classmethod
    def from_dict(cls, data: dict) -> LedgerEntry:
        fields = cls.__dataclass_fields__
        missing = [name for name in fields if name not in OPTIONAL_FIELDS and name not in data]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        entry = cls(**{k: data.get(k) for k in fields})
        if not isinstance(entry.sequence_number, int) or isinstance(entry.sequence_number, bool):
            raise ValueError("sequence_number is not an integer")
        if entry.snapshot_id is not None and (not isinstance(entry.snapshot_id, int) or isinstance(entry.snapshot_id, bool)):
            raise ValueError("snapshot_id is not an integer")
        if entry.files_verified is not None and (not isinstance(entry.files_verified, int)
                                                 or isinstance(entry.files_verified, bool) or entry.files_verified < 0):
            raise ValueError("files_verified is not a count")
        for name in ("metadata_location", "metadata_hash", "verified_at", "mode"):
            if not isinstance(getattr(entry, name), str):
                raise ValueError(f"{name} is not a string")
        return entry


class Ledger:
    """The ledger file at ``path`` (it need not exist yet; its directory must)."""

    def __init__(self, path: str, last: LedgerEntry | None = None, history: list[dict] | None = None):
        self.path = path
        self.last = last
        self.history = history or []

    @classmethod
    def load(cls, path: str | os.PathLike) -> Ledger:
        path = os.fspath(path)
        try:
            with open_regular_file(path) as handle:  # a FIFO or device in its place is refused, not waited on
                raw = handle.read(MAX_LEDGER_BYTES + 1)
            if len(raw) > MAX_LEDGER_BYTES:
                raise LedgerError(f"ledger {path} is larger than {MAX_LEDGER_BYTES} bytes: not a ledger")
        except FileNotFoundError:
            if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                # Not created here: where the ledger lives is a choice (see above), and a mistyped path
                # would silently start a second ledger.
                directory = os.path.dirname(os.path.abspath(path))
                raise LedgerError(f"ledger {path}: its directory {directory} does not exist; create it "
                                  f"(mkdir -p -m 700 {shlex.quote(directory)}), then run again") from None
            return cls(path)
        except OSError as exc:
            raise LedgerError(f"ledger {path} cannot be read: {exc.strerror or exc}") from None
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or doc.get("format") != LEDGER_FORMAT:
                raise ValueError(f"not a {LEDGER_FORMAT} file")
            if doc.get("version") != LEDGER_VERSION:
                raise ValueError(f"version {doc.get('version')!r}, this verifier reads version {LEDGER_VERSION}")
            last = LedgerEntry.from_dict(doc["last"]) if doc.get("last") is not None else None
            history = doc.get("history") or []
            if not isinstance(history, list):
                raise ValueError("history is not a list")
        except (ValueError, TypeError, KeyError) as exc:
            raise LedgerError(f"ledger {path} is corrupt ({exc}); it is not replaced: move it away to start "
                              "a new ledger (the next run then verifies the table in full)") from None
        return cls(path, last, history)

    def check_identity(self, meta: TableMetadata, table_name: str | None) -> None:
        """Refuse the ledger of another table (its name or location and its UUID both differ)."""
        last = self.last
        if last is None:
            return
        same_place = (last.table_name == table_name) if (last.table_name and table_name) else (
            last.table_location == meta.table_location)
        if not same_place and last.table_uuid != meta.table_uuid:
            recorded = last.table_name or last.table_location
            raise LedgerError(f"ledger {self.path} is the memory of table {recorded!r} (uuid {last.table_uuid}), "
                              f"not of this one ({table_name or meta.table_location!r}, uuid {meta.table_uuid}): "
                              "use one ledger file per table")

    def record(self, entry: LedgerEntry) -> None:
        """Make ``entry`` the last verified state, atomically (the old file stays whole on a crash)."""
        history = ([asdict(self.last)] + self.history)[:HISTORY_KEPT] if self.last else self.history
        doc = {"format": LEDGER_FORMAT, "version": LEDGER_VERSION, "last": asdict(entry), "history": history}
        # Not a secret (hashes and ids), but the verifier's memory: only its owner reads or writes it.
        write_atomically(self.path, json.dumps(doc, indent=2) + "\n", mode=PRIVATE)
        self.history, self.last = history, entry


def history_check(meta: TableMetadata, metadata_hash: str, last: LedgerEntry | None) -> TableCheck:
    """Is the table a continuation of the state the ledger recorded? ``history``: OK or DIVERGED."""
    if last is None:
        return TableCheck("history", OK, "no ledger entry yet: the current snapshot is verified in full")
    problem = divergence(meta, metadata_hash, last)
    if problem:
        return TableCheck("history", DIVERGED, problem + " (an intended change is accepted with --accept-history, "
                                                         "which verifies the current snapshot in full)")
    current = meta.current_snapshot
    if current is not None and current.snapshot_id == last.snapshot_id:
        detail = f"no commit since the ledger's snapshot {last.snapshot_id} (verified {last.verified_at})"
    else:
        detail = (f"continues the ledger's snapshot {last.snapshot_id} (sequence number {last.sequence_number}, "
                  f"verified {last.verified_at})")
        if last.snapshot_id is not None and last.snapshot_id not in meta.snapshots:
            traced = descends_from(meta, current, last.snapshot_id, last.sequence_number)
            detail += ("; that snapshot was expired since (still the parent of a newer one), its sequence number is "
                       "the cut-off" if traced else "; that snapshot and the ones after it were expired since: the "
                       "descent cannot be traced, the sequence number is the cut-off")
    return TableCheck("history", OK, detail)


def descends_from(meta: TableMetadata, current, snapshot_id: int, sequence_number: int) -> bool | None:
    """See :meth:`TableMetadata.descends_from`."""
    return meta.descends_from(current, snapshot_id, sequence_number)


def divergence(meta: TableMetadata, metadata_hash: str, last: LedgerEntry) -> str | None:
    """Why the table is not a continuation of ``last`` (None when it is)."""
    if last.table_uuid != meta.table_uuid:
        return (f"the table UUID is {meta.table_uuid}, the ledger recorded {last.table_uuid}: the table was "
                "replaced (dropped and re-created, or another table's metadata put in its place)")
    current = meta.current_snapshot
    sequence_number = (current.sequence_number or 0) if current is not None else 0
    if sequence_number < last.sequence_number:
        return (f"the current sequence number is {sequence_number}, below the {last.sequence_number} the ledger "
                f"verified: the table went backwards (an older metadata.json restored?)")
    if last.snapshot_id is not None and current is None:
        return f"the table has no current snapshot; the ledger verified snapshot {last.snapshot_id}"
    if last.snapshot_id is not None and descends_from(meta, current, last.snapshot_id, last.sequence_number) is False:
        return (f"the ledger's snapshot {last.snapshot_id} is no longer an ancestor of the current snapshot "
                f"{current.snapshot_id}: the table was rolled back or moved sideways")
    recorded = meta.snapshots.get(last.snapshot_id) if last.snapshot_id is not None else None
    if recorded is not None and recorded.sequence_number is not None and recorded.sequence_number != last.sequence_number:
        return (f"snapshot {last.snapshot_id} now has sequence number {recorded.sequence_number}, the ledger "
                f"recorded {last.sequence_number}: the table history was rewritten")
    if meta.location == last.metadata_location and metadata_hash != last.metadata_hash:
        return (f"{meta.location} is the metadata.json the ledger verified, but its content changed since "
                "(SHA-256 differs): rewritten in place")
    return None
