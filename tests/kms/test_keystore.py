"""KeystoreKms: rotation, the wrapped-key format, permissions, atomic writes, threads, loader."""

from __future__ import annotations

import base64
import json
import os
import stat
import struct
import threading

import pytest

from pyiceberg_crypto.errors import FileAccessError, IntegrityError, KmsError, UnknownKeyError
from pyiceberg_crypto.kms import KeystoreKms
from pyiceberg_crypto.kms.keystore import KEYSTORE_ENV, Keystore
from pyiceberg_crypto.kms.loader import load_kms


@pytest.fixture
def keystore_path(tmp_path):
    path = tmp_path / "keys.json"
    keystore = Keystore(path)
    keystore.create()
    keystore.add_key("orders", 32)
    keystore.add_key("short", 16)
    return path


def _master_keys(path) -> set[bytes]:
    document = json.loads(path.read_text())
    return {base64.b64decode(v["key"]) for versions in document["keys"].values() for v in versions}


def test_round_trip_and_wrapped_format(keystore_path):
    kms = KeystoreKms(keystore_path)
    dek = os.urandom(16)
    wrapped = kms.wrap_key(dek, "orders")
    assert wrapped[:4] == b"PKW1"
    assert struct.unpack(">I", wrapped[4:8])[0] == 1  # version 1 recorded in the blob
    assert len(wrapped) == 4 + 4 + 12 + len(dek) + 16
    assert kms.unwrap_key(wrapped, "orders") == dek
    assert kms.wrap_key(dek, "orders") != wrapped  # fresh nonce
    assert kms.unwrap_key(kms.wrap_key(dek, "short"), "short") == dek


def test_rotation_wraps_with_newest_and_unwraps_old_versions(keystore_path):
    kms = KeystoreKms(keystore_path)
    old = kms.wrap_key(b"a" * 16, "orders")
    assert kms.rotate_key("orders") == 2
    new = kms.wrap_key(b"b" * 16, "orders")
    assert struct.unpack(">I", new[4:8])[0] == 2
    assert kms.unwrap_key(old, "orders") == b"a" * 16
    assert kms.unwrap_key(new, "orders") == b"b" * 16
    assert kms.versions("orders") == [1, 2]
    assert stat.S_IMODE(os.stat(keystore_path).st_mode) == 0o600


def test_rotation_by_another_process_is_picked_up(keystore_path):
    """A long-running KMS (a Spark driver) sees a rotation made with the CLI in another process."""
    running = KeystoreKms(keystore_path)
    other = KeystoreKms(keystore_path)
    other.rotate_key("orders")
    newer = other.wrap_key(b"n" * 16, "orders")  # version 2, unknown to `running` until it re-reads
    assert running.unwrap_key(newer, "orders") == b"n" * 16
    assert struct.unpack(">I", running.wrap_key(b"x" * 16, "orders")[4:8])[0] == 2


#: What a flipped byte of a wrapped key (PKW1 magic, version, nonce, ciphertext and tag) is refused as.
NOT_PKW1 = "is not a keystore wrapped key (format PKW1"
NOT_AUTHENTIC = "does not authenticate under key id 'orders'"


@pytest.mark.parametrize(("offset", "refusal"), [
    (0, NOT_PKW1), (3, NOT_PKW1),  # the magic
    (4, "has no version 16777218"),  # the version's high byte: 2 -> 0x01000002
    (7, NOT_AUTHENTIC + " version 1"),  # the version's low byte: 2 -> 1, which exists
    (8, NOT_AUTHENTIC + " version 2"), (19, NOT_AUTHENTIC + " version 2"),  # the nonce
    (20, NOT_AUTHENTIC + " version 2"), (-1, NOT_AUTHENTIC + " version 2"),  # the ciphertext, the tag
], ids=["0", "3", "4", "7", "8", "19", "20", "-1"])
def test_tampered_wrapped_key_is_refused(keystore_path, offset, refusal):
    kms = KeystoreKms(keystore_path)
    kms.rotate_key("orders")  # so that a flipped version byte can name an existing version
    wrapped = bytearray(kms.wrap_key(os.urandom(16), "orders"))
    wrapped[offset] ^= 0x01 if offset != 7 else 0x03  # byte 7: version 2 -> 1, which exists
    with pytest.raises(KmsError) as excinfo:
        kms.unwrap_key(bytes(wrapped), "orders")
    message = str(excinfo.value)
    assert "'orders'" in message
    assert refusal in message, message


