"""Encrypt an existing plaintext Iceberg table under its own name.

Iceberg 1.12.0 refuses ``encryption.key-id`` on an existing plaintext table, so the table is copied
into a new encrypted one, which then takes its name::

    result = encrypt_table(spark, "lake.db.orders", "orders-key", prove=my_proof)
    result.swapped, result.plaintext_table, result.kept, result.not_kept, result.compared

The phases (:data:`PHASES`, each idempotent: a re-run finds where the last one stopped and goes
on): ``stage`` creates ``<name>__encrypting`` with the original's schema, spec, sort order and
properties and the package's encryption settings; ``copy`` appends the rows of a fixed snapshot
of the original in one commit that records it; ``catch-up`` carries over, in rounds, what the
original committed since (a ``delete`` or ``overwrite`` redoes the copy, or stops with
``on_change="refuse"``); ``verify`` compares rows and hashes per partition (:mod:`.rows`) and asks
the ``prove`` callable for its proof of the copy, again after each catch-up until the original stands
still at the verified snapshot; ``swap-original`` and ``swap-staging`` rename the original to
``<name>__plaintext_<stamp>`` and the copy to ``<name>``, with nothing but one load between them
(``result.swap_gap_seconds``: how long the name was missing); ``purge`` drops the original,
now (``purge_now``), later (``purge_after``) or never (the default: the command is in the result).

Each phase in detail: docs/explanation/design.md#adopt; the how-to, with what is kept and what is
not: docs/how-to/encrypt-existing-table.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto import config
from pyiceberg_crypto.adopt.rows import partition_key_expressions, rows_fingerprint
from pyiceberg_crypto.catalog.spark import split_table_name
from pyiceberg_crypto.formats.magics import plaintext_format
from pyiceberg_crypto.errors import IntegrityError, InvalidArgumentError, OperationError
from pyiceberg_crypto.properties import KEY_ID
from pyiceberg_crypto.spark.java import java_line, java_list, java_map

__all__ = ["PHASES", "REFS_DROP", "REFS_KEEP_ORIGINAL", "AdoptResult", "encrypt_table", "reload_table"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"AdoptError": OperationError, "AdoptChangedError": OperationError,
                                         "AdoptVerificationError": IntegrityError})

#: The phases, in order (``fail_at`` stops just before one).
PHASES = ("stage", "copy", "catch-up", "verify", "swap-original", "swap-staging", "purge")
#: ``refs=``: branches and tags are not carried over (listed), or the original is kept for them.
REFS_DROP, REFS_KEEP_ORIGINAL = "drop", "keep-original"
ON_CHANGE = ("redo", "refuse")
STAGING_SUFFIX = "__encrypting"
PLAINTEXT_SUFFIX = "__plaintext_"
#: Properties of the staging (then the new) table: where it came from.
SOURCE_UUID = "pyiceberg-crypto.adopt.source-uuid"
PLAINTEXT_NAME = "pyiceberg-crypto.adopt.plaintext-name"
PURGED = "pyiceberg-crypto.adopt.purged"
#: The original's schema id and spec id when the staging table was made from them.
SOURCE_LAYOUT = "pyiceberg-crypto.adopt.source-layout"
#: Snapshot summary property of each copy commit: the original's snapshot it holds the rows of.
SOURCE_SNAPSHOT = "pyiceberg-crypto.adopt.source-snapshot"
#: Properties never carried over: the new table's own, and paths that would write into the original's directories.
RESERVED = {"format-version", "uuid", "snapshot-count", "current-snapshot-summary", "current-snapshot-id",
            "current-snapshot-timestamp-ms", "current-schema", "default-partition-spec", "default-sort-order"}
PATH_PROPERTIES = {"write.data.path", "write.metadata.path", "write.object-storage.path", "write.folder-storage.path"}
METADATA_COLUMNS_NOTE = ("metadata columns: _file, _pos, _spec_id and _partition name the new files (every row is in a "
                         "file of the new table), and format 3 row lineage (_row_id, _last_updated_sequence_number) "
                         "starts afresh")
#: Operations whose snapshots the catch-up carries (append) or skips (replace: the same rows).
CARRIED, SAME_ROWS = "append", "replace"

Progress = Callable[[str], None]
#: ``prove(table) -> (ok, one-line summary)``: the verifier's proof of the staging table.
Prove = Callable[[str], "tuple[bool, str]"]


@dataclass
class AdoptResult:
    table: str
    staging_table: str
    plaintext_table: str | None = None
    key_id: str | None = None
    format_version: int | None = None
    source_snapshot: int | None = None  # S0: the snapshot the copy started from
    copied_snapshot: int | None = None  # the last snapshot of the original the new table holds
    rounds: int = 0
    carried_snapshots: list[int] = field(default_factory=list)  # appends carried over after S0
    redone_from: list[int] = field(default_factory=list)  # copies redone after a delete / overwrite
    compared: dict[str, Any] = field(default_factory=dict)
    proof: str | None = None
    swapped: bool = False
    purged: bool = False
    purge_command: str | None = None
    kept: list[str] = field(default_factory=list)
    not_kept: list[str] = field(default_factory=list)
    dropped_properties: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)  # "branch NAME" / "tag NAME" of the original
    steps_done: list[str] = field(default_factory=list)
    location: str | None = None
    swap_attempts: int = 0  # swaps started (one more for each time a writer committed just before one)
    swap_gap_seconds: float | None = None  # the name was missing this long: start of rename #1 to end of rename #2
    already_encrypted: bool = False  # under key_id already (at its creation, or by an earlier run)
    swept: list[str] = field(default_factory=list)  # plaintext files writers left, removed after the purge

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def encrypt_table(spark, table: str, key_id: str, *, format_version: int = 3, data_key_length: int | None = None,
                  refs: str = REFS_DROP, on_change: str = "redo", keep_original: str | None = None,
                  purge_now: bool = False, purge_after: float | None = None, prove: Prove | None = None,
                  max_rounds: int = 5, progress: Progress | None = None, fail_at: str | None = None) -> AdoptResult:
    """Make ``catalog.db.table`` an encrypted table under master key ``key_id``, with its rows, schema,
    spec, sort order, properties and comments; the original is renamed, then purged when asked.

    Args:
        format_version: of the new table (3: Iceberg encrypts format 3 tables only).
        refs: ``"drop"`` (default): the original's branches and tags are not carried over (listed in
            the result); ``"keep-original"``: the same, and the original is kept (not purged), so they
            stay readable there.
        on_change: a delete / overwrite on the original during the copy: ``"redo"`` the copy from
            the new snapshot (default), or ``"refuse"`` (:class:`OperationError`, nothing swapped).
        keep_original: rename the original to this name (same catalog and namespace) and keep it.
        purge_now / purge_after: ``DROP TABLE ... PURGE`` of the original right after the swap, or
            after this many seconds (default: neither; the result has the command).
        prove: ``prove(staging table) -> (ok, summary)``, the verifier's proof (this package's layers
            keep ``verify`` out of ``adopt``: pass ``verify_table`` wrapped, as the CLI does); the swap
            needs it OK. Without it only the rows are compared (``result.proof`` says so).
        max_rounds: catch-up rounds before the verification, then (with the name live) catch-up and
            verify rounds before the swap, and swaps started (a writer's commit just before the
            first rename renames the original back at once); beyond them OperationError, nothing swapped.
        fail_at: for crash tests: raise :class:`OperationError` just before this phase (:data:`PHASES`).

    Raises:
        OperationError: a step failed, the input is refused, the original changed during the copy
            with ``on_change="refuse"``, or writers kept committing faster than the swap
            (``max_rounds``); the table keeps its name and rows: run again to finish.
        IntegrityError: the copy does not hold the original's rows, or the proof of the new table
            failed: nothing was swapped.
    """
    catalog, namespace, name = split_table_name(spark, table)
    if refs not in (REFS_DROP, REFS_KEEP_ORIGINAL):
        raise InvalidArgumentError(f"refs must be {REFS_DROP!r} or {REFS_KEEP_ORIGINAL!r}, got {refs!r}")
    if on_change not in ON_CHANGE:
        raise InvalidArgumentError(f"on_change must be one of {', '.join(ON_CHANGE)}, got {on_change!r}")
    if fail_at is not None and fail_at not in PHASES:
        raise InvalidArgumentError(f"fail_at must be one of {', '.join(PHASES)}, got {fail_at!r}")
    if purge_after is not None and purge_after < 0:
        raise InvalidArgumentError(f"purge_after must be >= 0 seconds, got {purge_after!r}")
    if (purge_now or purge_after is not None) and (keep_original or refs == REFS_KEEP_ORIGINAL):
        raise InvalidArgumentError("purging the original contradicts keeping it (keep_original / refs='keep-original')")
    if max_rounds < 1:
        raise InvalidArgumentError(f"max_rounds must be >= 1, got {max_rounds!r}")
    if keep_original is not None and (not keep_original or "." in keep_original or keep_original == name):
        raise InvalidArgumentError(f"keep_original must be a new table name in {namespace} (no dots), got {keep_original!r}")
    new_properties = config.table_properties(key_id, data_key_length=data_key_length, format_version=format_version)
    run = _Run(spark, catalog, namespace, name, progress or (lambda _m: None), fail_at, prove, on_change, max_rounds)
    result = AdoptResult(run.full(name), run.full(name + STAGING_SUFFIX), key_id=key_id, format_version=format_version)
    original, staging = run.load(name), run.load(run.staging)

    if original is not None and original.properties().get(KEY_ID):
        _already_encrypted(run, original, key_id, result)
    if original is not None and original.properties().get(SOURCE_UUID):  # swapped by an earlier run
        result.plaintext_table = run.full(original.properties().get(PLAINTEXT_NAME))
        result.swapped, result.location = True, original.location()
        result.steps_done.append("swapped earlier")
        return _purge(run, original, result, purge_now, purge_after)
    if original is None and staging is None:
        raise OperationError(f"no table {run.full(name)} (and no {run.full(run.staging)} of an earlier run)")
    if original is not None and original.properties().get(KEY_ID):  # encrypted at its creation
        return result
    from pyiceberg_crypto.bridge.key_check import check_key_id  # imports py4j: only once Spark runs

    check_key_id(spark, key_id, catalog=catalog)  # an unknown key fails here, before any table is made
    if staging is not None:
        if not staging.properties().get(KEY_ID):
            raise OperationError(f"{run.full(run.staging)} exists and is not encrypted: it is not this package's staging "
                                 "table; rename or drop it")
        if original is not None and staging.properties().get(SOURCE_UUID) != _uuid(original):
            raise OperationError(f"{run.full(run.staging)} was copied from another table than {run.full(name)} (UUID "
                             f"{staging.properties().get(SOURCE_UUID)} vs {_uuid(original)}): drop it and run again")
    if staging is not None and original is not None and staging.properties().get(KEY_ID) != new_properties[KEY_ID]:
        # An earlier run's copy under another master key (a typo, or a key changed since): the
        # original still holds the name and every row, so the copy is dropped and made again.
        run.say(f"drop {run.full(run.staging)} of an earlier run: it is encrypted with master key "
                f"{staging.properties().get(KEY_ID)!r}, not {new_properties[KEY_ID]!r}; copying again")
        run.drop(run.staging)
        result.steps_done.append("dropped the staging table of an earlier run (another master key)")
        staging = None
    if staging is None:
        run.phase("stage")
        staging = _stage(run, original, new_properties, keep_original, result)
    else:
        if staging.properties().get(KEY_ID) != new_properties[KEY_ID]:  # the original is gone: keep the copy
            raise OperationError(f"{run.full(run.staging)} of an earlier run is encrypted with master key "
                             f"{staging.properties().get(KEY_ID)!r}, not {new_properties[KEY_ID]!r}, and the "
                             "original was already renamed: run again with that key to finish")
        result.steps_done.append("stage (earlier run)")
    plaintext_name = staging.properties().get(PLAINTEXT_NAME)
    result.plaintext_table = run.full(plaintext_name)
    if keep_original and plaintext_name != keep_original:
        raise OperationError(f"an earlier run chose to rename the original to {plaintext_name}, not {keep_original}: "
                             "run again without keep_original, or drop the staging table and start over")
    if original is None:  # the original was renamed by an earlier run: finish the swap
        original = run.load(plaintext_name)
        if original is None or _uuid(original) != staging.properties().get(SOURCE_UUID):
            raise OperationError(f"neither {run.full(name)} nor the renamed original {run.full(plaintext_name)} exists: "
                                 f"{run.full(run.staging)} is all that is left (rename it to {name} by hand after checking it)")
        result.steps_done.append("swap-original (earlier run)")
        _describe(run, original, staging, result, new_properties)
        _final(run, original, staging, result)
        return _after_swap(run, result, purge_now, purge_after)
    _describe(run, original, staging, result, new_properties)

    run.phase("copy")
    copied = _copied(staging)
    if copied is None:
        s0 = _current_id(original)
        result.source_snapshot = s0
        if s0 is not None:
            run.say(f"copy {run.full(name)} at snapshot {s0} into {run.full(run.staging)}")
            _write(run, run.select_at(name, s0), s0, overwrite=False)
        copied = s0
        staging.refresh()
    else:
        result.source_snapshot = _first_copied(staging)
    result.steps_done.append("copy")

    run.phase("catch-up")
    for round_number in range(1, max_rounds + 1):
        original.refresh()
        if _current_id(original) == copied:
            break
        result.rounds = round_number
        copied = _catch_up(run, name, original, copied, result)
    result.steps_done.append("catch-up")

    run.phase("verify")
    staging.refresh()
    _check_layout(run, original, staging, name)
    _verify(run, name, original, staging, _copied(staging), result)
    result.steps_done.append("verify")

    _swap(run, original, staging, result)
    return _after_swap(run, result, purge_now, purge_after)


class _Run:
    """One run's session, names and hooks."""

    def __init__(self, spark, catalog, namespace, name, say, fail_at, prove, on_change, max_rounds):
        self.spark, self.catalog, self.namespace, self.name = spark, catalog, namespace, name
        self.staging = name + STAGING_SUFFIX
        self.say, self.fail_at, self.prove, self.on_change, self.max_rounds = say, fail_at, prove, on_change, max_rounds
        self.jvm = spark.sparkContext._jvm
        try:
            self.icebergs = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()
        except Exception as exc:
            raise OperationError(f"catalog {catalog!r} is not an Iceberg catalog of this session: {java_line(exc)}") from None

    def full(self, name: str) -> str:
        return f"{self.catalog}.{self.namespace}.{name}"

    def ident(self, name: str):
        return self.jvm.org.apache.iceberg.catalog.TableIdentifier.parse(f"{self.namespace}.{name}")

    def load(self, name: str):
        """The Iceberg table, fresh from the catalog, or None when there is none."""
        try:
            if not self.icebergs.tableExists(self.ident(name)):
                return None
            table = self.icebergs.loadTable(self.ident(name))
            table.refresh()
            return table
        except Exception as exc:
            raise OperationError(f"cannot load {self.full(name)}: {java_line(exc)}") from None

    def rename(self, source: str, target: str, *, refresh: bool = True) -> None:
        """One catalog rename (``refresh``: then ``REFRESH TABLE`` of the target; the swap refreshes
        after its second rename, so nothing but the catalog calls runs between the two)."""
        self.say(f"rename {self.full(source)} to {self.full(target)}")
        try:
            self.icebergs.renameTable(self.ident(source), self.ident(target))
        except Exception as exc:
            raise OperationError(f"cannot rename {self.full(source)} to {self.full(target)}: {java_line(exc)}") from None
        if refresh:
            self.refresh(target)

    def current_after_rename(self, name: str) -> int | None:
        """The current snapshot id of ``name``, in one load from the catalog (between the two renames)."""
        try:
            table = self.icebergs.loadTable(self.ident(name))
            table.refresh()  # a table the session's catalog cache held under this name would be stale
            return _current_id(table)
        except Exception as exc:
            raise OperationError(f"cannot load {self.full(name)}: {java_line(exc)}") from None

    def refresh(self, name: str) -> None:
        try:
            self.spark.sql(f"REFRESH TABLE {self.full(name)}")
        except Exception:  # noqa: S110 - a table that is gone has nothing to refresh
            pass

    def drop(self, name: str) -> None:
        """``DROP TABLE ... PURGE``: only for this package's own staging table."""
        try:
            self.spark.sql(f"DROP TABLE {self.full(name)} PURGE")
        except Exception as exc:
            raise OperationError(f"cannot drop {self.full(name)}: {java_line(exc)}; run again") from None

    def select_at(self, name: str, snapshot_id: int):
        self.refresh(name)
        return self.spark.sql(f"SELECT * FROM {self.full(name)} VERSION AS OF {int(snapshot_id)}")

    def phase(self, phase: str) -> None:
        if self.fail_at == phase:
            raise OperationError(f"stopped before the {phase} phase (fail_at, a crash test); run again to finish")
        self.say(phase)


