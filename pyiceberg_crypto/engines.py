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

Comet (``comet``) is an accelerator inside Spark: it reads what Spark reads, and its answer's
``native`` says whether natively, the reasons why not (a 24-byte data key falls back).

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

__all__ = ["COMET", "COPY_ON_WRITE", "ENGINES", "Engine", "MERGE_ON_READ", "READERS_PROPERTY", "ROW_LEVEL_MODES",
           "Readability", "SPARK", "TRINO", "JVM_FREE", "declared_readers", "engine_table_markdown",
           "mode_conflicts", "parse_readers", "readable_by", "readers_check", "readers_fix", "row_level_properties"]

SPARK = "spark"
TRINO = "trino"
JVM_FREE = "jvm-free"
COMET = "comet"
#: Iceberg's default data key length (bytes) when a table does not set ``encryption.data-key-length``.
DEFAULT_DATA_KEY_LENGTH = 16

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

    An accelerator (``falls_back_to``: the engine whose scan it falls back to) reads what that engine
    reads, and natively only a table of ``native_formats`` (format versions) whose data key length
    is in ``native_key_lengths`` (bytes) and whose live files are all in ``native``; ``fallback``:
    the rule in words.
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
    falls_back_to: str | None = None
    native: Mapping[str, frozenset[str]] = field(default_factory=dict)
    native_key_lengths: frozenset[int] = frozenset()
    native_formats: frozenset[int] = frozenset()
    fallback: str = ""

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
    native: bool | None = None  # an accelerator's: reads natively (False: falls back; None: not known)
    accelerator: bool = False
    # where what it cannot read is: the partitions (``grp=1``) that hold it; None: not known, or a
    # file of an unpartitioned table among it (then every query is blocked)
    blocked_partitions: tuple[str, ...] | None = None

    def to_dict(self) -> dict:
        answer = {"engine": self.engine, "title": self.title, "readable": self.readable}
        if self.accelerator:
            answer["native"] = self.native
        if self.blocked_partitions is not None:
            answer["blocked_partitions"] = list(self.blocked_partitions)
        return {**answer, "reasons": list(self.reasons)}


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
    COMET: Engine(
        name=COMET, title="Spark 4.1 with Apache DataFusion Comet 1.2.0",
        how="as Spark: `spark_settings(accelerator=\"comet\")`; the driver's Iceberg unwraps the keys",
        encrypted={_DATA: _ENCRYPTED_FORMATS, _POSITION: _ENCRYPTED_FORMATS, _EQUALITY: _ENCRYPTED_FORMATS,
                   _DV: frozenset({"PUFFIN"})},
        limit="Comet falls back to Spark's scan, which reads what Iceberg 1.12.0 encrypts",
        evidence=("measured (tests/integration/test_comet.py): `CometIcebergNativeScan` on copy-on-write and "
                  "merge-on-read tables (deletion vectors) with 16- and 32-byte data keys, rows equal to Spark's "
                  "scan; a 24-byte key falls back. Not measured: Avro data files and Parquet delete files, "
                  "counted as falling back"),
        catalogs="as Spark",
        notes=("an accelerator: Comet's Iceberg writer falls back to Iceberg's on encrypted tables",),
        falls_back_to=SPARK,
        native={_DATA: _PARQUET, _DV: frozenset({"PUFFIN"})},
        native_key_lengths=frozenset({16, 32}),
        native_formats=frozenset({3}),
        fallback="Comet 1.2.0 reads natively encrypted format 3 tables with 16- or 32-byte data keys, "
                 "Parquet data files and deletion vectors"),
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
                complete: bool = True, data_key_length: int | None = None,
                format_version: int | None = None,
                partitions: Mapping[tuple[str, str, bool], Iterable[str | None]] | None = None) -> list[Readability]:
    """Each known engine's answer for a snapshot whose live files are ``census``.

    ``partitions``: for each census key, the partition (``grp=1``; None: unpartitioned) of each
    file; an engine that cannot read some files then names the partitions that hold them
    (``blocked_partitions``): a query whose filter prunes those partitions does not open them.

    ``complete``: the census holds every live file of the snapshot. When not (an incremental
    verification walked only what is newer), an engine with no blocker in it is ``readable=None``.
    ``data_key_length`` (the table's ``encryption.data-key-length``; None: Iceberg's default, 16)
    and ``format_version`` (None: not known) decide whether an accelerator reads natively.
    """
    out = []
    for engine in ENGINES.values():
        if engine.falls_back_to is not None:
            out.append(_accelerated(engine, next(a for a in out if a.engine == engine.falls_back_to), census,
                                    encrypted_table=encrypted_table, complete=complete,
                                    data_key_length=data_key_length, format_version=format_version))
            continue
        reasons = []
        whole_table = engine.encrypted_tables_only and not encrypted_table
        if whole_table:
            reasons.append(f"the table is not encrypted: {engine.title} reads encrypted tables only")
        blocked: set[str | None] = set()
        for key, n in sorted(census.items()):
            kind, file_format, encrypted = key
            if n and not engine.reads(kind, file_format, encrypted):
                where = set((partitions or {}).get(key) or [None])
                blocked |= where
                named = sorted(p for p in where if p is not None)
                reasons.append(f"{_count(n, kind, encrypted)} ({file_format.title()}): {engine.limit}"
                               + (f" (in partition(s) {', '.join(named)}; a query whose filter skips them does not "
                                  "open them)" if named and None not in where else ""))
        readable = False if reasons else (True if complete else None)
        if readable is None:
            reasons.append("not known: this run walked only the files added since the last verified snapshot")
        partitioned = (readable is False and not whole_table and partitions is not None and blocked
                       and None not in blocked)
        out.append(Readability(engine.name, engine.title, readable, tuple(reasons),
                               blocked_partitions=tuple(sorted(blocked)) if partitioned else None))
    return out


