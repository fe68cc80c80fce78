"""How far a walk trusts a table and how it reaches the table's files, in one object that the
verifier, the reader and the key inventory all take::

    from pyiceberg_crypto.table import Limits

    limits = Limits(max_metadata_bytes=8 << 20, kms_timeout=5, allowed_locations=("s3://archive/orders",))
    verify_metadata(location, kms, limits=limits)
    read_table(location, kms, limits=limits)

The same settings are still accepted as separate keywords (``max_metadata_bytes=...``) by every
entry point that took them before; giving both ``limits`` and such a keyword is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES, FileIO, file_io_for
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS


@dataclass(frozen=True)
class Limits:
    """Args:
        allowed_locations: locations the table really spans besides its own ``location``,
            ``write.data.path`` and ``write.metadata.path``; any other file it names is never opened
            (:mod:`pyiceberg_crypto.io.confinement`).
        max_metadata_bytes: a larger metadata.json is refused before it is read (default 64 MiB).
        kms_timeout: seconds to wait for one KMS call (None: no limit); a call that does not return
            in time is a KEY_ERROR and the KMS is not asked again.
        file_io: how files are read (default: chosen from the location's scheme and ``properties``).
        properties: FileIO settings (``s3.endpoint``, ...) when ``file_io`` is not given.
    """

    allowed_locations: tuple[str, ...] = ()
    max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES
    kms_timeout: float | None = DEFAULT_KMS_TIMEOUT_SECONDS
    file_io: FileIO | None = None
    properties: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_locations", tuple(self.allowed_locations))

    def file_io_for(self, location: str) -> FileIO:
        """``file_io``, or the FileIO for ``location``'s scheme built from ``properties``."""
        return self.file_io or file_io_for(location, dict(self.properties) if self.properties else None)

    @classmethod
    def of(cls, limits: Limits | None, **keywords: Any) -> Limits:
        """``limits`` (default: ``Limits()``) with the old separate keywords applied: each keyword
        left at its default is ignored; one that is set conflicts with an explicit ``limits``."""
        unknown = set(keywords) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"not a limit: {', '.join(sorted(unknown))}")
        defaults = cls()
        given = {name: value for name, value in keywords.items()
                 if _changed(value, getattr(defaults, name))}
        if limits is not None and given:
            raise TableInputError(f"pass limits=Limits(...) or the keyword(s) {', '.join(sorted(given))}, not both")
        return replace(limits if limits is not None else defaults, **given)


def _changed(value: Any, default: Any) -> bool:
    if isinstance(default, tuple):
        return tuple(value or ()) != default
    return value is not default and value != default