def _stage(run: _Run, original, new_properties: dict[str, str], keep_original: str | None, result: AdoptResult):
    """The encrypted staging table: the original's schema, spec, sort order and properties."""
    jvm = run.jvm
    properties = jvm.java.util.HashMap()
    for key, value in _carried_properties(original, result).items():
        properties.put(key, value)
    for key, value in new_properties.items():
        properties.put(key, value)
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    properties.put(SOURCE_UUID, _uuid(original))
    properties.put(SOURCE_LAYOUT, _layout(original))
    properties.put(PLAINTEXT_NAME, keep_original or f"{run.name}{PLAINTEXT_SUFFIX}{stamp}")
    run.say(f"create {run.full(run.staging)} (encrypted, master key {new_properties[KEY_ID]!r})")
    try:
        staging = (run.icebergs.buildTable(run.ident(run.staging), original.schema())
                   .withPartitionSpec(original.spec()).withSortOrder(original.sortOrder())
                   .withProperties(properties).create())
    except Exception as exc:
        raise OperationError(f"cannot create {run.full(run.staging)}: {java_line(exc)}") from None
    _keep_field_ids(run, original, staging)
    staging.refresh()
    result.steps_done.append("stage")
    return staging


def _keep_field_ids(run: _Run, original, staging) -> None:
    """Creating a table assigns fresh field ids (1..n in order): when the original's differ (an evolved
    schema), one metadata commit makes the original's schema (its ids), spec and sort order current."""
    if _field_ids(original.schema()) == _field_ids(staging.schema()):
        return
    ops = staging.operations()
    try:
        base = ops.refresh()
        builder = run.jvm.org.apache.iceberg.TableMetadata.buildFrom(base)
        builder.setCurrentSchema(original.schema(), max(original.operations().current().lastColumnId(),
                                                         base.lastColumnId()))
        builder.setDefaultPartitionSpec(original.spec())
        builder.setDefaultSortOrder(original.sortOrder())
        ops.commit(base, builder.build())
    except Exception as exc:
        run.say(f"field ids not kept: {java_line(exc)}")


