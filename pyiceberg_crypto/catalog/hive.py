"""A Hive metastore's table parameters, asked over Thrift directly (no JVM, no Spark).

Just enough of the Thrift binary protocol (strict messages over a plain, unframed socket, no SASL,
as Hive's unsecured metastore speaks it) to call ``get_table`` and keep the table's parameters,
to list databases and tables (``get_all_databases``, ``get_all_tables``), and to commit a new
``metadata_location`` the way Iceberg's ``HiveTableOperations`` does without a lock
(:meth:`MetastoreConnection.swap_parameters`: ``alter_table_with_environment_context`` with the
HIVE-26882 ``expected_parameter_key`` compare-and-swap)::

    from pyiceberg_crypto.catalog.hive import MetastoreConnection, CatalogError, table_parameters

    params = table_parameters("thrift://hms-1:9083,thrift://hms-2:9083", "db", "orders", timeout=10)
    params["metadata_location"], params.get("metadata_hash")
    with MetastoreConnection("thrift://hms-1:9083", timeout=10) as connection:   # several calls, one connection
        connection.databases(), connection.tables("db"), connection.parameters("db", "orders")
        connection.swap_parameters("db", "orders", "metadata_location", old_location,
                                   {"metadata_location": new_location, ...})   # ConcurrentCommitError: lost the race

Listing a catalog's tables is :func:`pyiceberg_crypto.catalog.entry.list_tables` (Hive or REST).

The server is not trusted to be sane: every exchange has a deadline, and every length it sends is
bounded (:data:`MAX_STRING_BYTES`, :data:`MAX_CONTAINER_ENTRIES`, :data:`MAX_REPLY_BYTES`,
:data:`MAX_DEPTH`). Every failure is a one-line :class:`CatalogError` naming ``host:port``.
"""

from __future__ import annotations

import socket
import struct
import time
from urllib.parse import urlsplit

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto._net import listen_address
from pyiceberg_crypto.errors import CatalogError, ConcurrentCommitError
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS


__all__ = ["ConcurrentCommitError", "DEFAULT_PORT", "MetastoreConnection", "table_parameters"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"MetastoreError": CatalogError})

#: The HIVE-26882 environment-context keys (Hive 2.3.10+, 4.0+): the metastore alters the table only
#: if its parameter ``expected_parameter_key`` still has the value ``expected_parameter_value``.
EXPECTED_PARAMETER_KEY, EXPECTED_PARAMETER_VALUE = "expected_parameter_key", "expected_parameter_value"
#: What the metastore says when the swap loses (HiveAlterHandler); Iceberg matches the same prefix.
_MODIFIED = "The table has been modified. The parameter value for key '{}'"

DEFAULT_PORT = 9083
MAX_STRING_BYTES = 16 * 1024 * 1024
MAX_CONTAINER_ENTRIES = 1_000_000
MAX_REPLY_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64

_VERSION_1, _VERSION_MASK = 0x80010000, 0xFFFF0000
CALL, REPLY, EXCEPTION = 1, 2, 3
STOP, BOOL, BYTE, DOUBLE, I16, I32, I64, STRING, STRUCT, MAP, SET, LIST = 0, 2, 3, 4, 6, 8, 10, 11, 12, 13, 14, 15
_FIXED_WIDTH = {BOOL: 1, BYTE: 1, DOUBLE: 8, I16: 2, I32: 4, I64: 8}


class _ProtocolError(Exception):  # an internal signal: becomes a CatalogError naming the server
    """The reply is not valid Thrift (turned into a CatalogError naming the server)."""


class _ClosedError(Exception):  # an internal signal: becomes a CatalogError
    """The server closed the connection before the reply was complete."""


class _ServerError(Exception):  # an internal signal: becomes a CatalogError naming the table
    """The metastore answered with an exception (TApplicationException or a declared one)."""

    def __init__(self, kind: str, text: str):
        super().__init__(kind, text)
        self.kind, self.text = kind, _one_line(text)

    def message(self, database: str, table: str, where: str) -> str:
        if self.kind == "NoSuchObjectException":
            return f"table {database}.{table} does not exist in the Hive metastore at {where}: {self.text}"
        return f"the Hive metastore at {where} failed to give table {database}.{table}: {self.kind}: {self.text}"