def test_blob_is_bound_to_its_key_id(keystore_path):
    kms = KeystoreKms(keystore_path)
    Keystore(keystore_path).add_key("other", 32)
    wrapped = kms.wrap_key(b"k" * 16, "orders")
    with pytest.raises(KmsError, match="does not authenticate under key id 'other' version 1"):
        kms.unwrap_key(wrapped, "other")


def test_the_wrong_keystore_never_advises_adding_a_key_to_open_existing_data(tmp_path):
    """Issue 41: a fresh random key cannot open a table; the unwrap errors say to use the keystore
    the table was written with (wrapping with an unknown key id still says `keystore add`)."""
    written, other = tmp_path / "written.json", tmp_path / "other.json"
    for path in (written, other):
        Keystore(path).create()
    Keystore(written).add_key("orders-key")
    wrapped = KeystoreKms(written).wrap_key(b"k" * 16, "orders-key")
    with pytest.raises(UnknownKeyError) as excinfo:
        KeystoreKms(other).unwrap_key(wrapped, "orders-key")
    message = str(excinfo.value)
    assert "keystore add" not in message.replace("(keystore add) is a new random key", "")
    assert "lacks the master key that wrapped this table's keys" in message
    assert "the keystore the table was written with" in message
    Keystore(other).add_key("orders-key")  # what the old hint advised: another key of the same id
    with pytest.raises(KmsError) as excinfo:
        KeystoreKms(other).unwrap_key(wrapped, "orders-key")
    assert "use the keystore the table was written with" in str(excinfo.value)
    with pytest.raises(UnknownKeyError, match="keystore add"):  # a new table's key: adding it is right
        KeystoreKms(other).wrap_key(b"k" * 16, "returns-key")


def test_unknown_key_id_and_version_and_short_blob(keystore_path):
    kms = KeystoreKms(keystore_path)
    with pytest.raises(UnknownKeyError, match="key id 'nope' is not in keystore"):
        kms.wrap_key(b"k" * 16, "nope")
    wrapped = bytearray(kms.wrap_key(b"k" * 16, "orders"))
    wrapped[4:8] = struct.pack(">I", 9)
    with pytest.raises(UnknownKeyError, match=r"key id 'orders' has no version 9 .*\(versions: \[1\]\)"):
        kms.unwrap_key(bytes(wrapped), "orders")
    with pytest.raises(UnknownKeyError, match="'nope'"):
        kms.unwrap_key(bytes(wrapped), "nope")
    with pytest.raises(KmsError, match="not a keystore wrapped key"):
        kms.unwrap_key(b"PKW1" + b"\0" * 10, "orders")


def test_errors_never_contain_key_bytes(keystore_path):
    kms = KeystoreKms(keystore_path)
    dek = os.urandom(16)
    wrapped = bytearray(kms.wrap_key(dek, "orders"))
    wrapped[-1] ^= 1
    secrets = _master_keys(keystore_path) | {dek}
    texts = [repr(kms)]
    for call in (lambda: kms.unwrap_key(bytes(wrapped), "orders"), lambda: kms.wrap_key(dek, "missing")):
        with pytest.raises(KmsError) as excinfo:
            call()
        texts.append(str(excinfo.value))
    for text in texts:
        for secret in secrets:
            assert secret.hex() not in text and base64.b64encode(secret).decode() not in text


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644, 0o660])
def test_group_or_world_accessible_file_is_refused_with_the_fix(keystore_path, mode):
    os.chmod(keystore_path, mode)
    with pytest.raises(FileAccessError) as excinfo:
        KeystoreKms(keystore_path)
    assert f"run `chmod 600 {keystore_path}`" in str(excinfo.value)
    assert f"mode {mode:04o}" in str(excinfo.value)


