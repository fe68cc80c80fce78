"""Deprecated alias of :mod:`pyiceberg_crypto.listener.tls`, kept for one release (CHANGELOG.md).

The TLS identity and server context are shared by every KMS listener (the bridge's, ``kms
serve``'s), so they live in the base layer now; each name here is the same object, with a
``DeprecationWarning``::

    from pyiceberg_crypto.listener.tls import TLS_HANDSHAKE_TIMEOUT_SECONDS, TlsIdentity, server_context
"""

from pyiceberg_crypto._deprecated import moved_names
from pyiceberg_crypto.errors import InvalidArgumentError

#: Nothing is exported from here any more: the old names answer through ``__getattr__``.
__all__: list[str] = []

#: The moved names, and an older one: unusable TLS files are an InvalidArgumentError.
__getattr__ = moved_names(__name__, "pyiceberg_crypto.listener.tls",
                          ["TLS_HANDSHAKE_TIMEOUT_SECONDS", "TlsIdentity", "server_context"],
                          {"TlsFilesError": InvalidArgumentError})
