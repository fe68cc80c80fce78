"""Row filters of the JVM-free reader: which files it can skip, and exactly which rows it returns.

    read_table(location, kms, row_filter=[("day", "==", date(2026, 11, 24)), ("id", ">=", 1000)])

A filter is a conjunction (AND) of ``(column, op, value)`` predicates, ``op`` one of
``== != < <= > >= in not in`` (PyArrow's ``filters`` notation). Two uses:

- **Skipping files**: a data file is not read when its manifest entry's column bounds (Iceberg's
  ``lower_bounds`` / ``upper_bounds``, from the decrypted manifests) prove that no row can match
  one predicate. Bounds cover non-null values, and a comparison never matches a null, so this is
  exact; a file without bounds for the column is read. Identity partitions have bounds too.
- **Skipping row groups**: in a Parquet file that is read, a row group is not read (nor
  decrypted) when its column chunk statistics (from the authenticated footer) prove the same;
  row positions stay those of the file, so position deletes and deletion vectors still apply.
- **Exact rows**: every row returned matches (the filter is applied to each file read, after its
  deletes), so the result equals ``SELECT ... WHERE`` of the same predicates.

Only the bytes of files actually read are decrypted and authenticated: a skipped file is never
opened, so a filter cannot make the reader accept a file it would refuse.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import math
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["Predicate", "RowFilter"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"RowFilterError": InvalidArgumentError})

OPERATORS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")
_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class Predicate:
    column: str
    op: str
    value: Any

    def expression(self) -> pc.Expression:
        field = pc.field(self.column)
        if self.op in ("in", "not in"):
            values = [v.scalar() if isinstance(v, _DecimalLiteral) else v for v in self.value]
            if values and all(isinstance(v, _DecimalLiteral) for v in self.value):
                values = pa.array([v.value for v in self.value], type=values[0].type)
            return field.isin(values) if self.op == "in" else ~field.isin(values)
        value = self.value.scalar() if isinstance(self.value, _DecimalLiteral) else self.value
        return {"==": field.__eq__, "!=": field.__ne__, "<": field.__lt__, "<=": field.__le__,
                ">": field.__gt__, ">=": field.__ge__}[self.op](value)


@dataclass(frozen=True)
class RowFilter:
    """A conjunction of predicates; see the module documentation."""

    predicates: tuple[Predicate, ...]

    @classmethod
    def of(cls, row_filter: RowFilter | Iterable | None) -> RowFilter | None:
        """``None``, a ``RowFilter``, one ``(column, op, value)`` tuple or a list of them."""
        if row_filter is None or isinstance(row_filter, RowFilter):
            return row_filter
        items = list(row_filter)
        if len(items) == 3 and isinstance(items[0], str) and isinstance(items[1], str):
            items = [tuple(items)]  # one predicate
        predicates = []
        for item in items:
            if not (isinstance(item, (tuple, list)) and len(item) == 3 and isinstance(item[0], str)):
                raise InvalidArgumentError(f"a row filter predicate is (column, op, value), got {item!r}")
            column, op, value = item
            op = "==" if op == "=" else str(op).lower()
            if op not in OPERATORS:
                raise InvalidArgumentError(f"unknown operator {item[1]!r} in {item!r} (use one of {', '.join(OPERATORS)})")
            if op in ("in", "not in"):
                if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                    raise InvalidArgumentError(f"{op!r} takes a list of values, got {value!r}")
                value = tuple(value)
            elif value is None:
                raise InvalidArgumentError(f"{column} {op} None never matches (comparisons with null are null)")
            predicates.append(Predicate(column, op, value))
        if not predicates:
            return None
        return cls(tuple(predicates))

    @property
    def columns(self) -> list[str]:
        return list(dict.fromkeys(p.column for p in self.predicates))

    def bind(self, types: Mapping[str, Any]) -> RowFilter:
        """The filter with its values in the types of their columns (``types``: column name ->
        Iceberg type). A ``decimal(P,S)`` column takes an int or float literal when it is that
        decimal exactly (a float as its shortest decimal form: ``0.1`` is ``0.1``), as Spark's
        ``WHERE amount > 100`` does; otherwise :class:`InvalidArgumentError` says to compare with a
        :class:`~decimal.Decimal`. Other columns are left as they are."""
        bound = []
        for predicate in self.predicates:
            decimal = _DECIMAL_TYPE.fullmatch(types.get(predicate.column) or "") if isinstance(
                types.get(predicate.column), str) else None
            if decimal is None:
                bound.append(predicate)
                continue
            precision, scale = int(decimal.group(1)), int(decimal.group(2))
            if predicate.op in ("in", "not in"):
                value = tuple(_as_decimal(predicate.column, v, precision, scale) for v in predicate.value)
            else:
                value = _as_decimal(predicate.column, predicate.value, precision, scale)
            bound.append(Predicate(predicate.column, predicate.op, value))
        return RowFilter(tuple(bound))

    def expression(self) -> pc.Expression:
        expression = self.predicates[0].expression()
        for predicate in self.predicates[1:]:
            expression = expression & predicate.expression()
        return expression

    def apply(self, table: pa.Table) -> pa.Table:
        return table.filter(self.expression())

    def may_match(self, lower_bounds: Mapping[int, bytes], upper_bounds: Mapping[int, bytes],
                  fields: Mapping[str, tuple[int, Any]]) -> bool:
        """False when the bounds prove that no row of the file matches; ``fields``: column name ->
        (field id, Iceberg type)."""
        for predicate in self.predicates:
            field_id, iceberg_type = fields[predicate.column]
            low = decode_bound(iceberg_type, lower_bounds.get(field_id))
            high = decode_bound(iceberg_type, upper_bounds.get(field_id))
            if not _may_match(predicate, low, high, iceberg_type):
                return False
        return True

    def row_groups(self, fields: Mapping[str, tuple[int, Any]]):
        """A ``decrypt_parquet(row_groups=...)`` selector: the indexes of the row groups whose
        column chunk statistics do not prove that no row matches (``fields`` as for :meth:`may_match`)."""
        def select(footer_file: bytes) -> list[int]:
            metadata = pq.ParquetFile(pa.BufferReader(footer_file)).metadata
            leaves = _top_level_leaves(metadata)
            kept = []
            for index in range(metadata.num_row_groups):
                group = metadata.row_group(index)
                if all(_may_match(p, *_statistics(group, leaves.get(fields[p.column][0]), fields[p.column][1]),
                                  fields[p.column][1]) for p in self.predicates):
                    kept.append(index)
            return kept
        return select


_DECIMAL_TYPE = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


@dataclass(frozen=True)
class _DecimalLiteral:
    """A literal already in its decimal column's type: compared as ``decimal128(P, S)``, so Arrow
    never has to widen an int64 or a double against the column (``Precision is not great enough``)."""

    value: _decimal.Decimal
    precision: int
    scale: int

    def scalar(self) -> pa.Scalar:
        return pa.scalar(self.value, type=pa.decimal128(self.precision, self.scale))


def _as_decimal(column: str, value, precision: int, scale: int):
    if isinstance(value, _DecimalLiteral):
        return value
    if isinstance(value, bool):
        raise InvalidArgumentError(f"compare decimal column {column} with a Decimal, not {value!r}")
    if isinstance(value, int):
        exact = _decimal.Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"compare decimal column {column} with a Decimal, not {value!r}")
        exact = _decimal.Decimal(repr(value))
    elif isinstance(value, _decimal.Decimal):
        exact = value
    else:
        raise InvalidArgumentError(f"compare decimal column {column} with a Decimal, not {value!r} "
                                   f"({type(value).__name__})")
    try:
        fitted = exact.quantize(_decimal.Decimal(1).scaleb(-scale), context=_decimal.Context(prec=precision))
    except _decimal.InvalidOperation:
        fitted = None
    if fitted is None or fitted != exact:
        if isinstance(value, _decimal.Decimal):
            return value  # compared as it is (Arrow widens a Decimal exactly)
        raise InvalidArgumentError(f"compare decimal column {column} with a Decimal: {value!r} is not a "
                                   f"decimal({precision},{scale}) exactly (e.g. Decimal({str(exact)!r}))")
    return _DecimalLiteral(fitted, precision, scale)


def _top_level_leaves(metadata: pq.FileMetaData) -> dict[int, int]:
    """Field id -> leaf column ordinal, for the file's top-level primitive columns."""
    ordinals = {metadata.schema.column(j).path: j for j in range(metadata.num_columns)}
    leaves = {}
    for arrow_field in metadata.schema.to_arrow_schema():
        raw = (arrow_field.metadata or {}).get(b"PARQUET:field_id")
        if raw is not None and arrow_field.name in ordinals and not pa.types.is_nested(arrow_field.type):
            leaves[int(raw)] = ordinals[arrow_field.name]
    return leaves


