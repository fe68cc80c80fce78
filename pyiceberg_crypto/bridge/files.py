"""Deprecated alias of :mod:`pyiceberg_crypto.listener.files`, kept for one release (CHANGELOG.md).

The operator-file checks are shared by every KMS listener (the bridge's, ``kms serve``'s), so they
live in the base layer now; each name here is the same function, with a ``DeprecationWarning``::

    from pyiceberg_crypto.listener.files import check_operator_directory, read_operator_file, write_private_file
"""

from pyiceberg_crypto._deprecated import moved_names
from pyiceberg_crypto.errors import FileAccessError

#: Nothing is exported from here any more: the old names answer through ``__getattr__``.
__all__: list[str] = []

#: The moved names, and an older one: an unsafe operator file is a FileAccessError.
__getattr__ = moved_names(__name__, "pyiceberg_crypto.listener.files",
                          ["check_operator_directory", "read_operator_file", "write_private_file"],
                          {"UnsafeFileError": FileAccessError})