def _carried_properties(original, result: AdoptResult) -> dict[str, str]:
    carried, dropped = {}, []
    for key, value in java_map(original.properties()).items():
        if key in RESERVED or key.startswith("encryption.") or key in PATH_PROPERTIES:
            dropped.append(key)
        else:
            carried[str(key)] = str(value)
    result.dropped_properties = sorted(dropped)
    return carried


def _describe(run: _Run, original, staging, result: AdoptResult, new_properties: dict[str, str] | None = None) -> None:
    """What is kept and what is not (said, never dropped silently)."""
    kept, not_kept = [], []
    if staging is not None:
        same_ids = _field_ids(original.schema()) == _field_ids(staging.schema())
        kept.append("schema with its column comments" + (" and field ids" if same_ids else ""))
        if not same_ids:
            not_kept.append("field ids: Iceberg assigned fresh ones (" + ", ".join(
                f"{n} {a}->{b}" for (n, a), (_n, b) in zip(_field_ids(original.schema()), _field_ids(staging.schema()))
                if a != b) + ")")
        kept.append(f"partition spec {original.spec()}".replace("\n", " "))
        kept.append(f"sort order {original.sortOrder()}".replace("\n", " "))
        kept.append("table properties and the table comment" + (
            f" (not: {', '.join(result.dropped_properties)}: the new table's own)" if result.dropped_properties else ""))
        old_specs = len(original.specs()) - 1
        if old_specs:
            not_kept.append(f"{old_specs} older partition spec(s): every row is written under the current spec")
    if staging is not None and str(staging.location()) != str(original.location()):
        not_kept.append(f"location: the new table's files are under {staging.location()} (a rename moves no file), "
                        f"not {original.location()}")
    snapshots = java_list(original.snapshots(), run.jvm)
    if snapshots:
        not_kept.append(f"time travel: {len(snapshots)} plaintext snapshot(s) (VERSION / TIMESTAMP AS OF) stay with the "
                        f"original ({result.plaintext_table}) {UNTIL_PURGED}")
    refs = java_map(original.refs())
    result.refs = sorted(f"{'branch' if ref.isBranch() else 'tag'} {n}" for n, ref in refs.items() if n != "main")
    if result.refs:
        not_kept.append(f"refs {', '.join(result.refs)}: not carried over; readable on the original {UNTIL_PURGED}")
    not_kept.append(METADATA_COLUMNS_NOTE)
    result.kept, result.not_kept = kept, not_kept