def _statistics(group, ordinal: int | None, iceberg_type) -> tuple[Any, Any]:
    """A chunk's (min, max) as :func:`decode_bound` would give them, or (None, None). Physical
    values (``min_raw``): dates as days, timestamps in the column's unit, strings as UTF-8."""
    if ordinal is None:
        return None, None
    statistics = group.column(ordinal).statistics
    if statistics is None or not statistics.has_min_max:
        return None, None
    low, high = statistics.min_raw, statistics.max_raw
    if iceberg_type == "string":
        try:
            low, high = low.decode("utf-8"), high.decode("utf-8")
        except (AttributeError, UnicodeDecodeError):
            return None, None
    elif iceberg_type not in _LITTLE_ENDIAN and iceberg_type != "boolean":
        return None, None  # decimals, binary, uuid...: not compared
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        return None, None
    return low, high


def _may_match(predicate: Predicate, low, high, iceberg_type) -> bool:
    """False when ``low``/``high`` (bounds of non-null values; None: unknown) prove no row matches."""
    if low is None or high is None:
        return True
    if iceberg_type in ("float", "double") and predicate.op in ("!=", "not in"):
        return True  # bounds leave NaN out, and NaN != x holds: never ruled out by them
    try:
        return _bounds_may_match(predicate, low, high, iceberg_type)
    except (TypeError, ValueError, OverflowError):
        return True  # a value the bounds cannot be compared with: read it, filter exactly


