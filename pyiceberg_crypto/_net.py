"""Is a host a loopback address? The one check behind every "loopback unless told otherwise" rule::

    is_loopback_host("127.0.0.1")   # True
    is_loopback_host("[::1]")       # True
    is_loopback_host("0.0.0.0")     # False: a wildcard listens on every interface
"""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ``::1`` (bracketed or not) and ``localhost``; a wildcard or other name is not."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