def _field_ids(schema) -> list[tuple[str, int]]:
    out = []

    def walk(fields, prefix):
        for f in java_list(fields):
            out.append((prefix + str(f.name()), int(f.fieldId())))
            if f.type().isStructType():
                walk(f.type().asStructType().fields(), prefix + str(f.name()) + ".")

    walk(schema.columns(), "")
    return sorted(out)


def _current_id(table) -> int | None:
    snapshot = table.currentSnapshot()
    return None if snapshot is None else int(snapshot.snapshotId())


def _copied(staging) -> int | None:
    """The original's snapshot the staging table's current snapshot holds the rows of."""
    snapshot = staging.currentSnapshot()
    value = None if snapshot is None else snapshot.summary().get(SOURCE_SNAPSHOT)
    return None if value is None else int(value)


def _first_copied(staging) -> int | None:
    snapshots = sorted(java_list(staging.snapshots()), key=lambda s: s.sequenceNumber())
    for snapshot in snapshots:
        value = snapshot.summary().get(SOURCE_SNAPSHOT)
        if value is not None:
            return int(value)
    return None


def _write(run: _Run, frame, source_snapshot: int, *, overwrite: bool) -> None:
    """One commit to the staging table recording ``source_snapshot`` in its summary."""
    writer = frame.writeTo(run.full(run.staging)).option(f"snapshot-property.{SOURCE_SNAPSHOT}", str(source_snapshot))
    try:
        if overwrite:
            from pyspark.sql.functions import lit

            writer.overwrite(lit(True))
        else:
            writer.append()
    except Exception as exc:
        raise OperationError(f"the copy into {run.full(run.staging)} failed: {java_line(exc)}; nothing of it was "
                             "committed: run again") from None
    run.refresh(run.staging)