def _bounds_may_match(predicate: Predicate, low, high, iceberg_type) -> bool:
    op = predicate.op
    if op in ("in", "not in"):
        values = [comparable(iceberg_type, v) for v in predicate.value]
        if op == "in":
            return any(low <= v <= high for v in values)
        return not (low == high and low in values)
    value = comparable(iceberg_type, predicate.value)
    if op == "==":
        return low <= value <= high
    if op == "!=":
        return not (low == high == value)
    if op == "<":
        return low < value
    if op == "<=":
        return low <= value
    if op == ">":
        return high > value
    return high >= value  # >=


# Iceberg spec, Appendix D "Single-value serialization": the binary form of bounds.
_LITTLE_ENDIAN = {"int": "<i", "date": "<i", "long": "<q", "time": "<q", "timestamp": "<q", "timestamptz": "<q",
                  "timestamp_ns": "<q", "timestamptz_ns": "<q", "float": "<f", "double": "<d"}


def decode_bound(iceberg_type, raw: bytes | None):
    """A bound as a comparable Python value, or None (absent, or a type bounds are not used for)."""
    if raw is None or not isinstance(iceberg_type, str):
        return None
    if iceberg_type in _LITTLE_ENDIAN:
        fmt = _LITTLE_ENDIAN[iceberg_type]
        if len(raw) == 4 and iceberg_type in ("long", "double"):  # written before an int/float promotion
            fmt = "<i" if iceberg_type == "long" else "<f"
        if len(raw) != struct.calcsize(fmt):
            return None
        value = struct.unpack(fmt, raw)[0]
        return None if isinstance(value, float) and math.isnan(value) else value
    if iceberg_type == "string":
        # Upper bounds may be truncated (and incremented): still a bound, compared as text.
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if iceberg_type == "boolean":
        return bool(raw[0]) if len(raw) == 1 else None
    return None


_PREDICATE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|=|!=|<=|>=|<|>|not\s+in\b|in\b)\s*(.+?)\s*$",
                        re.IGNORECASE)


def parse_predicate(text: str) -> tuple[str, str, Any]:
    """``"id >= 100"``, ``"category in ('a', 'b')"``, ``"d < 2024-03-01"`` -> a predicate tuple.

    Values: integers, decimals (as floats), ``'quoted'`` or bare text, ``true`` / ``false``,
    ISO dates (``2024-03-01``) and date-times (``2024-03-01T12:00:00+00:00``)."""
    match = _PREDICATE.match(text)
    if not match:
        raise InvalidArgumentError(f"a filter is COLUMN OP VALUE (op: {', '.join(OPERATORS)}), got {text!r}")
    column, op, raw = match.group(1), " ".join(match.group(2).lower().split()), match.group(3)
    if op in ("in", "not in"):
        inner = raw[1:-1] if raw.startswith("(") and raw.endswith(")") else raw
        return column, op, [_literal(part) for part in _split_list(inner)]
    return column, op, _literal(raw)


def _split_list(text: str) -> list[str]:
    parts, current, quote = [], "", None
    for char in text:
        if quote:
            current += char
            quote = None if char == quote else quote
        elif char in "'\"":
            quote, current = char, current + char
        elif char == ",":
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def _literal(text: str):
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return _dt.date.fromisoformat(text)
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        return text


def comparable(iceberg_type, value):
    """``value`` in the representation :func:`decode_bound` returns for ``iceberg_type``."""
    if iceberg_type == "date":
        if isinstance(value, _dt.datetime):
            raise TypeError("a datetime for a date column")
        return (value - _EPOCH_DATE).days if isinstance(value, _dt.date) else int(value)
    if iceberg_type in ("timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns"):
        if isinstance(value, _dt.datetime):
            aware = value if value.tzinfo else value.replace(tzinfo=_dt.timezone.utc)
            delta = aware - _EPOCH
            micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            return micros * 1000 if iceberg_type.endswith("_ns") else micros
        raise TypeError("timestamps compare with datetime values")
    if iceberg_type in ("int", "long", "time"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("an integer column")
        return value
    if iceberg_type in ("float", "double"):
        return float(value)
    if iceberg_type == "string":
        if not isinstance(value, str):
            raise TypeError("a string column")
        return value
    if iceberg_type == "boolean":
        return bool(value)
    raise TypeError(f"no bounds for {iceberg_type}")
