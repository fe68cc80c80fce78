"""KMS factories for ``kms serve --kms tests.serve.factories:...`` in the tests."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

from pyiceberg_crypto.kms.base import KeyManagementClient
from pyiceberg_crypto.kms.keystore import KeystoreKms
from pyiceberg_crypto.kms.memory import InMemoryKms


class SlowKms(KeyManagementClient):
    """Answers nothing for ``seconds``: a hung KMS (its sleeps are the behaviour under test)."""

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


class EndpointKms(KeystoreKms):
    """A keystore KMS that, once ``initialize()`` names ``gcp.endpoint``, sends each key to wrap
    there (as a cloud KMS client would, with its credentials): what a client that may reconfigure
    the served KMS would redirect."""

    def __init__(self, path):
        super().__init__(path)
        self.endpoint = None

    def initialize(self, properties) -> None:
        if properties.get("gcp.endpoint"):
            self.endpoint = properties["gcp.endpoint"]

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        if self.endpoint:
            import urllib.request

            request = urllib.request.Request(self.endpoint, data=bytes(key),
                                             headers={"Authorization": "Bearer service-account-token"})
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.read()
        return super().wrap_key(key, wrapping_key_id)


def endpoint_kms(properties: Mapping[str, str]) -> EndpointKms:
    return EndpointKms(Path(properties["keystore.path"]))


def memory_kms(properties: Mapping[str, str]) -> InMemoryKms:
    """An :class:`InMemoryKms` over the master keys in the JSON file ``keys.path`` (``{key_id: hex}``,
    mode 0600): the keys of a test session's own registered KMS, so that a served KMS and
    ``register_kms`` wrap and unwrap the same tables' keys."""
    keys = json.loads(Path(properties["keys.path"]).read_text())
    return InMemoryKms({key_id: bytes.fromhex(key) for key_id, key in keys.items()})