def _between(table, since: int | None, until: int) -> list | None:
    """The snapshots after ``since`` up to ``until`` (oldest first), or None when ``since`` is not
    an ancestor of ``until`` (a rollback or a replaced history)."""
    chain = []
    snapshot = table.snapshot(until)
    while snapshot is not None and (since is None or int(snapshot.snapshotId()) != since):
        chain.append(snapshot)
        parent = snapshot.parentId()
        snapshot = None if parent is None else table.snapshot(parent)
    if since is not None and snapshot is None:
        return None
    return list(reversed(chain))


def _catch_up(run: _Run, name: str, original, copied: int | None, result: AdoptResult) -> int:
    """Carry what ``original`` committed after ``copied`` into the staging table; the new copied id."""
    _check_layout(run, original, run.load(run.staging), name)
    current = _current_id(original)
    chain = _between(original, copied, current)
    changed = [s for s in chain or [] if s.operation() not in (CARRIED, SAME_ROWS)]
    if chain is None or changed or copied is None:
        why = ("its history no longer holds the copied snapshot" if chain is None else
               f"snapshot {changed[0].snapshotId()} is a {changed[0].operation()}" if changed else "the copy was empty")
        if run.on_change == "refuse" and copied is not None:
            raise OperationError(f"{run.full(name)} changed during the copy ({why}): refused (on_change='refuse'); "
                                 f"nothing was swapped; run again to copy it from its current snapshot {current}")
        run.say(f"{run.full(name)} changed during the copy ({why}): copy again from snapshot {current}")
        _write(run, run.select_at(name, current), current, overwrite=True)
        result.redone_from.append(current)
        return current
    appended = [int(s.snapshotId()) for s in chain if s.operation() == CARRIED]
    run.say(f"carry over {len(appended)} append(s) committed to {run.full(name)} since snapshot {copied}")
    run.refresh(name)
    frame = (run.spark.read.format("iceberg").option("start-snapshot-id", str(copied))
             .option("end-snapshot-id", str(current)).load(run.full(name)))
    _write(run, frame, current, overwrite=False)
    result.carried_snapshots.extend(appended)
    return current