def _accelerated(engine: Engine, base: Readability, census: Mapping[tuple[str, str, bool], int], *,
                 encrypted_table: bool, complete: bool, data_key_length: int | None,
                 format_version: int | None) -> Readability:
    """An accelerator's answer: readable as the engine it falls back to (``base``), native or not, and why."""
    why = []
    if encrypted_table:
        length = data_key_length or DEFAULT_DATA_KEY_LENGTH
        if length not in engine.native_key_lengths:
            why.append(f"encryption.data-key-length={length} (AES-{length * 8}): a {length * 8}-bit data key is "
                       "not yet supported natively")
        if format_version is not None and format_version not in engine.native_formats:
            why.append(f"format-version {format_version}: measured natively on format "
                       f"{', '.join(map(str, sorted(engine.native_formats)))} only")
    for (kind, file_format, encrypted), n in sorted(census.items()):
        if n and file_format.upper() not in engine.native.get(kind, frozenset()):
            why.append(f"{_count(n, kind, encrypted)} ({file_format.title()}): not read natively")
    if base.readable is False:
        return Readability(engine.name, engine.title, False, base.reasons, native=False, accelerator=True)
    native = False if why else (True if complete and format_version is not None else None)
    reasons = [f"falls back to Spark's scan: {reason}" for reason in why]
    if native is None:
        reasons.append("native: not known (" + ("this run walked only the newer files" if not complete
                                                else "the format version is not known") + ")")
    return Readability(engine.name, engine.title, base.readable, tuple(reasons), native=native, accelerator=True)


def readers_check(properties: Mapping[str, str], answers: Iterable[Readability]) -> tuple[str, str] | None:
    """``(problem, detail)`` when the table's :data:`READERS_PROPERTY` names an engine that cannot read
    the snapshot (or the modes that keep it readable are not set), else None (nothing declared, or fine)."""
    declared = declared_readers(properties)
    if not declared:
        return None
    by_name = {a.engine: a for a in answers}
    problems = [f"{READERS_PROPERTY} names {name}, which cannot read the current snapshot: "
                + "; ".join(by_name[name].reasons) for name in declared if by_name[name].readable is False]
    problems += [f"{READERS_PROPERTY} names {name}, which does not read the current snapshot natively: "
                 + "; ".join(by_name[name].reasons) for name in declared
                 if by_name[name].readable is not False and by_name[name].native is False]
    problems += mode_conflicts(properties, declared)
    if not problems:
        return None
    return "declared-reader-blocked", "; ".join(problems) + "; " + readers_fix(properties, declared, by_name)


def readers_fix(properties: Mapping[str, str], declared: Iterable[str], answers: Mapping[str, Readability]) -> str:
    """The whole fix for a table whose declared readers cannot keep reading it: the row-level modes
    they need, then, when the current snapshot holds deletion vectors a declared reader cannot read,
    the rewrite that folds them in; and the one call that does both."""
    declared = list(declared)
    needs_modes = [name for name in declared if ENGINES[name].copy_on_write]
    blocked_by_deletes = [name for name in needs_modes if answers.get(name) is not None
                          and answers[name].readable is False
                          and any("deletion vector" in reason or "delete file" in reason
                                  for reason in answers[name].reasons)]
    steps = []
    if needs_modes and (mode_conflicts(properties, declared) or blocked_by_deletes):
        modes = ", ".join(f"'{k}'='{v}'" for k, v in row_level_properties(declared).items())
        steps.append(f"ALTER TABLE <table> SET TBLPROPERTIES ({modes})")
    if blocked_by_deletes:
        steps.append("CALL <catalog>.system.rewrite_data_files(table => '<db.table>', "
                     "options => map('delete-file-threshold', '1')) to fold the deletion vectors in")
    if not steps:
        return f"fix: declare only the readers that can read it ({READERS_PROPERTY})"
    call = (f"config.declare_readers(spark, TABLE, {declared!r}, set_modes=True"
            + (", convert=True" if blocked_by_deletes else "") + ") does it in one step")
    return "fix: " + ", then ".join(steps) + f" ({call}; docs/how-to/trino.md)"


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
        if engine.falls_back_to is not None:
            modes += f"; natively: {engine.fallback.split('natively ', 1)[-1]}, else {engine.falls_back_to}'s scan"
        rows.append(f"| {engine.title} (`{engine.name}`) | {engine.how} | "
                    + " | ".join(cell(engine, k) for k in kinds)
                    + f" | {modes} | {engine.catalogs} | {engine.evidence} |")
    return "\n".join(rows)
