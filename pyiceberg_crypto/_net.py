"""Is a host a loopback address? The one check behind every "loopback unless told otherwise" rule;
and the one reading of a ``HOST:PORT`` listen address::

    is_loopback_host("127.0.0.1")   # True
    is_loopback_host("[::1]")       # True
    is_loopback_host("0.0.0.0")     # False: a wildcard listens on every interface
"""

from __future__ import annotations

import ipaddress

from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["is_loopback_host", "listen_address", "parse_listen"]


def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ``::1`` (bracketed or not) and ``localhost``; a wildcard or other name is not."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(listen: str, what: str = "--listen") -> tuple[str, int]:
    """``"HOST:PORT"`` (``[::1]:9600`` for IPv6) -> (host, port); port 0 picks a free port.
    InvalidArgumentError naming ``what`` for anything else::

        parse_listen("127.0.0.1:9600")   # ("127.0.0.1", 9600)
        parse_listen("[::1]:0")          # ("::1", 0)
    """
    host, sep, port = listen.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
        raise InvalidArgumentError(f"{what} must be HOST:PORT (e.g. 127.0.0.1:9600), got {listen!r}")
    return host, int(port)


def listen_address(host: str, port: int) -> str:
    """``HOST:PORT`` as clients write it, an IPv6 host in brackets: what :func:`parse_listen` reads::

        listen_address("::1", 9600)        # "[::1]:9600"
    """
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