def _verify(run: _Run, name: str, original, staging, copied: int | None, result: AdoptResult) -> None:
    """Counts and hashes per partition, original at ``copied`` against the copy; the proof. Raises on a difference."""
    columns = [str(f.name()) for f in java_list(staging.schema().columns())]
    keys = partition_key_expressions(run.catalog, [
        (str(f.name()), str(f.transform()), str(staging.schema().findColumnName(f.sourceId())))
        for f in java_list(staging.spec().fields())])
    run.refresh(name)
    run.refresh(run.staging)
    source = rows_fingerprint(run.spark, run.full(name), copied, columns, keys)
    copy = rows_fingerprint(run.spark, run.full(run.staging), _current_id(staging), columns, keys)
    differences = source.differences(copy)
    result.copied_snapshot = copied
    result.compared = {"original": run.full(name), "original_snapshot": copied, "copy": run.full(run.staging),
                       "copy_snapshot": _current_id(staging), "rows": copy.rows, "partitions": len(copy.partitions),
                       "partitioned_by": [n for n, _ in keys], "hash": "sum of xxhash64(to_json(row))",
                       "columns": columns, "equal": not differences}
    if differences:
        raise IntegrityError(f"the copy {run.full(run.staging)} does not hold the rows of {run.full(name)} at "
                             f"snapshot {copied}: " + "; ".join(differences[:5]) + "; nothing was swapped")
    run.say(f"rows compared: {copy.rows} row(s) in {len(copy.partitions)} partition(s), equal")
    if run.prove is None:
        result.proof = "not proven: no prove callable was given (the rows were compared)"
    else:
        try:
            ok, summary = run.prove(run.full(run.staging))
        except Exception as exc:  # the proof could not run: no swap
            ok, summary = False, f"the proof raised {type(exc).__name__}: {exc}"
        result.proof = summary
        if not ok:
            raise IntegrityError(f"the proof of {run.full(run.staging)} failed ({summary}); nothing was swapped")


#: The refusal when writers commit to the original between every check and the first rename.
TOO_FAST = ("writers commit to {table} faster than the swap ({attempts} attempt(s), {rounds} catch-up round(s) before "
            "it): pause them (or run again when they are quieter); nothing was swapped, the table is as it was")


