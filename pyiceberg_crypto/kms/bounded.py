"""KMS calls with a deadline: a KMS that never answers must not hang the verifier.

    key = call_with_timeout(kms.unwrap_key, wrapped, "k1", timeout=60.0, what="the KMS call unwrap_key")

The call runs in a daemon thread and the caller stops waiting after ``timeout`` seconds
(:class:`KmsTimeoutError`). The abandoned thread cannot be killed; being a daemon thread, it
never keeps the process alive at exit. Exceptions of the call are re-raised unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pyiceberg_crypto.errors import InvalidArgumentError, PyicebergCryptoError

__all__ = ["DEFAULT_KMS_TIMEOUT_SECONDS", "KmsTimeoutError", "call_with_timeout", "kms_timeout_millis"]

#: Default seconds to wait for one KMS call: the package's one KMS timeout, ``kms_timeout`` wherever
#: it is a parameter (the verifier, the reader, ``register_kms``, ``kms_service_properties``).
DEFAULT_KMS_TIMEOUT_SECONDS = 60.0

T = TypeVar("T")


class KmsTimeoutError(PyicebergCryptoError, TimeoutError):
    """A KMS call did not return in time; the message says which call and the timeout."""


def kms_timeout_millis(kms_timeout: float) -> int:
    """``kms_timeout`` (seconds) as the JVM's milliseconds: the one conversion, where a timeout
    leaves Python for the bridge (``register_kms``) or a catalog property (``...timeout-ms``).

    >>> kms_timeout_millis(0.5), kms_timeout_millis(60.0), kms_timeout_millis(0.0001)
    (500, 60000, 1)

    Raises InvalidArgumentError for a timeout that is not positive.
    """
    if not kms_timeout > 0:
        raise InvalidArgumentError(f"kms_timeout must be positive (seconds), got {kms_timeout!r}")
    return max(1, round(kms_timeout * 1000))


def call_with_timeout(function: Callable[..., T], *args: Any, timeout: float | None, what: str) -> T:
    """``function(*args)``, waiting at most ``timeout`` seconds (None: no limit, in this thread).

    ``what`` names the call in the timeout's message (``"the KMS call unwrap_key"``).

    Raises:
        KmsTimeoutError: the call had not returned after ``timeout`` seconds.
    """
    if timeout is None:
        return function(*args)
    if timeout <= 0:
        raise InvalidArgumentError(f"the KMS timeout must be positive (seconds), got {timeout!r}")
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as exc:  # handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="kms-call", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise KmsTimeoutError(f"{what} did not return within {timeout:g} s (kms timeout)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
