"""Where and how every KMS listener of the package listens: the bridge's callback server and both
faces of ``kms serve`` (Py4J, AWS KMS API)::

    from pyiceberg_crypto.listener.sockets import LISTEN_BACKLOG, LOOPBACK

    server = socket.create_server((LOOPBACK, 0))   # loopback unless the operator says otherwise
    server.listen(LISTEN_BACKLOG)                  # a burst waits in the queue, is not refused

Reading a ``HOST:PORT`` and telling a loopback host from others is :mod:`pyiceberg_crypto._net`'s
(clients need it too); each listener's caps stay with its protocol
(:class:`~pyiceberg_crypto.bridge.py4j_server.ConnectionLimits`, the AWS face's ``FaceLimits``).
"""

from __future__ import annotations

__all__ = ["LISTEN_BACKLOG", "LOOPBACK"]

#: The address a listener binds when none is given: the channel never leaves the host, so the
#: Py4J listeners speak plain TCP there and TLS on any other address.
LOOPBACK = "127.0.0.1"

#: The accept queue of every listener: a burst of connections waits there instead of being
#: refused by the kernel (Py4J's own server listens with a backlog of 5).
LISTEN_BACKLOG = 1024
