"""The Vault / OpenBao Transit KMS against a local stand-in of the documented Transit API."""

from __future__ import annotations

import os
import socket
import time

import pytest

pytest.importorskip("hvac")

from pyiceberg_crypto.kms import KmsError, UnknownKeyError  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from pyiceberg_crypto.kms.vault import VaultTransitKms  # noqa: E402
from tests.kms.vault_standin import TransitStandIn  # noqa: E402

pytestmark = pytest.mark.loopback


@pytest.fixture
def vault():
    standin = TransitStandIn()
    standin.create_key("lake")
    yield standin
    standin.close()


@pytest.fixture
def kms(vault, monkeypatch):
    monkeypatch.setenv("VAULT_TOKEN", vault.root_token)
    return load_kms("vault", {"vault.address": vault.address, "vault.timeout": "2"})


def test_round_trip_versions_rotate_rewrap(kms, vault):
    key = os.urandom(32)
    wrapped = kms.wrap_key(key, "lake")
    assert wrapped.startswith(b"vault:v1:") and key not in wrapped
    assert kms.unwrap_key(wrapped, "lake") == key
    assert kms.key_version(wrapped, "lake") == "v1" and kms.current_key_version("lake") == "v1"
    vault.rotate("lake")
    assert kms.current_key_version("lake") == "v2"
    assert kms.unwrap_key_version(wrapped, "lake", "v1") == key  # the old version still decrypts
    new = kms.wrap_key(key, "lake")
    assert kms.key_version(new, "lake") == "v2" and kms.unwrap_key(new, "lake") == key
    rewrapped = kms.rewrap(wrapped, "lake")
    assert kms.key_version(rewrapped, "lake") == "v2" and kms.unwrap_key(rewrapped, "lake") == key
    assert vault.root_token not in repr(kms) and "127.0.0.1" in repr(kms)


def test_associated_data_binds_the_key_use(kms, vault):
    other = VaultTransitKms(address=vault.address, token=vault.root_token, associated_data="something-else")
    wrapped = other.wrap_key(os.urandom(32), "lake")
    with pytest.raises(KmsError, match="'lake'"):
        kms.unwrap_key(wrapped, "lake")
    with pytest.raises(KmsError, match="not a Transit ciphertext"):
        kms.unwrap_key(b"PKW1garbage", "lake")


def test_auth_refused_and_token_file(vault, tmp_path, monkeypatch):
    monkeypatch.setenv("VAULT_TOKEN", "wrong-token")
    kms = load_kms("vault", {"vault.address": vault.address})
    with pytest.raises(KmsError, match=r"Vault Transit encrypt with key id 'lake'.*permission denied") as e:
        kms.wrap_key(os.urandom(32), "lake")
    assert "wrong-token" not in str(e.value)
    token_file = tmp_path / "token"
    token_file.write_text(vault.root_token + "\n")
    kms = load_kms("vault", {"vault.address": vault.address, "vault.token-file": str(token_file)})
    assert kms.unwrap_key(kms.wrap_key(b"k" * 32, "lake"), "lake") == b"k" * 32
    with pytest.raises(KmsError, match="secrets are not properties"):
        load_kms("vault", {"vault.address": vault.address, "vault.token": "x"})
    monkeypatch.delenv("VAULT_TOKEN")
    monkeypatch.delenv("BAO_TOKEN", raising=False)
    with pytest.raises(KmsError, match="no token"):
        load_kms("vault", {"vault.address": vault.address})


def test_approle_and_kubernetes_login(vault, tmp_path, monkeypatch):
    monkeypatch.delenv("VAULT_TOKEN", raising=False)
    monkeypatch.setenv("VAULT_SECRET_ID", vault.approle["secret_id"])
    kms = load_kms("vault", {"vault.address": vault.address, "vault.auth": "approle", "vault.role-id": "role-1"})
    assert kms.unwrap_key(kms.wrap_key(b"a" * 32, "lake"), "lake") == b"a" * 32
    monkeypatch.setenv("VAULT_SECRET_ID", "bad")
    with pytest.raises(KmsError, match="approle login .* refused: invalid role or secret ID"):
        load_kms("vault", {"vault.address": vault.address, "vault.auth": "approle", "vault.role-id": "role-1"})
    jwt = tmp_path / "jwt"
    jwt.write_text(vault.k8s["jwt"])
    props = {"vault.address": vault.address, "vault.auth": "kubernetes", "vault.kubernetes-role": "lake",
             "vault.jwt-file": str(jwt)}
    kms = load_kms("vault", props)
    assert kms.unwrap_key(kms.wrap_key(b"b" * 32, "lake"), "lake") == b"b" * 32
    jwt.write_text("forged")
    with pytest.raises(KmsError, match="kubernetes login .* refused: permission denied") as e:
        load_kms("vault", props)
    assert "forged" not in str(e.value)


def test_key_deleted_and_too_old(kms, vault):
    wrapped = kms.wrap_key(os.urandom(32), "lake")
    vault.rotate("lake")
    vault.keys["lake"]["min_dec"] = 2  # vault write transit/keys/lake/config min_decryption_version=2
    with pytest.raises(KmsError, match=r"decrypt with key id 'lake'.*too old"):
        kms.unwrap_key(wrapped, "lake")
    with pytest.raises(UnknownKeyError, match=r"key id 'missing'.*encryption key not found"):
        kms.wrap_key(os.urandom(32), "missing")
    with pytest.raises(UnknownKeyError, match="'missing'"):
        kms.current_key_version("missing")
    del vault.keys["lake"]  # deleted (deletion_allowed + DELETE transit/keys/lake)
    with pytest.raises(UnknownKeyError, match="'lake'"):
        kms.unwrap_key(wrapped, "lake")


def test_server_down_and_slow(vault, monkeypatch):
    monkeypatch.setenv("VAULT_TOKEN", vault.root_token)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = load_kms("vault", {"vault.address": f"http://127.0.0.1:{port}", "vault.timeout": "1"})
    with pytest.raises(KmsError, match=r"encrypt with key id 'lake'.*cannot reach"):
        down.wrap_key(os.urandom(32), "lake")
    slow = load_kms("vault", {"vault.address": vault.address, "vault.timeout": "0.5"})
    vault.delay = 2.0
    started = time.monotonic()
    with pytest.raises(KmsError, match=r"key id 'lake'.*within 0.5s"):
        slow.wrap_key(os.urandom(32), "lake")
    assert time.monotonic() - started < 1.9
    vault.delay = 0.0
