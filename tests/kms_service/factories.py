"""KMS factories for ``kms serve --kms tests.kms_service.factories:...`` in the tests."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.keystore import KeystoreKms


class SlowKms(KeyManagementClient):
    """Answers nothing for ``seconds``: a hung KMS."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        time.sleep(self.seconds)
        return b"late"

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        time.sleep(self.seconds)
        return b"late"


def slow_kms(properties: Mapping[str, str]) -> SlowKms:
    return SlowKms(float(properties.get("slow.seconds", "5")))


def selected_keystore_kms(properties: Mapping[str, str]) -> KeystoreKms:
    """The keystore whose path the file ``selector`` holds when the factory runs (start, SIGHUP)."""
    path = Path(Path(properties["selector"]).read_text().strip())
    if not path.exists():
        raise FileNotFoundError(f"keystore {path} does not exist")
    return KeystoreKms(path)
