"""Manifest lists and manifests as the table model sees them: entry statuses, what kind of file an
entry names, and the record shape every walk relies on.

Reading them is a verification (each AGS1 block authenticated with the file's own key:
:func:`pyiceberg_crypto.verify.plan.read_avro`); this module only says what the authenticated
records mean::

    records = checked_records(MANIFEST, list(fastavro.reader(plaintext)))   # TableInputError: wrong shape
    [entry_kind(r["data_file"]) for r in records if r["status"] != ENTRY_DELETED]
"""

from __future__ import annotations

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.table.file_kinds import DATA, DELETION_VECTOR, EQUALITY_DELETE, MANIFEST_LIST, POSITION_DELETE

__all__ = ["ENTRY_ADDED", "ENTRY_DELETED", "checked_records", "entry_kind"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"MalformedManifestError": TableInputError})

ENTRY_ADDED = 1  # manifest entry status (Iceberg spec): the file entered the table in that manifest's snapshot
ENTRY_DELETED = 2  # the file left the table in that snapshot


def entry_kind(data_file: dict) -> str:
    """File kind of a manifest entry's file (content 0 data, 1 position deletes, 2 equality deletes;
    position deletes in Puffin are deletion vectors)."""
    content = data_file.get("content", 0)
    if content == 0:
        return DATA
    if content == 2:
        return EQUALITY_DELETE
    return DELETION_VECTOR if str(data_file.get("file_format", "")).upper() == "PUFFIN" else POSITION_DELETE


#: The fields the walk reads, and the Python types fastavro gives them in a file Iceberg wrote
#: (None: the field may be absent or null; a bool is not an int here). A file with another shape
#: is authentic but unusable.
_LIST_FIELDS = {"manifest_path": (str,), "manifest_length": (int,), "key_metadata": (bytes, None),
                "sequence_number": (int, None), "content": (int, None)}
_ENTRY_FIELDS = {"status": (int,), "file_sequence_number": (int, None), "data_file": (dict,)}
_DATA_FILE_FIELDS = {"file_path": (str,), "file_format": (str,), "key_metadata": (bytes, None),
                     "file_size_in_bytes": (int,), "record_count": (int,), "content": (int, None)}


def _shape_error(record, fields: dict[str, tuple], what: str) -> str | None:
    if not isinstance(record, dict):
        return f"a {what} is {type(record).__name__}, not a record"
    for name, kinds in fields.items():
        value = record.get(name)
        if value is None:
            if None in kinds:
                continue
            return f"{what} field {name!r} is missing or null"
        if isinstance(value, bool) or not isinstance(value, tuple(k for k in kinds if k is not None)):
            return f"{what} field {name!r} is {type(value).__name__}"
    return None


def checked_records(kind: str, records: list) -> list[dict]:
    """``records`` if each has the shape the walk relies on, else :class:`TableInputError`
    (a ``ValueError``) naming the field."""
    for record in records:
        if kind == MANIFEST_LIST:
            error = _shape_error(record, _LIST_FIELDS, "manifest list entry")
        else:
            error = (_shape_error(record, _ENTRY_FIELDS, "manifest entry")
                     or _shape_error(record["data_file"], _DATA_FILE_FIELDS, "data_file"))
        if error:
            raise TableInputError(error)
    return records
