"""A KMS factory the CLI can load by spec (``tests.read.kms_factory:from_environment``): the
session's master keys, passed as hex JSON in ``PYICEBERG_CRYPTO_TEST_MASTER_KEYS`` (tests only)."""

from __future__ import annotations

import json
import os

from pyiceberg_crypto.kms import InMemoryKms

VARIABLE = "PYICEBERG_CRYPTO_TEST_MASTER_KEYS"


def from_environment() -> InMemoryKms:
    keys = json.loads(os.environ[VARIABLE])
    return InMemoryKms({key_id: bytes.fromhex(key) for key_id, key in keys.items()})