def _swap(run: _Run, original, staging, result: AdoptResult) -> None:
    """The swap, with the name live until it starts: catch up and verify (rows and proof) until the
    original's current snapshot is the verified one; then rename #1 (the original to its plaintext
    name), one load of it, and rename #2 (the copy to the name) at once. Nothing else runs between
    the two renames: a writer sees the name missing for two catalog calls and a load. When a writer
    committed just before rename #1 (the load shows a newer snapshot), the original is renamed back
    at once and the round goes again, at most ``max_rounds`` times; then OperationError (TOO_FAST)."""
    name, plaintext_name = run.name, staging.properties().get(PLAINTEXT_NAME)
    for attempt in range(1, run.max_rounds + 1):
        _caught_up(run, original, staging, result, attempt)
        verified = _copied(staging)
        run.phase("swap-original")
        result.swap_attempts = attempt
        started = time.monotonic()
        run.rename(name, plaintext_name, refresh=False)
        if run.current_after_rename(plaintext_name) == verified:
            run.phase("swap-staging")  # fail_at here is a crash between the renames: a re-run finishes it
            try:
                run.rename(run.staging, name, refresh=False)
            except OperationError:
                run.rename(plaintext_name, name)  # the name back to the original: nothing swapped
                raise
            result.swap_gap_seconds = round(time.monotonic() - started, 4)
            run.say(f"swapped: {run.full(name)} was missing for {result.swap_gap_seconds:.3f} s (two renames and a load)")
            run.refresh(name)
            run.refresh(plaintext_name)
            result.swapped = True
            result.steps_done.extend(["swap-original", "swap-staging"])
            result.location = run.load(name).location()
            return
        run.rename(plaintext_name, name, refresh=False)  # a writer committed in between: the name back at once
        gap = time.monotonic() - started
        run.say(f"{run.full(name)} changed just before the swap: renamed back after {gap:.3f} s; catching up again")
        run.refresh(name)
        original = run.load(name)
    raise OperationError(TOO_FAST.format(table=run.full(name), attempts=run.max_rounds, rounds=result.rounds))


def _caught_up(run: _Run, original, staging, result: AdoptResult, attempt: int) -> None:
    """Catch up and verify (with the name live) until the original's current snapshot is the one the
    copy holds and the rows and proof were checked at; at most ``max_rounds`` rounds."""
    for round_ in range(run.max_rounds + 1):
        original.refresh()
        staging.refresh()
        _check_layout(run, original, staging, run.name)
        copied = _copied(staging)
        if _current_id(original) == copied and result.copied_snapshot == copied:
            return
        if round_ == run.max_rounds:
            break
        if _current_id(original) != copied:
            result.rounds += 1
            run.say(f"catch up before the swap (round {result.rounds}): {run.full(run.name)} committed since "
                    f"snapshot {copied}")
            _catch_up(run, run.name, original, copied, result)
            staging.refresh()
        _verify(run, run.name, original, staging, _copied(staging), result)
    raise OperationError(TOO_FAST.format(table=run.full(run.name), attempts=attempt, rounds=result.rounds))


def _final(run: _Run, original, staging, result: AdoptResult) -> None:
    """Finish the swap an earlier run left between its two renames (no table has the name, no
    writer commits to the renamed original): carry over its last commits, check again, rename the
    staging table to the name."""
    plaintext_name = staging.properties().get(PLAINTEXT_NAME)
    staging.refresh()
    _check_layout(run, original, staging, plaintext_name)
    copied = _copied(staging)
    if _current_id(original) != copied:
        result.rounds += 1
        _catch_up(run, plaintext_name, original, copied, result)
        staging.refresh()
    _verify(run, plaintext_name, original, staging, _copied(staging), result)
    result.compared["original"] = run.full(run.name)
    run.phase("swap-staging")
    run.rename(run.staging, run.name)
    result.swapped = True
    result.steps_done.append("swap-staging")
    result.location = run.load(run.name).location()


def reload_table(spark, table: str) -> None:
    """Drop this session's cached copy of ``table`` (``catalog.db.name``) from Iceberg's catalog
    cache, so its next statement loads the table from the catalog.

    What a writer session runs when it hit a swap (:func:`encrypt_table`, another application): a
    cached table that was refreshed twice while the name was missing keeps a null current metadata,
    and every statement on it fails (``INTERNAL_ERROR``, "TableOperations.current() is null"), even
    ``REFRESH TABLE`` and ``spark.catalog.refreshTable``, which load it first; this does not load it.
    Without it, the cache forgets the table 30 s (``cache.expiration-interval-ms``) after its last use.
    """
    catalog, namespace, name = split_table_name(spark, table)
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    parts = namespace.split(".")
    levels = gateway.new_array(jvm.java.lang.String, len(parts))
    for index, part in enumerate(parts):
        levels[index] = part
    try:
        spark_catalog = spark._jsparkSession.sessionState().catalogManager().catalog(catalog)
        spark_catalog.invalidateTable(jvm.org.apache.spark.sql.connector.catalog.Identifier.of(levels, name))
    except Exception as exc:
        raise OperationError(f"cannot reload {table}: {java_line(exc)}") from None


def _already_encrypted(run: _Run, table, key_id: str, result: AdoptResult) -> None:
    """One rule for a table that is already encrypted, at its creation or by an earlier run: under
    ``key_id``, nothing to do (``result.already_encrypted``; an earlier run's purge may be left);
    under another master key, OperationError (moving a table to another key is not adoption)."""
    existing = table.properties().get(KEY_ID)
    if existing != key_id:
        raise OperationError(f"{run.full(run.name)} is already encrypted, under master key {existing!r}, not {key_id!r}: "
                             "nothing was changed (a table keeps its master key: rotate it with `pyiceberg-crypto "
                             "keystore rotate` and `keys rewrap`, or re-encrypt with `keys reencrypt`)")
    result.already_encrypted, result.location = True, str(table.location())
    result.steps_done.append("already encrypted")