def table_parameters(uri: str, database: str, table: str, *, timeout: float = CATALOG_TIMEOUT_SECONDS) -> dict[str, str]:
    """The Hive metastore's table parameters of ``database.table`` (an Iceberg table: ``table_type``
    ICEBERG and a ``metadata_location``), else CatalogError.

    ``uri`` is ``thrift://host:port``, or several of them comma-separated, tried in order (the next
    one only when a metastore cannot be reached). ``timeout`` bounds, per metastore, connecting and
    the whole exchange."""
    with MetastoreConnection(uri, timeout=timeout, purpose=f"read table {database}.{table}") as connection:
        params = connection.parameters(database, table)
        if params.get("table_type", "").upper() != "ICEBERG" or "metadata_location" not in params:
            raise CatalogError(f"{database}.{table} is not an Iceberg table in the Hive metastore at "
                               f"{connection.where}")
        return params


class MetastoreConnection:
    """One connection to a Hive metastore (the first of ``uri``'s that can be reached), for
    several calls; a context manager. Each call has ``timeout`` seconds."""

    def __init__(self, uri: str, *, timeout: float = CATALOG_TIMEOUT_SECONDS, purpose: str = "ask it"):
        self.timeout = timeout
        failures = []
        for host, port in _addresses(uri):
            where = listen_address(host, port)
            try:
                self._sock = socket.create_connection((host, port), timeout=timeout)
            except OSError as exc:
                failures.append(f"{where} ({_os_reason(exc)})")
                continue
            self.where = where
            self._seqid = 0
            return
        raise CatalogError(f"cannot reach the Hive metastore to {purpose}: {'; '.join(failures)}")

    def __enter__(self) -> MetastoreConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def databases(self) -> list[str]:
        """``get_all_databases``."""
        return self._call("get_all_databases", b"", _string_list, "the list of databases")

    def tables(self, database: str) -> list[str]:
        """``get_all_tables(database)``."""
        return self._call("get_all_tables", struct.pack(">bh", STRING, 1) + _string(database), _string_list,
                          f"the tables of database {database}")

    def parameters(self, database: str, table: str, *, missing_ok: bool = False) -> dict[str, str] | None:
        """``get_table(database, table)``: its parameters (any table type); None for an unknown
        table with ``missing_ok``, else CatalogError."""
        args = struct.pack(">bh", STRING, 1) + _string(database) + struct.pack(">bh", STRING, 2) + _string(table)
        try:
            return self._call("get_table", args, _table_parameters, f"table {database}.{table}")
        except _ServerError as exc:
            if missing_ok and exc.kind == "NoSuchObjectException":
                return None
            raise CatalogError(exc.message(database, table, self.where)) from None

    def swap_parameters(self, database: str, table: str, key: str, expected: str,
                        updates: dict[str, str]) -> None:
        """Set ``updates`` in the table's parameters if its parameter ``key`` is still ``expected``:
        ``get_table`` (the whole Table struct, kept byte for byte but its parameters), then
        ``alter_table_with_environment_context`` with ``DO_NOT_UPDATE_STATS`` and the HIVE-26882
        compare-and-swap (``expected_parameter_key`` / ``expected_parameter_value``), as Iceberg's
        ``HiveTableOperations`` commits with the lock off. A metastore without HIVE-26882 (older
        than Hive 2.3.10) ignores the expectation. Raises ConcurrentCommitError when the value
        changed (seen here or refused by the metastore), CatalogError otherwise (the alter may
        or may not have happened when the connection failed: read the parameter again)."""
        args = struct.pack(">bh", STRING, 1) + _string(database) + struct.pack(">bh", STRING, 2) + _string(table)
        try:
            fields = self._call("get_table", args, _table_struct, f"table {database}.{table}")
        except _ServerError as exc:
            raise CatalogError(exc.message(database, table, self.where)) from None
        params = dict(next((value for ftype, fid, value in fields if fid == 9), {}))
        if params.get(key) != expected:
            raise ConcurrentCommitError(f"{database}.{table} was committed to meanwhile: its {key} is now "
                                        f"{params.get(key)!r}, not {expected!r}")
        params.update(updates)
        body = b"".join(_table_field(ftype, fid, params if fid == 9 else value) for ftype, fid, value in fields)
        if not any(fid == 9 for _, fid, _ in fields):
            body += _table_field(MAP, 9, params)
        context = {"DO_NOT_UPDATE_STATS": "true", EXPECTED_PARAMETER_KEY: key, EXPECTED_PARAMETER_VALUE: expected}
        args = (struct.pack(">bh", STRING, 1) + _string(database) + struct.pack(">bh", STRING, 2) + _string(table)
                + struct.pack(">bh", STRUCT, 3) + body + bytes([STOP])
                + struct.pack(">bh", STRUCT, 4) + _string_map_field(1, context) + bytes([STOP]))
        try:
            self._call("alter_table_with_environment_context", args, None, f"the commit of {database}.{table}",
                       exceptions=("InvalidOperationException", "MetaException"))
        except _ServerError as exc:
            if _MODIFIED.format(key) in exc.text:
                raise ConcurrentCommitError(f"{database}.{table} was committed to meanwhile (the metastore's "
                                            f"compare-and-swap of {key} refused ours)") from None
            raise CatalogError(f"the Hive metastore at {self.where} refused the commit of {database}.{table}: "
                               f"{exc.kind}: {exc.text}") from None

    def _call(self, method: str, args: bytes, read_result, what: str,
              exceptions: tuple[str, str] = ("MetaException", "NoSuchObjectException")):
        self._seqid += 1
        deadline = time.monotonic() + self.timeout
        where = self.where
        asking = f"{what} from the Hive metastore at {where}"
        try:
            self._sock.settimeout(max(deadline - time.monotonic(), 0.001))
            header = struct.pack(">I", _VERSION_1 | CALL) + _string(method) + struct.pack(">i", self._seqid)
            self._sock.sendall(header + args + bytes([STOP]))
            return _read_reply(_Reader(self._sock, deadline), method, self._seqid, read_result, exceptions)
        except _ProtocolError as exc:
            raise CatalogError(f"invalid reply asking {asking}: {exc}") from None
        except _ClosedError:
            raise CatalogError(f"the Hive metastore at {where} closed the connection before answering "
                               f"for {what}") from None
        except (socket.timeout, TimeoutError):
            raise CatalogError(f"timed out after {self.timeout:g} s asking {asking}") from None
        except OSError as exc:
            raise CatalogError(f"connection failed asking {asking}: {_os_reason(exc)}") from None
        except _ServerError as exc:
            if method in ("get_table", "alter_table_with_environment_context"):
                raise  # the caller names the table
            raise CatalogError(f"the Hive metastore at {where} failed to give {what}: {exc.kind}: {exc.text}") from None


