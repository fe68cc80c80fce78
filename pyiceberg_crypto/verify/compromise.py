"""Proof after a compromise: for every file reachable from every snapshot of a table, the key chain
that opens it, and whether any chain leads to the compromised material::

    from pyiceberg_crypto.verify.compromise import compromise_report

    before = compromise_report(location_before, kms, compromised_master_keys=[("orders-key", "1")])
    ...                                             # pyiceberg_crypto.keys.reencrypt_table(...)
    after = compromise_report(location_after, kms, compromised_master_keys=[("orders-key", "1")],
                              previously_dependent=before.dependent_paths())
    after.ok, after.to_dict(), print(after.render_text())

A chain is ``master key (version) -> KEK -> manifest-list key -> manifest list -> manifest -> file``
as the metadata.json records it. A file depends on the compromised material when a snapshot that
reaches it is sealed by a compromised KEK, or by a KEK wrapped by a compromised master key version,
or was re-sealed by a re-encryption (``RESEALED_UP_TO_SEQUENCE``: its manifest-list key was sealed
by an old KEK before). ``ok`` holds when no file depends on it, every file was walked and every
path in ``previously_dependent`` is gone from storage. This module shares no code with the
re-encryption (:mod:`pyiceberg_crypto.keys.reencrypt`): it reads what was written, and never
prints key bytes.

How chains are followed, and why re-sealed snapshots count: docs/explanation/design.md#compromise-proof.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg_crypto.errors import PyicebergCryptoError, TableInputError
from pyiceberg_crypto.formats.magics import plaintext_format
from pyiceberg_crypto.io import local_path
from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.key_ids import kms_key_id
from pyiceberg_crypto.properties import RESEALED_UP_TO_PROPERTY
from pyiceberg_crypto.safe_text import escape_text, exception_line
from pyiceberg_crypto.table.file_kinds import MANIFEST, MANIFEST_LIST
from pyiceberg_crypto.verify.pipeline import prepare_verification

__all__ = ["CompromiseReport", "FileChains", "KeyChain", "StorageFinding", "StorageWalk"]



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


#: What the storage walk finds on a file (``StorageFinding.finding``).
EXPOSED_METADATA = "EXPOSED_METADATA"  # a metadata.json holding a KEK the compromised material unwraps
EXPOSED_FILE = "EXPOSED_FILE"  # a file a compromised chain of some metadata.json on storage opens
PLAINTEXT = "PLAINTEXT"  # a Parquet (PAR1) or Avro (Obj 01) file in the clear
UNACCOUNTED = "UNACCOUNTED"  # no metadata.json on storage reaches it (an in-flight or failed write)
#: Why a file is UNACCOUNTED, and what to do about it.
UNACCOUNTED_REASON = ("no metadata.json on storage reaches it (a write in flight, a failed or killed write's "
                      "leftover, or below a manifest that could not be opened): not checked. Once no writer of "
                      "the table is running, the same `keys reencrypt` run again removes what a killed run of it "
                      "left, and `keys reencrypt ... --orphans-older-than NOW` (an ISO time) any other leftover; "
                      "a file of a write in flight is committed or removed by its writer")
UNREADABLE_METADATA = "UNREADABLE_METADATA"  # a metadata.json that cannot be read: what it reaches is unknown
NOT_TABLE_FILES = ("version-hint.text",)  # the Hadoop catalog's pointer: no data, no key


@dataclass
class StorageFinding:
    path: str
    finding: str  # one of the constants above
    reason: str


@dataclass
class StorageWalk:
    """Every file under the table location, classified: ``ok`` when none is exposed, in the clear,
    unaccounted for, or an unreadable metadata.json."""

    location: str
    listed: int = 0
    metadata_files: int = 0
    findings: list[StorageFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "location": self.location, "listed": self.listed,
                "metadata_files": self.metadata_files, "findings": [asdict(f) for f in self.findings]}


@dataclass
class CompromiseReport:
    metadata_location: str
    compromised_master_keys: list[list[str]]
    compromised_keks: list[str]
    chains: dict[int, KeyChain] = field(default_factory=dict)
    files: list[FileChains] = field(default_factory=list)
    still_present: list[str] = field(default_factory=list)  # previously dependent files still in storage
    previously_dependent: int = 0
    storage: StorageWalk | None = None  # with storage=True: every file under the table location

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
        """The whole proof holds: nothing depends on the compromised material, every file was walked,
        none that depended on it is left, and the storage was walked (False without the walk)."""
        return (not self.dependent and not self.unwalked and not self.still_present
                and self.storage is not None and self.storage.ok)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "storage_walked": self.storage is not None, "metadata_location": self.metadata_location,
                "compromised_master_keys": self.compromised_master_keys, "compromised_keks": self.compromised_keks,
                "snapshots": [asdict(c) for c in self.chains.values()],
                "files": [{**asdict(f), "chains": [self.chains[s].text() for s in f.snapshot_ids if s in self.chains]}
                          for f in self.files],
                "dependent": self.dependent_paths(), "unwalked": sorted(f.path for f in self.unwalked),
                "previously_dependent": self.previously_dependent, "still_present": self.still_present,
                "storage": self.storage.to_dict() if self.storage is not None else None}

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
        if self.storage is None:
            lines.append("  storage: NOT WALKED (files under the table location that no snapshot reaches were not "
                         "checked: this is not the full proof)")
        else:
            walk = self.storage
            lines.append(f"  storage: {walk.listed} file(s) under {escape_text(walk.location)}, {walk.metadata_files} "
                         f"metadata.json; findings: {len(walk.findings)}")
            lines += [f"    [{f.finding}] {escape_text(f.path)}: {escape_text(f.reason)}" for f in walk.findings]
        return "\n".join(lines)


def compromise_report(metadata_location: str, kms: KeyManagementClient, *,
                      compromised_master_keys: Iterable[tuple[str, str]] = (), compromised_keks: Iterable[str] = (),
                      previously_dependent: Iterable[str] = (), storage: bool = True) -> CompromiseReport:
    """The key chains of every file reachable from every snapshot of the metadata.json at
    ``metadata_location`` (see the module docstring), and (``storage``, the default) every file
    under the table location (:func:`storage_walk`). With ``storage=False`` the report says the
    storage was not walked and is never ``ok``: files no snapshot reaches were not checked. Raises
    TableInputError for unusable metadata (or, with ``storage``, a location its FileIO cannot list)."""
    versions = {(kms_key_id(kms, str(k)), str(v)) for k, v in compromised_master_keys}
    kek_ids = {str(k) for k in compromised_keks}
    report, prepared = _chains_report(metadata_location, kms, versions, kek_ids)
    meta = prepared.meta
    gone_check = sorted(set(previously_dependent))
    report.previously_dependent = len(gone_check)
    report.still_present = [p for p in gone_check if _exists(prepared.file_io, p)]
    if storage:
        report.storage = storage_walk(report, meta, kms, prepared.file_io, versions, kek_ids)
    return report


def _chains_report(metadata_location: str, kms: KeyManagementClient, versions: set, kek_ids: set):
    """(the report's key chains and files, the prepared verification whose metadata and FileIO it
    read) of the metadata.json at ``metadata_location``; ``versions`` already the KMS's own ids."""
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
    return report, prepared


