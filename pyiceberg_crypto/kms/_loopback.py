"""Is a URL a loopback test endpoint? The cloud providers allow test-only credentials there alone.

    is_loopback_url("http://127.0.0.1:8443")          # True
    is_loopback_url("https://cloudkms.googleapis.com") # False
"""

from __future__ import annotations

from urllib.parse import urlparse

from pyiceberg_crypto._net import is_loopback_host

__all__ = ["is_loopback_host", "is_loopback_url"]


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