def _addresses(uri: str) -> list[tuple[str, int]]:
    addresses = []
    for part in (p.strip() for p in uri.split(",")):
        if not part:
            continue
        try:
            parts = urlsplit(part)
            host, port = parts.hostname, parts.port or DEFAULT_PORT
        except ValueError as exc:
            raise CatalogError(f"invalid Hive metastore URI {part!r}: {exc}") from None
        if parts.scheme != "thrift" or not host:
            address = part.split("://", 1)[-1] or "host:port"
            raise CatalogError(f"invalid Hive metastore URI {part!r}: expected thrift://host:port. Write "
                               f"thrift://{address} for a Hive metastore, or http://{address} for a REST catalog "
                               "(--rest-uri http://... in audit and the key commands; head's --metastore takes either)")
        addresses.append((host, port))
    if not addresses:
        raise CatalogError(f"no Hive metastore URI in {uri!r}")
    return addresses


# --- writing the call ------------------------------------------------------------------------

def _string(value: str) -> bytes:
    data = value.encode("utf-8", "surrogateescape")  # a name read with surrogateescape goes back as it came
    return struct.pack(">i", len(data)) + data


# --- reading the reply -----------------------------------------------------------------------

class _Reader:
    """Bytes from the socket, within the deadline and the reply's byte budget."""

    def __init__(self, sock: socket.socket, deadline: float):
        self._sock, self._deadline = sock, deadline
        self._buf, self._pos, self._total = bytearray(), 0, 0

    def read(self, n: int) -> bytes:
        self._total += n
        if self._total > MAX_REPLY_BYTES:
            raise _ProtocolError(f"the reply is longer than the limit of {MAX_REPLY_BYTES} bytes")
        while len(self._buf) - self._pos < n:
            self._fill()
        data = bytes(self._buf[self._pos:self._pos + n])
        self._pos += n
        return data

    def _fill(self) -> None:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise socket.timeout("timed out")
        self._sock.settimeout(remaining)
        chunk = self._sock.recv(65536)
        if not chunk:
            raise _ClosedError()
        del self._buf[:self._pos]
        self._pos = 0
        self._buf += chunk

    def unpack(self, fmt: str) -> int | float:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        data = self.binary()
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _ProtocolError("a string is not valid UTF-8") from None

    def name(self) -> str:
        """A database or table name: bytes that are not UTF-8 become lone surrogates
        (``surrogateescape``), so the name can be shown escaped and asked for again as it was."""
        return self.binary().decode("utf-8", "surrogateescape")

    def binary(self) -> bytes:
        return self.read(_length(self.unpack(">i"), MAX_STRING_BYTES, "string of {} bytes", "bytes"))

    def field(self) -> tuple[int, int]:
        """(type, id) of the next struct field; type STOP ends the struct."""
        ftype = self.unpack(">b")
        return (STOP, 0) if ftype == STOP else (ftype, self.unpack(">h"))


