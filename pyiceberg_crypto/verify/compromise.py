"""Proof after a compromise: for every file reachable from every snapshot of a table, the key chain
that opens it, and whether any chain leads to the compromised material (issue 42)::

    from pyiceberg_crypto.verify.compromise import compromise_report

    before = compromise_report(location_before, kms, compromised_master_keys=[("orders-key", "1")])
    ...                                             # pyiceberg_crypto.keys.reencrypt_table(...)
    after = compromise_report(location_after, kms, compromised_master_keys=[("orders-key", "1")],
                              previously_dependent=before.dependent_paths())
    after.ok, after.to_dict(), print(after.render_text())

A chain is ``master key (version) -> KEK -> manifest-list key -> manifest list -> manifest -> file``
as the metadata.json records it: the snapshot's ``key-id`` names the sealed manifest-list key, its
``encrypted-by-id`` names the KEK, the KMS says which master key version wrapped the KEK
(:meth:`~pyiceberg_crypto.kms.KeyManagementClient.key_version`). A file depends on the compromised
material when one of the snapshots that reach it is sealed by a compromised KEK or a KEK wrapped by
a compromised master key version: whoever holds that material opens its manifest list, so every
manifest key and file key below it. ``ok`` holds when no file depends on it, every file was walked
(manifest lists and manifests authenticated by the verifier's plan) and every path in
``previously_dependent`` is gone from storage. This module shares no code with the re-encryption
(:mod:`pyiceberg_crypto.keys.reencrypt`): it reads what was written, and never prints key bytes.

Re-sealed snapshots: the re-encryption's first commit re-seals the manifest-list key of every
snapshot with the fresh KEK and drops the old KEKs, so a snapshot written before the run then shows
a clean chain, but its manifest-list key (the same bytes) was sealed by an old KEK in every copy of
the metadata taken before, so the leaked material still opens it. The fresh KEK records the last
sequence number it re-sealed (``RESEALED_UP_TO_SEQUENCE``): every snapshot at or below it counts as
compromised here (``KeyChain.resealed``). So a report on a table where a run stopped half-way (the
``before`` of a re-run) lists those snapshots' files as dependent, and the re-run's proof checks
that they are gone.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.safe_text import escape_text, exception_line
from pyiceberg_crypto.table.file_kinds import MANIFEST, MANIFEST_LIST
from pyiceberg_crypto.verify.pipeline import prepare_verification

__all__ = ["CompromiseReport", "FileChains", "KeyChain"]

#: The property ``keys reencrypt`` sets on its fresh KEK: the table's last sequence number when it
#: re-sealed older snapshots' manifest-list keys (the same name as keys.reencrypt.RESEALED_UP_TO_PROPERTY;
#: features do not import one another, tests/keys checks they agree).
RESEALED_UP_TO_PROPERTY = "RESEALED_UP_TO_SEQUENCE"


@dataclass
class KeyChain:
    snapshot_id: int
    manifest_list_key: str | None
    kek: str | None
    master_key: str | None
    master_key_version: str | None
    compromised: bool
    resealed: bool = False  # written before a re-encryption re-sealed its key: the old material opens it

    def text(self) -> str:
        return (f"{self.master_key}@{self.master_key_version} -> KEK {self.kek} -> manifest-list key "
                f"{self.manifest_list_key} (snapshot {self.snapshot_id}"
                + (", re-sealed: written before the re-encryption)" if self.resealed else ")"))


@dataclass
class FileChains:
    path: str
    kind: str
    snapshot_ids: list[int]
    walked: bool  # its manifest list / manifest authenticated (data and delete files: named by one)
    compromised: bool


@dataclass
class CompromiseReport:
    metadata_location: str
    compromised_master_keys: list[list[str]]
    compromised_keks: list[str]
    chains: dict[int, KeyChain] = field(default_factory=dict)
    files: list[FileChains] = field(default_factory=list)
    still_present: list[str] = field(default_factory=list)  # previously dependent files still in storage
    previously_dependent: int = 0

    @property
    def dependent(self) -> list[FileChains]:
        return [f for f in self.files if f.compromised]

    def dependent_paths(self) -> list[str]:
        return sorted(f.path for f in self.dependent)

    @property
    def unwalked(self) -> list[FileChains]:
        return [f for f in self.files if not f.walked]

    @property
    def ok(self) -> bool:
        return not self.dependent and not self.unwalked and not self.still_present

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "metadata_location": self.metadata_location,
                "compromised_master_keys": self.compromised_master_keys, "compromised_keks": self.compromised_keks,
                "snapshots": [asdict(c) for c in self.chains.values()],
                "files": [{**asdict(f), "chains": [self.chains[s].text() for s in f.snapshot_ids if s in self.chains]}
                          for f in self.files],
                "dependent": self.dependent_paths(), "unwalked": sorted(f.path for f in self.unwalked),
                "previously_dependent": self.previously_dependent, "still_present": self.still_present}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def render_text(self) -> str:
        lines = [f"compromise check of {escape_text(self.metadata_location)}: {'OK' if self.ok else 'NOT OK'}",
                 f"  {len(self.chains)} snapshot(s), {len(self.files)} file(s) reachable"]
        for chain in self.chains.values():
            mark = "COMPROMISED" if chain.compromised else "ok"
            lines.append(f"  [{mark}] {escape_text(chain.text())}")
        lines.append(f"  files that depend on the compromised material: {len(self.dependent)}")
        lines += [f"    {escape_text(f.path)} ({f.kind})" for f in self.dependent]
        if self.unwalked:
            lines.append(f"  files that could not be walked: {len(self.unwalked)}")
            lines += [f"    {escape_text(f.path)} ({f.kind})" for f in self.unwalked]
        lines.append(f"  files that depended on it before: {self.previously_dependent}, still in storage: "
                     f"{len(self.still_present)}")
        lines += [f"    {escape_text(p)}" for p in self.still_present]
        return "\n".join(lines)


def compromise_report(metadata_location: str, kms: KeyManagementClient, *,
                      compromised_master_keys: Iterable[tuple[str, str]] = (), compromised_keks: Iterable[str] = (),
                      previously_dependent: Iterable[str] = ()) -> CompromiseReport:
    """The key chains of every file reachable from every snapshot of the metadata.json at
    ``metadata_location`` (see the module docstring). Raises TableInputError for unusable metadata."""
    versions = {(str(k), str(v)) for k, v in compromised_master_keys}
    kek_ids = {str(k) for k in compromised_keks}
    prepared = prepare_verification(metadata_location, kms, all_snapshots=True)
    meta, plan = prepared.meta, prepared.plan
    report = CompromiseReport(metadata_location, sorted([list(v) for v in versions]), sorted(kek_ids))
    for snapshot in meta.snapshots.values():
        report.chains[snapshot.snapshot_id] = _chain(meta, kms, snapshot, versions, kek_ids)
    bad = {s for s, c in report.chains.items() if c.compromised}
    for path, finding in plan.findings.items():
        if finding.kind in (MANIFEST_LIST, MANIFEST):
            ids = sorted(finding.snapshot_ids)
            report.files.append(FileChains(path, finding.kind, ids, finding.ok, bool(bad & set(ids))))
    for path, task in plan.tasks.items():
        ids = sorted(task.snapshot_ids)
        report.files.append(FileChains(path, task.kind, ids, True, bool(bad & set(ids))))
    for task in plan.statistics_tasks:
        report.files.append(FileChains(task.path, task.kind, sorted(task.snapshot_ids), True,
                                       bool(bad & set(task.snapshot_ids))))
    gone_check = sorted(set(previously_dependent))
    report.previously_dependent = len(gone_check)
    report.still_present = [p for p in gone_check if _exists(prepared.file_io, p)]
    return report


def _chain(meta, kms: KeyManagementClient, snapshot, versions: set, kek_ids: set) -> KeyChain:
    sealed = meta.encryption_keys.get(snapshot.key_id or "")
    kek_id = sealed.encrypted_by_id if sealed else None
    kek = meta.encryption_keys.get(kek_id or "")
    master = kek.encrypted_by_id if kek else None
    version = None
    if kek is not None and master:
        try:
            version = kms.key_version(base64.b64decode(kek.encrypted_key_metadata, validate=True), master)
        except (binascii.Error, ValueError):
            version = None
        except Exception as exc:  # a KMS that cannot tell: the chain says so, never trusted as clean
            version = f"unknown ({exception_line(exc)})"
    version = None if version is None else str(version)
    unknown_version = version is None or version.startswith("unknown")
    resealed = _resealed(kek, snapshot)
    compromised = (kek_id is None or kek_id in kek_ids or resealed
                   or bool(versions) and (unknown_version or (master, version) in versions))
    return KeyChain(snapshot.snapshot_id, snapshot.key_id, kek_id, master, version, compromised, resealed)


def _resealed(kek, snapshot) -> bool:
    """The snapshot is at or below the sequence number up to which its KEK re-sealed older keys
    (an unreadable mark counts as re-sealed: not provably clean)."""
    if kek is None or RESEALED_UP_TO_PROPERTY not in kek.properties:
        return False
    try:
        cut_off = int(kek.properties[RESEALED_UP_TO_PROPERTY])
    except ValueError:
        return True
    return snapshot.sequence_number is None or snapshot.sequence_number <= cut_off


def _exists(file_io, path: str) -> bool:
    try:
        return file_io.exists(path)
    except OSError:
        return True  # cannot tell: not proven gone