def storage_walk(report: CompromiseReport, meta, kms: KeyManagementClient, file_io, versions: set,
                 kek_ids: set) -> StorageWalk:
    """Every file under the table location, as an attacker holding the compromised material sees
    storage: each metadata.json (the current one and every other) is read, its KEKs checked, its
    key chains walked (:func:`compromise_report` of that file); a file one of its compromised
    chains opens is EXPOSED_FILE, a metadata.json with a compromised KEK EXPOSED_METADATA. A file
    no metadata.json on storage reaches is UNACCOUNTED (a write in flight, a failed one's leftover,
    or a file below a manifest that could not be opened), and any Parquet or Avro file in the clear
    is PLAINTEXT. Checksum files (``.NAME.crc`` beside NAME) count with their file."""
    location = meta.table_location or report.metadata_location.rsplit("/metadata/", 1)[0]
    walk = StorageWalk(location)
    lister = getattr(file_io, "list_files", None)
    if lister is None:
        raise TableInputError(f"cannot walk the storage of {location}: its FileIO ({file_io!r}) cannot list files")
    try:
        listed = lister(location)
    except OSError as exc:
        raise TableInputError(f"cannot list the files under {location}: {exception_line(exc)}") from None
    walk.listed = len(listed)
    on_storage = {_file_key(p): p for p in listed}
    accounted = {_file_key(f.path) for f in report.files} | {_file_key(report.metadata_location)}
    metadata_files = sorted(p for p in listed if p.endswith(".metadata.json"))
    walk.metadata_files = len(metadata_files)
    for path in metadata_files:
        accounted.add(_file_key(path))
        if _file_key(path) == _file_key(report.metadata_location):
            other, other_meta = report, meta
        else:
            try:
                other, other_prepared = _chains_report(path, kms, versions, kek_ids)
                other_meta = other_prepared.meta
            except (PyicebergCryptoError, OSError, ValueError) as exc:
                walk.findings.append(StorageFinding(path, UNREADABLE_METADATA, f"cannot be read ({exception_line(exc)}): "
                                                                               "what it reaches is not checked"))
                continue
        exposed_keks = _compromised_keks(other_meta, kms, versions, kek_ids)
        if exposed_keks:
            walk.findings.append(StorageFinding(path, EXPOSED_METADATA, "holds KEK(s) the compromised material "
                                                                        f"unwraps: {', '.join(exposed_keks)}"))
        for found in other.files:
            accounted.add(_file_key(found.path))
            if other is not report and found.compromised and _file_key(found.path) in on_storage:
                chains = "; ".join(other.chains[s].text() for s in found.snapshot_ids if s in other.chains)
                walk.findings.append(StorageFinding(on_storage[_file_key(found.path)], EXPOSED_FILE,
                                                    f"{found.kind} opened through {path}: {chains}"))
    for path in listed:
        name = path.rsplit("/", 1)[-1]
        if name in NOT_TABLE_FILES or _is_checksum_of_listed(path, on_storage):
            continue
        clear = None if path.endswith(".metadata.json") else plaintext_format(_first_bytes(file_io, path))
        if clear:
            walk.findings.append(StorageFinding(path, PLAINTEXT, f"a {clear} file in the clear"))
        elif _file_key(path) not in accounted:
            walk.findings.append(StorageFinding(path, UNACCOUNTED, UNACCOUNTED_REASON))
    seen = set()
    walk.findings = [f for f in walk.findings if (f.path, f.finding) not in seen and not seen.add((f.path, f.finding))]
    return walk