def _length(n: int, limit: int, shown: str, unit: str) -> int:
    if n < 0:
        raise _ProtocolError(f"negative length {n}")
    if n > limit:
        raise _ProtocolError(f"{shown.format(n)} is more than the limit of {limit} {unit}")
    return n


def _entries(n: int) -> int:
    return _length(n, MAX_CONTAINER_ENTRIES, "container of {} entries", "entries")


def _skip(r: _Reader, ttype: int, depth: int = 0) -> None:
    """Read past one value of any Thrift binary type."""
    if depth > MAX_DEPTH:
        raise _ProtocolError(f"values nested deeper than the limit of {MAX_DEPTH}")
    if ttype in _FIXED_WIDTH:
        r.read(_FIXED_WIDTH[ttype])
    elif ttype == STRING:
        r.binary()
    elif ttype == STRUCT:
        while (field := r.field())[0] != STOP:
            _skip(r, field[0], depth + 1)
    elif ttype == MAP:
        ktype, vtype, n = r.unpack(">b"), r.unpack(">b"), _entries(r.unpack(">i"))
        for _ in range(n):
            _skip(r, ktype, depth + 1)
            _skip(r, vtype, depth + 1)
    elif ttype in (SET, LIST):
        etype, n = r.unpack(">b"), _entries(r.unpack(">i"))
        if etype in _FIXED_WIDTH:
            r.read(n * _FIXED_WIDTH[etype])
        else:
            for _ in range(n):
                _skip(r, etype, depth + 1)
    else:
        raise _ProtocolError(f"unknown Thrift type {ttype}")


def _read_reply(r: _Reader, method: str, seqid: int, read_result,
                exceptions: tuple[str, str] = ("MetaException", "NoSuchObjectException")):
    """The reply to ``method`` #``seqid``: ``read_result(r, field_type)`` of its success field (0;
    ``read_result`` None: a void method, None returned); declared exceptions (fields 1, 2, named
    by ``exceptions``) and TApplicationException raise _ServerError."""
    version = r.unpack(">I")
    if version & _VERSION_MASK != _VERSION_1:
        raise _ProtocolError(f"not a Thrift binary message (header 0x{version:08x})")
    kind, name, got = version & 0xFF, r.string(), r.unpack(">i")
    if name != method or got != seqid:
        raise _ProtocolError(f"answer to {_one_line(name)!r} #{got}, not to {method!r} #{seqid}")
    if kind == EXCEPTION:
        raise _ServerError("TApplicationException", _struct_message(r))
    if kind != REPLY:
        raise _ProtocolError(f"message type {kind}, not a reply")
    result, found = None, False
    while (field := r.field())[0] != STOP:
        if field[1] == 0:
            result, found = read_result(r, field[0]), True
        elif field in ((STRUCT, 1), (STRUCT, 2)):
            raise _ServerError(exceptions[field[1] - 1], _struct_message(r))
        else:
            _skip(r, field[0])
    if not found and read_result is not None:
        raise _ProtocolError(f"{method} returned neither {'a table' if method == 'get_table' else 'a result'} nor an exception")
    return result


