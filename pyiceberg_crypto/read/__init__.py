"""Read encrypted Iceberg tables into Arrow without a JVM (``pip install 'pyiceberg-crypto[read]'``).

    from pyiceberg_crypto.read import read_table
    table = read_table("/wh/db.db/orders/metadata/00007-....metadata.json", kms)
    table.to_pandas()                      # pandas
    duckdb.from_arrow(table)               # DuckDB
    polars.from_arrow(table)               # Polars

Modules: :mod:`.schema` (Iceberg schema -> Arrow, projection by field id), :mod:`.plan` (which
files, which deletes), :mod:`._files` (one file authenticated and decoded), :mod:`._avro` (Avro data
files), :mod:`._deletes` (row-level deletes), :mod:`.table` (``read_table`` / ``scan``).
"""

try:
    import pyarrow  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("pyiceberg_crypto.read needs PyArrow: pip install 'pyiceberg-crypto[read]'") from exc

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import InvalidArgumentError, ReadIntegrityError, TableInputError
from pyiceberg_crypto.read.table import read_table, scan

__all__ = ["ReadIntegrityError", "TableInputError", "read_table", "scan"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"ReadKeyError": ReadIntegrityError, "SchemaError": InvalidArgumentError})
