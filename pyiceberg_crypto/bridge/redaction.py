"""Keep the bridge's auth tokens out of Py4J's Python logs.

Registering a KMS sends its callback server's token to the JVM as an argument of one Py4J call,
and Py4J logs every command it sends at DEBUG (``Command to send: ...``). A filter on Py4J's
loggers replaces live tokens with ``<redacted>`` before any handler sees the record::

    redact_in_py4j_logs(token)      # before the call that carries it
"""

from __future__ import annotations

import logging
import threading

__all__ = ["TokenRedactingFilter", "redact_in_py4j_logs"]

#: The loggers Py4J sends commands and answers through (module loggers of py4j).
PY4J_LOGGERS = ("py4j.java_gateway", "py4j.clientserver")
REDACTED = "<redacted>"


class TokenRedactingFilter(logging.Filter):
    """Rewrites records that contain a registered secret; never drops a record."""

    def __init__(self) -> None:
        super().__init__("pyiceberg-crypto-token-redaction")
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        with self._lock:
            self._secrets.add(secret)

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self._secrets
        if not secrets:
            return True
        message = record.getMessage()
        redacted = message
        for secret in list(secrets):
            redacted = redacted.replace(secret, REDACTED)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


_filter = TokenRedactingFilter()
_installed = False


def redact_in_py4j_logs(secret: str) -> None:
    """From now on, ``secret`` never appears in a Py4J log record of this process."""
    global _installed
    _filter.add(secret)
    if not _installed:
        for name in PY4J_LOGGERS:
            logging.getLogger(name).addFilter(_filter)
        _installed = True
