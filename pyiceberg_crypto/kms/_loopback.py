"""Is a URL a loopback test endpoint? The cloud providers allow test-only credentials there alone.

    is_loopback_url("http://127.0.0.1:8443")          # True
    is_loopback_url("https://cloudkms.googleapis.com") # False
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse


def is_loopback_url(url: str | None) -> bool:
    """True for a URL (or ``host:port``) whose host is a loopback address or ``localhost``."""
    if not url:
        return False
    parsed = urlparse(url if "://" in url else f"https://{url}")
    try:
        host = parsed.hostname or ""
    except ValueError:
        return False
    return is_loopback_host(host)


def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; a wildcard (0.0.0.0, ::) or other name is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