def _after_swap(run: _Run, result: AdoptResult, purge_now: bool, purge_after: float | None) -> AdoptResult:
    new = run.load(run.name)
    return _purge(run, new, result, purge_now, purge_after)


def _purge(run: _Run, new, result: AdoptResult, purge_now: bool, purge_after: float | None) -> AdoptResult:
    plaintext_name = new.properties().get(PLAINTEXT_NAME)
    exists = run.load(plaintext_name) is not None
    result.purge_command = f"DROP TABLE {run.full(plaintext_name)} PURGE" if exists else None
    result.purged = new.properties().get(PURGED) == "true" and not exists
    if not exists or not (purge_now or purge_after is not None):
        return result
    run.phase("purge")
    if purge_after:
        run.say(f"purge {run.full(plaintext_name)} in {purge_after:g} s")
        time.sleep(purge_after)
    original_location = str(run.load(plaintext_name).location())
    try:
        run.spark.sql(f"DROP TABLE {run.full(plaintext_name)} PURGE")
    except Exception as exc:
        raise OperationError(f"DROP TABLE {run.full(plaintext_name)} PURGE failed: {java_line(exc)}; run it again") from None
    result.swept = _sweep(run, new, original_location)
    new.updateProperties().set(PURGED, "true").commit()
    run.refresh(run.name)
    result.purged, result.purge_command = True, None
    result.not_kept = [item.replace(UNTIL_PURGED, "until it was purged (this run purged it)") for item in result.not_kept]
    result.steps_done.append("purge")
    return result


#: What stays on the original until it is purged (the result's ``not_kept`` lines say so).
UNTIL_PURGED = "until it is purged"
#: Files listed under the original's location at most (a bound on the sweep).
MAX_SWEPT_FILES = 1_000_000


def _sweep(run: _Run, new, original_location: str) -> list[str]:
    """After ``DROP TABLE ... PURGE`` of the original: the plaintext files its metadata no longer
    named (a failed or late writer's, a killed job's) are removed from under its location (never
    from under the new table's), then the location is listed again and must hold no plaintext file.
    Returns the removed paths. A FileIO that cannot list prefixes is an OperationError naming it."""
    io, keep = new.io(), str(new.location()).rstrip("/") + "/"
    prefix = original_location.rstrip("/") + "/"
    if keep.startswith(prefix) and keep != prefix:
        run.say(f"the new table's files are under the original's location {original_location}: kept")

    def plaintext_files() -> list[str]:
        try:
            listing = io.listPrefix(prefix).iterator()
        except Exception as exc:
            raise OperationError(f"cannot list {original_location} to remove what writers left there ({java_line(exc)}); "
                             "check it by hand for plaintext files") from None
        found = []
        for _ in range(MAX_SWEPT_FILES):
            if not listing.hasNext():
                break
            path = str(listing.next().location())
            if not path.startswith(keep) and plaintext_format(_magic(io, path)) is not None:
                found.append(path)
        return found

    removed = plaintext_files()
    for path in removed:
        run.say(f"remove {path}: a plaintext file no table references")
        io.deleteFile(path)
    left = plaintext_files()
    if left:
        raise OperationError(f"{len(left)} plaintext file(s) are still under {original_location} after the purge "
                         f"(e.g. {left[0]}): a writer is still writing there; stop it and run again")
    return removed


def _magic(io, path: str) -> bytes:
    """The first four bytes of ``path`` (fewer for a shorter file; none when it cannot be read)."""
    try:
        stream = io.newInputFile(path).newStream()
    except Exception:
        return b""
    try:
        out = bytearray()
        for _ in range(4):
            byte = stream.read()
            if byte < 0:
                break
            out.append(byte)
        return bytes(out)
    finally:
        stream.close()


def _layout(table) -> str:
    """The schema id, spec id and sort order id of ``table`` (what the staging table was made from)."""
    return f"schema {table.schema().schemaId()}, spec {table.spec().specId()}, sort order {table.sortOrder().orderId()}"


def _check_layout(run: _Run, original, staging, name: str) -> None:
    """OperationError when the original's schema, spec or sort order changed since the staging table was made."""
    made_from, now = staging.properties().get(SOURCE_LAYOUT), _layout(original)
    if made_from is not None and made_from != now:
        raise OperationError(f"{run.full(name)} changed its schema, partition spec or sort order during the copy ({made_from} "
                             f"then, {now} now): drop {run.full(run.staging)} and run again; nothing was swapped")


def _uuid(table) -> str:
    return str(table.uuid().toString())
