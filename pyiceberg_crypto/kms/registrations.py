"""The Python KMSs this process registered for Spark's JVMs, by name (no Py4J here).

:func:`pyiceberg_crypto.bridge.register_kms` adds a registration under the name a catalog refers
to (catalog property ``pyiceberg-crypto.kms-name``); the table layer looks it up to unwrap keys in
Python (``verify_table``, ``read_table``) without loading the bridge and Py4J::

    from pyiceberg_crypto.kms.registrations import registered

    registration = registered("default")       # None when nothing is registered under that name
    if registration is not None and registration.active:
        kms = registration.kms
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["registered"]

#: Guards :data:`by_name`: the bridge adds and removes registrations under it.
lock = threading.RLock()
#: name -> the live registration (a :class:`pyiceberg_crypto.bridge.KmsRegistration`).
by_name: dict[str, Any] = {}


def registered(name: str) -> Any | None:
    """The active registration under ``name`` in this Python process, if any."""
    return by_name.get(name)
