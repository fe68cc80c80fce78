"""InMemoryKms: wire compatibility with Iceberg's MemoryMockKMS format, checked against Java."""

from __future__ import annotations

import os

import pytest

from pyiceberg_crypto.kms import InMemoryKms, KmsError, UnknownKeyError


@pytest.mark.parametrize("master_length", [16, 24, 32])
def test_python_wrap_java_unwrap_and_back(jvm, master_length):
    master = os.urandom(master_length)
    kms = InMemoryKms({"m": master})
    for key in (os.urandom(16), os.urandom(32), bytes(range(256))):
        wrapped = kms.wrap_key(key, "m")
        assert len(wrapped) == 12 + len(key) + 16  # nonce + ciphertext + tag, like MemoryMockKMS
        assert bytes(jvm.io.pyicebergcrypto.testkit.JavaMemoryKms.unwrap(master, wrapped)) == key
        java_wrapped = bytes(jvm.io.pyicebergcrypto.testkit.JavaMemoryKms.wrap(master, key))
        assert kms.unwrap_key(java_wrapped, "m") == key


def test_wrapping_is_randomized_and_authenticated():
    kms = InMemoryKms.with_random_keys("m")
    key = os.urandom(16)
    first, second = kms.wrap_key(key, "m"), kms.wrap_key(key, "m")
    assert first != second  # fresh nonce each time
    tampered = bytearray(first)
    tampered[20] ^= 1
    with pytest.raises(KmsError, match="does not authenticate under master key 'm'"):
        kms.unwrap_key(bytes(tampered), "m")
    with pytest.raises(KmsError, match="too short"):
        kms.unwrap_key(first[:20], "m")


def test_wrong_master_key_and_unknown_id():
    a, b = InMemoryKms.with_random_keys("m"), InMemoryKms.with_random_keys("m")
    with pytest.raises(KmsError, match="does not authenticate"):
        b.unwrap_key(a.wrap_key(b"k" * 16, "m"), "m")
    with pytest.raises(UnknownKeyError, match="'other' is not in this KMS"):
        a.wrap_key(b"k" * 16, "other")


def test_bad_master_keys_rejected_and_repr_hides_keys():
    with pytest.raises(ValueError, match="16, 24 or 32 bytes, got 15"):
        InMemoryKms({"m": b"x" * 15})
    kms = InMemoryKms({"m": b"S" * 16})
    assert "SSSS" not in repr(kms) and "'m'" in repr(kms)
