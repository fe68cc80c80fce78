"""How far a walk trusts a table and how it reaches the table's files, in one object that the
verifier, the reader and the key inventory all take::

    from pyiceberg_crypto.table import Limits

    limits = Limits(max_metadata_bytes=8 << 20, kms_timeout=5, allowed_locations=("s3://archive/orders",))
    verify_metadata(location, kms, limits=limits)
    read_table(location, kms, limits=limits)

Every entry point takes these settings as ``limits=`` only (``verify_metadata``, ``verify_table``,
``read_table``, ``scan``, ``inventory_from_metadata``, ``VerifyEachCommit``); left out, it is ``Limits()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg_crypto.io import DEFAULT_MAX_METADATA_BYTES, FileIO, file_io_for
from pyiceberg_crypto.kms.bounded import DEFAULT_KMS_TIMEOUT_SECONDS

__all__ = ["Limits"]


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
