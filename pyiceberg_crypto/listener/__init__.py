"""The server plumbing every KMS listener shares: the in-process bridge's callback server
(:mod:`pyiceberg_crypto.bridge`) and both faces of ``kms serve`` (:mod:`pyiceberg_crypto.serve`)::

    from pyiceberg_crypto.listener import LISTEN_BACKLOG, LOOPBACK, TlsIdentity, read_operator_file

    token = read_operator_file(token_file, "token", private=True)   # the operator's file, or refused
    identity = TlsIdentity.load_or_create(key_file, certificate_file)  # what clients pin

- :mod:`.files`: token, key and credential files only their owner can write (``check_operator_directory``,
  ``read_operator_file``, ``write_private_file``);
- :mod:`.tls`: the self-signed identity JVMs pin (``TlsIdentity``), every listener's TLS server
  context (``server_context``) and handshake deadline;
- :mod:`.sockets`: the default address (loopback) and the accept queue (``LISTEN_BACKLOG``).

The protocols themselves stay with their servers: Py4J's in the bridge, HTTP and SigV4 in
``serve.aws``. Base layer: it imports nothing of the package but ``errors`` and ``_atomic``.
"""

from pyiceberg_crypto.listener.files import check_operator_directory, read_operator_file, write_private_file
from pyiceberg_crypto.listener.sockets import LISTEN_BACKLOG, LOOPBACK
from pyiceberg_crypto.listener.tls import TLS_HANDSHAKE_TIMEOUT_SECONDS, TlsIdentity, server_context

__all__ = ["LISTEN_BACKLOG", "LOOPBACK", "TLS_HANDSHAKE_TIMEOUT_SECONDS", "TlsIdentity", "check_operator_directory",
           "read_operator_file", "server_context", "write_private_file"]