def test_permissions_change_under_a_running_kms_is_refused(keystore_path):
    kms = KeystoreKms(keystore_path)
    Keystore(keystore_path).rotate_key("orders")
    os.chmod(keystore_path, 0o644)
    with pytest.raises(FileAccessError, match="chmod 600"):
        kms.wrap_key(b"k" * 16, "orders")


def test_writes_are_atomic_0600_even_with_a_permissive_umask(tmp_path):
    path = tmp_path / "ks.json"
    old_umask = os.umask(0o000)
    try:
        keystore = Keystore(path)
        keystore.create()
        keystore.add_key("a")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ks.json", "ks.json.lock"]  # no temp file left
    with pytest.raises(KmsError, match="already exists"):
        keystore.create()
    with pytest.raises(KmsError, match="already exists.*keystore rotate"):
        keystore.add_key("a")


def test_malformed_and_missing_files(tmp_path):
    path = tmp_path / "bad.json"
    with pytest.raises(KmsError, match="does not exist.*keystore create"):
        KeystoreKms(path)
    for content, reason in [
        ("{", "not JSON"),
        ('{"format": "x"}', "'format' must be"),
        ('{"format": "pyiceberg-crypto-keystore", "format-version": 9, "keys": {}}', "format-version 9"),
        ('{"format": "pyiceberg-crypto-keystore", "format-version": 1, "keys": {"k": [{"version": 1, "key": "AAAA"}]}}',
         "key id 'k' version 1: key must be 16, 24 or 32 bytes, got 3"),
    ]:
        path.write_text(content)
        os.chmod(path, 0o600)
        with pytest.raises(IntegrityError, match=reason):
            KeystoreKms(path)


def test_concurrent_wraps_unwraps_and_rotations_from_threads(keystore_path):
    kms = KeystoreKms(keystore_path)
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def worker(index: int) -> None:
        try:
            barrier.wait()
            for i in range(150):
                key = os.urandom(16)
                if index == 0 and i % 30 == 0:
                    kms.rotate_key("orders")
                assert kms.unwrap_key(kms.wrap_key(key, "orders"), "orders") == key
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert kms.versions("orders") == [1, 2, 3, 4, 5, 6]


def test_concurrent_rotations_never_lose_a_version(keystore_path):
    """Writers lock, re-read and rename: 4 threads x 5 rotations = 20 new versions, none lost."""
    keystores = [Keystore(keystore_path) for _ in range(4)]
    threads = [threading.Thread(target=lambda k=k: [k.rotate_key("orders") for _ in range(5)]) for k in keystores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert KeystoreKms(keystore_path).versions("orders") == list(range(1, 22))


def test_pickles_as_its_path_only(keystore_path):
    import pickle

    kms = KeystoreKms(keystore_path)
    data = pickle.dumps(kms)
    assert all(secret not in data for secret in _master_keys(keystore_path))
    copy = pickle.loads(data)
    assert copy.unwrap_key(kms.wrap_key(b"p" * 16, "orders"), "orders") == b"p" * 16


def test_loader_short_name_with_property_and_environment(keystore_path, monkeypatch):
    kms = load_kms("keystore", {"keystore.path": str(keystore_path)})
    assert isinstance(kms, KeystoreKms) and kms.key_ids() == ["orders", "short"]
    monkeypatch.setenv(KEYSTORE_ENV, str(keystore_path))
    assert load_kms("keystore").path == keystore_path
    monkeypatch.delenv(KEYSTORE_ENV)
    with pytest.raises(KmsError, match="'keystore.path' or the environment variable PYICEBERG_CRYPTO_KEYSTORE"):
        load_kms("keystore")


def test_symlinked_keystore_is_checked_at_its_target(keystore_path, tmp_path):
    """Mounted secrets are often symlinks: allowed, but the target's mode is what counts."""
    link = tmp_path / "link.json"
    link.symlink_to(keystore_path)
    kms = KeystoreKms(link)
    assert kms.unwrap_key(kms.wrap_key(b"k" * 16, "orders"), "orders") == b"k" * 16
    os.chmod(keystore_path, 0o644)
    with pytest.raises(FileAccessError, match=f"run `chmod 600 {link}`"):
        KeystoreKms(link)