def _compromised_keks(meta, kms: KeyManagementClient, versions: set, kek_ids: set) -> list[str]:
    """The KEKs of ``meta`` (entries sealed by a master key) the compromised material unwraps: named,
    or wrapped by a compromised version (or by a version the KMS cannot name, when versions are
    compromised: not provably clean)."""
    found = []
    for key_id, entry in meta.encryption_keys.items():
        if entry.encrypted_by_id in meta.encryption_keys:
            continue  # a manifest-list key, sealed by a KEK
        if key_id in kek_ids:
            found.append(key_id)
            continue
        if not versions:
            continue
        master_id = kms_key_id(kms, entry.encrypted_by_id)
        try:
            version = kms.key_version(base64.b64decode(entry.encrypted_key_metadata, validate=True), master_id)
        except Exception:  # a KMS that cannot tell: not provably clean
            version = None
        if version is None or (master_id, str(version)) in versions:
            found.append(key_id)
    return sorted(found)


def _file_key(path: str) -> str:
    """One spelling per file: a local path for ``file:`` URIs and plain paths, ``s3://`` for S3."""
    scheme, sep, rest = path.partition("://")
    if sep and scheme in ("s3", "s3a", "s3n"):
        return "s3://" + rest
    return local_path(path)


def _is_checksum_of_listed(path: str, on_storage: dict[str, str]) -> bool:
    """``.NAME.crc`` beside a listed NAME: the Hadoop local file system's checksum file."""
    folder, _, name = path.rpartition("/")
    return (name.startswith(".") and name.endswith(".crc")
            and _file_key(f"{folder}/{name[1:-len('.crc')]}") in on_storage)


def _first_bytes(file_io, path: str, count: int = 4) -> bytes:
    try:
        with file_io.open(path) as handle:
            return handle.read(count)
    except OSError:
        return b""


def _chain(meta, kms: KeyManagementClient, snapshot, versions: set, kek_ids: set) -> KeyChain:
    sealed = meta.encryption_keys.get(snapshot.key_id or "")
    kek_id = sealed.encrypted_by_id if sealed else None
    kek = meta.encryption_keys.get(kek_id or "")
    master = kek.encrypted_by_id if kek else None
    version = None
    master_id = kms_key_id(kms, master) if master else None
    if kek is not None and master:
        try:
            version = kms.key_version(base64.b64decode(kek.encrypted_key_metadata, validate=True), master_id)
        except (binascii.Error, ValueError):
            version = None
        except Exception as exc:  # a KMS that cannot tell: the chain says so, never trusted as clean
            version = f"unknown ({exception_line(exc)})"
    version = None if version is None else str(version)
    unknown_version = version is None or version.startswith("unknown")
    resealed = _resealed(kek, snapshot)
    compromised = (kek_id is None or kek_id in kek_ids or resealed
                   or bool(versions) and (unknown_version or (master_id, version) in versions))
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
