"""The verifier's findings, as data: one :class:`FileFinding` per file, table-level checks, and
the :class:`TableReport` that the CLI (``--json``) and the Spark job return alike.

A report never holds key material: only paths, kinds, statuses and reasons::

    report = verify_metadata("file:/wh/db.db/t/metadata/00003-....metadata.json", kms)
    report.ok                       # True only when every file and every table check is OK
    report.not_ok()                 # the findings to act on
    json.dumps(report.to_dict())    # {"ok", "table", "summary", "files", "readable_by"}
    report.readable_by              # [{"engine": "trino", "readable": False, "reasons": [...]}, ...]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# --- what a file is: the table model's vocabulary (:mod:`pyiceberg_crypto.table.file_kinds`) ----
from pyiceberg_crypto.table.file_kinds import (  # noqa: E402  (re-exported: the report names them)
    DATA,
    DELETION_VECTOR,
    EQUALITY_DELETE,
    KINDS,
    MANIFEST,
    MANIFEST_LIST,
    PARTITION_STATISTICS,
    POSITION_DELETE,
    STATISTICS,
)

# --- what the verifier found: the shared verdicts (:mod:`pyiceberg_crypto.table.statuses`) ---------
from pyiceberg_crypto.table.statuses import (  # noqa: E402  (re-exported: the report names them)
    DIVERGED,
    KEY_ERROR,
    LENGTH_MISMATCH,
    MISSING,
    OK,
    OUTSIDE_TABLE,
    PLAINTEXT,
    STATUSES,
    TAMPERED,
    TRUNCATED,
    UNVERIFIABLE,
    WARN,
    WRONG_FILE,
)

__all__ = ["FileFinding", "TableCheck", "TableReport", "report_schema"]

REPORT_VERSION = 1
# The JSON Schema (draft 2020-12) of the report document and of the error document, shipped as
# package data beside this module: see :func:`report_schema`.
REPORT_SCHEMA = "report.schema.json"


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of :meth:`TableReport.to_dict` and of ``--json`` error documents.

    Validate a report with any JSON Schema library, e.g. ``jsonschema``::

        import jsonschema
        jsonschema.validate(report.to_dict(), report_schema())
    """
    import json
    from importlib.resources import files

    return json.loads(files(__package__).joinpath(REPORT_SCHEMA).read_text(encoding="utf-8"))


@dataclass
class FileFinding:
    """The verdict on one file of the table.

    ``location`` names the block or module when the failure has one (``"block 3"``,
    ``"row group 0, column 'id', page 2, data page"``); ``entries`` counts the manifest entries
    that reference the file (a Puffin file can hold several deletion vectors).
    """

    path: str
    kind: str
    status: str
    detail: str = ""
    location: str | None = None
    size: int | None = None  # bytes found in storage
    expected_size: int | None = None  # trusted length from key metadata / the referencing entry
    snapshot_ids: list[int] = field(default_factory=list)
    entries: int = 1
    authenticated: int | None = None  # blocks (AGS1) or modules (Parquet) whose tag matched
    same_as: str | None = None  # WRONG_FILE: the file whose content this is
    reason: str | None = field(default=None, repr=False, compare=False)  # a code callers test instead of the text

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "kind": self.kind, "status": self.status,
                               "detail": self.detail}
        for name in ("location", "size", "expected_size", "authenticated", "same_as"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["entries"] = self.entries
        out["snapshot_ids"] = sorted(self.snapshot_ids)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileFinding:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class TableCheck:
    """A table-level check: ``format-version``, ``encryption.key-id``, a KEK, ``metadata_hash``."""

    name: str
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        """OK, or a WARN (a warning is not a failure)."""
        return self.status in (OK, WARN)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass
class TableReport:
    """Everything one verification found. Same document from the CLI and from ``verify_table``."""

    metadata_location: str
    table_location: str | None = None
    table_uuid: str | None = None
    format_version: int | None = None
    key_id: str | None = None
    snapshot_ids: list[int] = field(default_factory=list)
    checks: list[TableCheck] = field(default_factory=list)
    files: list[FileFinding] = field(default_factory=list)
    mode: str = "current"  # "current" | "all" | "snapshot" | "since"
    scope: dict[str, Any] = field(default_factory=dict)  # plan.Scope.to_dict() + what was skipped
    ledger: dict[str, Any] | None = None  # {"path", "previous", "advanced"} when a ledger was used
    timings: dict[str, float] = field(default_factory=dict)  # seconds: plan (driver), run (files), forensics
    #: Which known engines read the current snapshot, and why not (:mod:`pyiceberg_crypto.engines`):
    #: ``[{"engine", "title", "readable", "reasons"}]``; None when the current snapshot was not walked.
    readable_by: list[dict[str, Any]] | None = None

    @property
    def ok(self) -> bool:
        """True only when every table check and every file is OK (and there was something to check)."""
        return bool(self.checks) and all(c.ok for c in self.checks) and all(f.ok for f in self.files)

    def not_ok(self) -> list[FileFinding]:
        return [f for f in self.files if not f.ok]

    def failed_checks(self) -> list[TableCheck]:
        return [c for c in self.checks if not c.ok]

    def summary(self) -> dict[str, Any]:
        by_status = Counter(f.status for f in self.files)
        by_kind: dict[str, dict[str, int]] = {}
        for finding in self.files:
            by_kind.setdefault(finding.kind, {}).setdefault(finding.status, 0)
            by_kind[finding.kind][finding.status] += 1
        entries = Counter()
        for finding in self.files:
            entries[finding.kind] += finding.entries
        return {
            "files": len(self.files),
            "by_status": {s: by_status[s] for s in STATUSES if by_status[s]},
            "by_kind": {k: by_kind[k] for k in KINDS if k in by_kind},
            "entries_by_kind": {k: entries[k] for k in KINDS if entries[k]},
            "failed_checks": len(self.failed_checks()),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "version": REPORT_VERSION,
            "table": {
                "metadata_location": self.metadata_location,
                "location": self.table_location,
                "uuid": self.table_uuid,
                "format_version": self.format_version,
                "key_id": self.key_id,
                "mode": self.mode,
                "snapshot_ids": list(self.snapshot_ids),
                "scope": self.scope,
                "checks": [c.to_dict() for c in self.checks],
            },
            "ledger": self.ledger,
            "timings": self.timings,
            "readable_by": self.readable_by,
            "summary": self.summary(),
            "files": [f.to_dict() for f in self.files],
        }
