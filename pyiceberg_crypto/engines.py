"""Which engines read an encrypted Iceberg table, and what each reads: one source of facts.

The reader-set profile (:func:`pyiceberg_crypto.config.table_properties` with ``readers=``), the
"readable by" answer of ``verify`` and the lake audit, and the docs' engine table all come from
:data:`ENGINES`::

    from pyiceberg_crypto import engines

    engines.ENGINES["trino"].title                    # 'Trino 483 through the AWS KMS face'
    census = {("deletion-vector", "PUFFIN", True): 3, ("data", "PARQUET", True): 12}
    [r.to_dict() for r in engines.readable_by(census, encrypted_table=True)]
    # [{'engine': 'spark', 'readable': True, 'reasons': []},
    #  {'engine': 'trino', 'readable': False,
    #   'reasons': ['3 encrypted deletion vectors (Puffin): Trino 483 reads only Parquet when encrypted']}, ...]

A census counts the live files of one snapshot by ``(kind, file format, encrypted)``: the kinds of
:mod:`pyiceberg_crypto.table.file_kinds` (``data``, ``position-delete``, ``equality-delete``,
``deletion-vector``), the manifest's ``file_format`` upper-cased, and whether the manifest gives the
file key metadata. Pure Python: no import beyond the package's base.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.properties import READERS_PROPERTY

__all__ = ["COPY_ON_WRITE", "ENGINES", "Engine", "MERGE_ON_READ", "READERS_PROPERTY", "ROW_LEVEL_MODES",
           "Readability", "SPARK", "TRINO", "JVM_FREE", "declared_readers", "engine_table_markdown",
           "mode_conflicts", "parse_readers", "readable_by", "readers_check", "row_level_properties"]

SPARK = "spark"
TRINO = "trino"
JVM_FREE = "jvm-free"

#: Iceberg's table properties choosing how DELETE, UPDATE and MERGE change rows.
ROW_LEVEL_MODES = ("write.delete.mode", "write.update.mode", "write.merge.mode")
COPY_ON_WRITE = "copy-on-write"
MERGE_ON_READ = "merge-on-read"

# The file kinds of a manifest entry (the values of pyiceberg_crypto.table.file_kinds; this module
# sits below the table model, tests/test_engines.py checks they stay equal).
_DATA, _POSITION, _EQUALITY, _DV = "data", "position-delete", "equality-delete", "deletion-vector"
_KIND_WORDS = {_DATA: ("data file", "data files"), _POSITION: ("position delete file", "position delete files"),
               _EQUALITY: ("equality delete file", "equality delete files"),
               _DV: ("deletion vector", "deletion vectors")}
_ENCRYPTED_FORMATS = frozenset({"PARQUET", "AVRO"})  # what Iceberg 1.12.0 encrypts (data and delete files)


@dataclass(frozen=True)
class Engine:
    """What one engine reads in an encrypted table.

    ``encrypted``: for each file kind, the file formats the engine reads when the file is encrypted
    (a kind absent: none). ``plaintext``: the same for plaintext files of the table (None: any).
    ``encrypted_tables_only``: the engine reads nothing of a table without ``encryption.key-id``.
    ``copy_on_write``: on format 3 the engine needs ``copy-on-write`` row-level modes (merge-on-read
    writes encrypted deletion vectors it cannot read). ``limit``: the rule in words, for reasons.
    ``evidence``: how the facts are known (measured, or read from the engine's code).
    """

    name: str
    title: str
    how: str
    encrypted: Mapping[str, frozenset[str]]
    limit: str
    evidence: str
    plaintext: Mapping[str, frozenset[str]] | None = None
    encrypted_tables_only: bool = False
    copy_on_write: bool = False
    catalogs: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def reads(self, kind: str, file_format: str, encrypted: bool) -> bool:
        """Whether the engine reads a file of this kind and format (``PARQUET``, ``PUFFIN`` ...)."""
        table = self.encrypted if encrypted else self.plaintext
        if table is None:
            return True
        return file_format.upper() in table.get(kind, frozenset())


@dataclass(frozen=True)
class Readability:
    """The answer for one engine: can it read the snapshot, and if not, why (one reason per blocker)."""

    engine: str
    title: str
    readable: bool | None  # None: not known (an incremental run did not walk the whole snapshot)
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"engine": self.engine, "title": self.title, "readable": self.readable, "reasons": list(self.reasons)}


_PARQUET = frozenset({"PARQUET"})
ENGINES: dict[str, Engine] = {
    SPARK: Engine(
        name=SPARK, title="Spark 3.5/4.1 with Iceberg 1.12.0 and the bridge",
        how="the Py4J bridge (`register_kms`) or `kms serve` (Py4J face)",
        encrypted={_DATA: _ENCRYPTED_FORMATS, _POSITION: _ENCRYPTED_FORMATS, _EQUALITY: _ENCRYPTED_FORMATS,
                   _DV: frozenset({"PUFFIN"})},
        limit="Spark reads what Iceberg 1.12.0 encrypts (Parquet, Avro, Puffin)",
        evidence="measured: the verifier's Spark tests read copy-on-write and merge-on-read tables (DVs)",
        catalogs="Hive metastore, REST (the bridge's EncryptingRestCatalog)"),
    TRINO: Engine(
        name=TRINO, title="Trino 483 through the AWS KMS face",
        how="`kms serve --aws-kms-api`, `iceberg.encryption.kms-type=AWS`",
        encrypted={_DATA: _PARQUET, _POSITION: _PARQUET, _EQUALITY: _PARQUET},
        limit="Trino 483 reads only Parquet when encrypted",
        evidence=("measured (tests/trino): Parquet data read; an encrypted deletion vector fails the query with "
                  "'Reading encrypted non-Parquet file is not supported'. Not measured: encrypted Parquet delete "
                  "files (format 3 writes DVs instead) and plaintext files in a v3 table, which are not counted "
                  "against it"),
        copy_on_write=True,
        catalogs="Hive metastore only (REST: Iceberg 1.11.0 in Trino cannot decrypt the manifest list)",
        notes=("read only: Trino 483 does not write encrypted tables",)),
    JVM_FREE: Engine(
        name=JVM_FREE, title="pyiceberg-crypto read (no JVM)",
        how="`pyiceberg_crypto.read.read_table`, `pyiceberg-crypto head`",
        encrypted={_DATA: frozenset({"PARQUET", "AVRO"}), _POSITION: _PARQUET, _EQUALITY: _PARQUET,
                   _DV: frozenset({"PUFFIN"})},
        plaintext={_DATA: frozenset({"PARQUET", "AVRO"}), _POSITION: _PARQUET, _EQUALITY: _PARQUET,
                   _DV: frozenset({"PUFFIN"})},
        limit="pyiceberg-crypto reads Parquet and Avro data, Parquet delete files and deletion vectors",
        evidence="the reader's code (pyiceberg_crypto/read) and its tests",
        encrypted_tables_only=True,
        catalogs="Hive metastore, REST"),
}


def parse_readers(readers: str | Iterable[str]) -> tuple[str, ...]:
    """Engine names from ``"spark,trino"`` or an iterable, checked and de-duplicated in order.

    >>> parse_readers("trino, spark")
    ('trino', 'spark')

    Raises:
        InvalidArgumentError: an unknown engine name (the message lists the known ones), or none at all.
    """
    names = readers.split(",") if isinstance(readers, str) else list(readers)
    out: list[str] = []
    for raw in names:
        name = str(raw).strip().lower()
        if not name:
            continue
        if name not in ENGINES:
            raise InvalidArgumentError(f"unknown reader {raw!r}: known engines are {', '.join(ENGINES)}")
        if name not in out:
            out.append(name)
    if not out:
        raise InvalidArgumentError(f"name at least one reader ({', '.join(ENGINES)})")
    return tuple(out)


def declared_readers(properties: Mapping[str, str]) -> tuple[str, ...]:
    """The engines a table's :data:`READERS_PROPERTY` names (known names only; none: ``()``)."""
    value = properties.get(READERS_PROPERTY) or ""
    return tuple(dict.fromkeys(n.strip().lower() for n in value.split(",") if n.strip().lower() in ENGINES))


def row_level_properties(readers: Iterable[str]) -> dict[str, str]:
    """The row-level modes ``readers`` need: copy-on-write for all three when one of them needs it
    (Trino), else nothing (Iceberg's default, copy-on-write, stays)."""
    if any(ENGINES[name].copy_on_write for name in readers):
        return {mode: COPY_ON_WRITE for mode in ROW_LEVEL_MODES}
    return {}


def mode_conflicts(properties: Mapping[str, str], readers: Iterable[str]) -> list[str]:
    """Why ``readers`` could not keep reading a table with these properties: each row-level mode set to
    merge-on-read while a reader needs copy-on-write (an unset mode is Iceberg's copy-on-write)."""
    needs = [ENGINES[name] for name in readers if ENGINES[name].copy_on_write]
    if not needs:
        return []
    return [f"{mode}={properties[mode]} writes encrypted deletion vectors on format 3, which "
            f"{needs[0].title.split(' through')[0]} cannot read: set {mode}={COPY_ON_WRITE}"
            for mode in ROW_LEVEL_MODES if properties.get(mode, COPY_ON_WRITE) != COPY_ON_WRITE]


def _count(n: int, kind: str, encrypted: bool) -> str:
    one, many = _KIND_WORDS.get(kind, (f"{kind} file", f"{kind} files"))
    return f"{n} {'encrypted' if encrypted else 'plaintext'} {one if n == 1 else many}"


def readable_by(census: Mapping[tuple[str, str, bool], int], *, encrypted_table: bool,
                complete: bool = True) -> list[Readability]:
    """Each known engine's answer for a snapshot whose live files are ``census``.

    ``complete``: the census holds every live file of the snapshot. When not (an incremental
    verification walked only what is newer), an engine with no blocker in it is ``readable=None``.
    """
    out = []
    for engine in ENGINES.values():
        reasons = []
        if engine.encrypted_tables_only and not encrypted_table:
            reasons.append(f"the table is not encrypted: {engine.title} reads encrypted tables only")
        for (kind, file_format, encrypted), n in sorted(census.items()):
            if n and not engine.reads(kind, file_format, encrypted):
                reasons.append(f"{_count(n, kind, encrypted)} ({file_format.title()}): {engine.limit}")
        readable = False if reasons else (True if complete else None)
        if readable is None:
            reasons.append("not known: this run walked only the files added since the last verified snapshot")
        out.append(Readability(engine.name, engine.title, readable, tuple(reasons)))
    return out


def readers_check(properties: Mapping[str, str], answers: Iterable[Readability]) -> tuple[str, str] | None:
    """``(problem, detail)`` when the table's :data:`READERS_PROPERTY` names an engine that cannot read
    the snapshot (or the modes that keep it readable are not set), else None (nothing declared, or fine)."""
    declared = declared_readers(properties)
    if not declared:
        return None
    by_name = {a.engine: a for a in answers}
    problems = [f"{READERS_PROPERTY} names {name}, which cannot read the current snapshot: "
                + "; ".join(by_name[name].reasons) for name in declared if by_name[name].readable is False]
    problems += mode_conflicts(properties, declared)
    if not problems:
        return None
    return "declared-reader-blocked", "; ".join(problems)


def engine_table_markdown() -> str:
    """The docs' table of which engine reads what in an encrypted table (from :data:`ENGINES`)."""
    kinds = (_DATA, _POSITION, _EQUALITY, _DV)

    def cell(engine: Engine, kind: str) -> str:
        formats = sorted(engine.encrypted.get(kind, frozenset()))
        return ", ".join(f.title() for f in formats) if formats else "no"

    head = ("| Engine | How it gets keys | " + " | ".join(f"Encrypted {_KIND_WORDS[k][1]}" for k in kinds)
            + " | Row-level modes on format 3 | Catalogs | Evidence |")
    rows = [head, "|" + "---|" * (len(kinds) + 5)]
    for engine in ENGINES.values():
        modes = "copy-on-write (merge-on-read writes DVs it cannot read)" if engine.copy_on_write else "any"
        if engine.encrypted_tables_only:
            modes += "; encrypted tables only"
        rows.append(f"| {engine.title} (`{engine.name}`) | {engine.how} | "
                    + " | ".join(cell(engine, k) for k in kinds)
                    + f" | {modes} | {engine.catalogs} | {engine.evidence} |")
    return "\n".join(rows)
