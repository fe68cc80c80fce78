"""The KMS factory section 10 (:mod:`bench.audit_lake`) gives ``pyiceberg-crypto audit --kms bench.audit_kms:kms``:
the run's random master keys, put here by the section."""

from pyiceberg_crypto.kms import InMemoryKms

MASTER_KEYS: dict[str, bytes] = {}


def kms() -> InMemoryKms:
    return InMemoryKms(MASTER_KEYS)
