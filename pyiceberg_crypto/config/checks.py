"""Checks against a running session and its KMS: the master key a new table names, and the
engines declared as readers of an existing table::

    from pyiceberg_crypto import config

    props = config.table_properties("orders-master-key", spark=spark, catalog="lake")  # the KMS must know it
    config.declare_readers(spark, "lake.db.orders", ["spark", "trino"], set_modes=True)

:func:`require_known_key` is the check ``table_properties(spark=...)`` runs; it asks the bridge
(:mod:`pyiceberg_crypto.bridge.key_check`), imported only then: importing
:mod:`pyiceberg_crypto.config` loads neither Py4J nor pyspark.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg_crypto.config.render import tblproperties_sql
from pyiceberg_crypto.engines import ENGINES, mode_conflicts, parse_readers, row_level_properties
from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.properties import KEY_ID, READERS_PROPERTY

__all__ = ["declare_readers"]


def require_known_key(spark, key_id: str, *, catalog: str | None = None) -> None:
    """InvalidArgumentError unless the KMS of Spark catalog ``catalog`` (default: the session's
    current catalog) knows master key ``key_id``: :func:`pyiceberg_crypto.bridge.check_key_id`,
    which Iceberg itself does not ask before the table's first INSERT."""
    from pyiceberg_crypto.bridge.key_check import check_key_id  # py4j: only when a session is given

    check_key_id(spark, key_id, catalog=catalog)


def declare_readers(spark, table: str, readers: str | Sequence[str], *, set_modes: bool = False,
                    convert: bool = False) -> dict[str, str]:
    """Declare the engines that must read an existing table (``pyiceberg-crypto.readers``), after
    checking they can keep reading it; returns the properties set.

    ``set_modes``: also set the row-level modes the readers need (copy-on-write for Trino) in the
    same ``ALTER TABLE``. ``convert`` (with ``set_modes``): also fold the deletion vectors of the
    current snapshot in (``rewrite_data_files`` with ``delete-file-threshold=1``, after the modes
    are set), so a table that holds some is made readable in one call::

        declare_readers(spark, "lake.db.orders", ["spark", "trino"], set_modes=True, convert=True)

    Without them, a table the readers cannot keep reading is refused, naming every obstacle at once
    (modes that write what a reader cannot read; deletion vectors in the current snapshot) and the
    whole fix.

    Raises:
        InvalidArgumentError: an unknown reader, ``convert`` without ``set_modes``, obstacles left
            (modes without ``set_modes``, deletion vectors without ``convert``), or a table that
            is not encrypted format 3.
    """
    names = parse_readers(readers)
    if convert and not set_modes:
        raise InvalidArgumentError("convert=True needs set_modes=True: folding deletion vectors in is undone by the "
                                   "next merge-on-read DELETE")
    if table.count(".") < 1 or "`" in table:
        raise InvalidArgumentError(f"name the table as catalog.db.table, got {table!r}")
    try:
        current = {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}
    except Exception as exc:  # AnalysisException: no such table
        raise InvalidArgumentError(f"cannot read the properties of {table}: {str(exc).splitlines()[0]}") from None
    if not current.get(KEY_ID):
        raise InvalidArgumentError(f"{table} has no {KEY_ID}: declare readers of encrypted tables only")
    wanted = {READERS_PROPERTY: ",".join(names)}
    blocked = [n for n in names if ENGINES[n].copy_on_write]
    obstacles, fixes = [], []
    if not set_modes:
        conflicts = mode_conflicts(current, names)
        if conflicts:
            obstacles += conflicts
            modes = ", ".join(f"'{k}'='{v}'" for k, v in row_level_properties(names).items())
            fixes.append(f"ALTER TABLE {table} SET TBLPROPERTIES ({modes})")
    dvs = 0
    if blocked:
        dvs = spark.sql(f"SELECT count(*) FROM {table}.delete_files WHERE upper(file_format) = 'PUFFIN'").first()[0]
        if dvs and not convert:
            obstacles.append(f"the current snapshot holds {dvs} deletion vector(s), which {', '.join(blocked)} cannot "
                             "read")
            fixes.append(f"{_rewrite_call(table)} (rewrite_data_files with delete-file-threshold=1) to fold them in")
    if obstacles:
        flags = "set_modes=True" + (", convert=True" if dvs else "")
        raise InvalidArgumentError(f"{table}: " + "; ".join(obstacles) + "; fix: " + ", then ".join(fixes)
                                   + f" (or declare_readers(..., {flags}); docs/how-to/trino.md)")
    if set_modes:
        wanted.update(row_level_properties(names))
    spark.sql(f"ALTER TABLE {table} SET " + tblproperties_sql(wanted))
    if dvs and convert:
        spark.sql(_rewrite_call(table))
        left = spark.sql(f"SELECT count(*) FROM {table}.delete_files WHERE upper(file_format) = 'PUFFIN'").first()[0]
        if left:
            raise InvalidArgumentError(f"{table}: the readers are declared and the modes set, but {left} deletion "
                                       f"vector(s) are still in the current snapshot after {_rewrite_call(table)}")
    return wanted


def _rewrite_call(table: str) -> str:
    """The ``rewrite_data_files`` call that folds every deletion vector of ``table`` into its data files."""
    catalog, rest = table.split(".", 1)
    return (f"CALL {catalog}.system.rewrite_data_files(table => '{rest}', "
            "options => map('delete-file-threshold', '1'))")
