"""The Vault / OpenBao Transit KMS against a local stand-in of the Transit API, for the fault shapes
a real server cannot produce: Kubernetes login (no Kubernetes API here) and a server that answers
too slowly. Everything else runs against a real OpenBao server: test_vault_openbao.py."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("hvac")

from pyiceberg_crypto.kms import KmsError  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from tests.kms.vault_standin import TransitStandIn  # noqa: E402
from tests.testkit import load_factor  # noqa: E402

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


def test_secrets_are_not_properties_and_a_token_is_required(vault, monkeypatch):
    with pytest.raises(KmsError, match="secrets are not properties"):
        load_kms("vault", {"vault.address": vault.address, "vault.token": "x"})
    monkeypatch.delenv("VAULT_TOKEN", raising=False)
    monkeypatch.delenv("BAO_TOKEN", raising=False)
    with pytest.raises(KmsError, match="no token"):
        load_kms("vault", {"vault.address": vault.address})


def test_kubernetes_login(vault, tmp_path, monkeypatch):
    """No Kubernetes API server here to review a service account JWT: the stand-in plays both."""
    monkeypatch.delenv("VAULT_TOKEN", raising=False)
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


def test_a_slow_server_is_bounded_by_the_timeout(vault, monkeypatch):
    """A real server answers at once; the stand-in can take its time."""
    monkeypatch.setenv("VAULT_TOKEN", vault.root_token)
    slow = load_kms("vault", {"vault.address": vault.address, "vault.timeout": "0.5"})
    vault.delay = 30.0  # beyond the scaled bound below (a daemon thread sleeps it out): waiting for it fails
    started = time.monotonic()
    with pytest.raises(KmsError, match=r"key id 'lake'.*within 0.5s"):
        slow.wrap_key(os.urandom(32), "lake")
    assert time.monotonic() - started < 1.9 * load_factor()
    vault.delay = 0.0