def _string_list(r: _Reader, ftype: int) -> list[str]:
    """A ``list<string>`` result (get_all_databases, get_all_tables)."""
    if ftype != LIST:
        raise _ProtocolError(f"the result has Thrift type {ftype}, not a list")
    etype, n = r.unpack(">b"), _entries(r.unpack(">i"))
    if n and etype != STRING:
        raise _ProtocolError("the result is not a list<string>")
    return [r.name() for _ in range(n)]


def _struct_message(r: _Reader) -> str:
    """Field 1 (string ``message``) of an exception struct."""
    message = ""
    while (field := r.field())[0] != STOP:
        if field == (STRING, 1):
            message = r.string()
        else:
            _skip(r, field[0], 1)
    return message or "(no message)"


def _table_parameters(r: _Reader, ftype: int = STRUCT) -> dict[str, str]:
    """Field 9 (``parameters``, map<string,string>) of a Table struct."""
    if ftype != STRUCT:
        raise _ProtocolError(f"get_table returned Thrift type {ftype}, not a Table struct")
    params: dict[str, str] = {}
    while (field := r.field())[0] != STOP:
        if field[1] != 9:
            _skip(r, field[0], 1)
            continue
        if field[0] != MAP:
            raise _ProtocolError(f"Table.parameters has Thrift type {field[0]}, not a map")
        ktype, vtype, n = r.unpack(">b"), r.unpack(">b"), _entries(r.unpack(">i"))
        if n and (ktype, vtype) != (STRING, STRING):
            raise _ProtocolError("Table.parameters is not a map<string,string>")
        for _ in range(n):
            key = r.string()
            params[key] = r.string()
    return params


class _Recorder(_Reader):
    """Reads through another reader, keeping every byte read (a value passed on as it came)."""

    def __init__(self, reader: _Reader):  # noqa: D107 - no _Reader state of its own
        self._reader, self.data = reader, bytearray()

    def read(self, n: int) -> bytes:
        data = self._reader.read(n)
        self.data += data
        return data


def _table_struct(r: _Reader, ftype: int = STRUCT) -> list[tuple[int, int, bytes | dict[str, str]]]:
    """A Table struct as (type, id, value) fields in the order read: ``parameters`` (field 9)
    decoded, every other field its encoded bytes, to be written back unchanged."""
    if ftype != STRUCT:
        raise _ProtocolError(f"get_table returned Thrift type {ftype}, not a Table struct")
    fields: list[tuple[int, int, bytes | dict[str, str]]] = []
    while (field := r.field())[0] != STOP:
        if field == (MAP, 9):
            ktype, vtype, n = r.unpack(">b"), r.unpack(">b"), _entries(r.unpack(">i"))
            if n and (ktype, vtype) != (STRING, STRING):
                raise _ProtocolError("Table.parameters is not a map<string,string>")
            fields.append((MAP, 9, {r.name(): r.name() for _ in range(n)}))
            continue
        recorder = _Recorder(r)
        _skip(recorder, field[0], 1)
        fields.append((field[0], field[1], bytes(recorder.data)))
    return fields


def _table_field(ftype: int, fid: int, value: bytes | dict[str, str]) -> bytes:
    if isinstance(value, dict):
        return _string_map_field(fid, value)
    return struct.pack(">bh", ftype, fid) + value


def _string_map_field(fid: int, values: dict[str, str]) -> bytes:
    """Field ``fid``, a ``map<string,string>``."""
    return (struct.pack(">bhbbi", MAP, fid, STRING, STRING, len(values))
            + b"".join(_string(k) + _string(v) for k, v in values.items()))


def _one_line(text: str, limit: int = 500) -> str:
    text = "".join(c if c.isprintable() else " " for c in " ".join(text.split()))
    return text if len(text) <= limit else text[:limit] + "..."


def _os_reason(exc: OSError) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    return exc.strerror or str(exc) or type(exc).__name__
