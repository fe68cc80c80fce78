"""The Azure Key Vault provider against a local HTTPS stand-in of the documented Key Vault keys REST API
(tests/kms/azure_standin.py): real azure-keyvault-keys pipeline (bearer challenge, TLS, api-version)."""

from __future__ import annotations

import base64
import os
import time

import pytest

pytest.importorskip("azure.keyvault.keys")

from pyiceberg_crypto.kms import KmsError, UnknownKeyError  # noqa: E402
from pyiceberg_crypto.kms.azure import AzureKeyVaultKms  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from tests.kms.azure_standin import READER, KeyVaultStandIn  # noqa: E402
from tests.testkit import load_factor  # noqa: E402

pytestmark = pytest.mark.loopback


@pytest.fixture(scope="module")
def vault():
    standin = KeyVaultStandIn()
    yield standin
    standin.close()


@pytest.fixture
def key_id(vault):
    return vault.create_key(f"lake-{os.urandom(4).hex()}")


@pytest.fixture
def props(vault, key_id, tmp_path):
    token = tmp_path / "token"
    token.write_text(vault.principal(f"writer-{os.urandom(4).hex()}") + "\n")
    return {"azure.auth": "static-token", "azure.token-file": str(token), "azure.ca-cert": vault.ca_cert,
            "azure.timeout": "2"}


@pytest.fixture
def kms(props):
    return load_kms("azure", props)


def _clean(message: str, *secrets: bytes | str) -> None:
    """No key material or token in an error message, raw, hex or base64."""
    for secret in secrets:
        if isinstance(secret, str):
            assert secret not in message
            continue
        assert secret.hex() not in message and repr(secret) not in message
        assert base64.b64encode(secret).decode() not in message
        assert base64.urlsafe_b64encode(secret).decode().rstrip("=") not in message


def test_round_trip_versions_rotate_rewrap_disable(kms, vault, key_id):
    name = key_id.rpartition("/")[2]
    first = vault.keys[name]["order"][0]
    key = os.urandom(32)
    wrapped = kms.wrap_key(key, key_id)
    assert wrapped.startswith(b"PAZ1") and key not in wrapped
    assert kms.unwrap_key(wrapped, key_id) == key
    assert kms.key_version(wrapped, key_id) == first == kms.current_key_version(key_id)
    assert f"POST keys/{name}/{first}/wrapkey" in vault.calls  # wrapped in the service, not locally

    second = vault.rotate(name)  # az keyvault key rotate
    assert kms.current_key_version(key_id) == second != first
    assert kms.unwrap_key_version(wrapped, key_id, first) == key  # the version that wrapped is used
    assert vault.calls[-1] == f"POST keys/{name}/{first}/unwrapkey"
    rewrapped = kms.wrap_key(kms.unwrap_key_version(wrapped, key_id, first), key_id)  # what keys rewrap does
    assert kms.key_version(rewrapped, key_id) == second and kms.unwrap_key(rewrapped, key_id) == key

    vault.set_enabled(name, first, False)  # az keyvault key set-attributes --version FIRST --enabled false
    with pytest.raises(KmsError, match=rf"Azure Key Vault unwrapKey \(version {first}\) with key id '{key_id}' "
                                       r"refused: Forbidden \(KeyDisabled\): Operation unwrapKey is not allowed on a "
                                       r"disabled key") as e:
        kms.unwrap_key(wrapped, key_id)
    _clean(str(e.value), key, wrapped)
    assert kms.unwrap_key(rewrapped, key_id) == key
    vault.set_enabled(name, second, False)
    with pytest.raises(KmsError, match=rf"wrapKey with key id '{key_id}' refused: the current version {second} is "
                                       "disabled"):
        kms.wrap_key(key, key_id)
    assert "token" not in repr(kms).lower().replace("static-token", "")
    del vault.keys[name]  # az keyvault key delete (+ purge): every version is gone
    with pytest.raises(UnknownKeyError, match=rf"unwrapKey \(version {second}\) with key id '{key_id}' failed: "
                                              "KeyNotFound"):
        kms.unwrap_key(rewrapped, key_id)


def test_managed_hsm_oct_key_a256kw(vault, props):
    key_id = vault.create_key(f"hsm-{os.urandom(4).hex()}", kty="oct-HSM")
    kms = load_kms("azure", props)
    token = open(props["azure.token-file"]).read().strip()
    vault.roles[key_id.rpartition("/")[2]][vault.tokens[token]] = {"Key Vault Crypto Service Encryption User"}
    key = os.urandom(32)
    wrapped = kms.wrap_key(key, key_id)
    assert wrapped.startswith(b"PAZ1") and b"A256KW " in wrapped and len(wrapped) < 200
    # A fresh client unwraps it: the wrap happened in the (stand-in) HSM, not with a local key.
    assert load_kms("azure", props).unwrap_key(wrapped, key_id) == key
    tampered = wrapped[:-1] + bytes([wrapped[-1] ^ 1])
    with pytest.raises(KmsError, match=r"unwrapKey .* failed: BadParameter: The parameter is incorrect"):
        kms.unwrap_key(tampered, key_id)


def test_envelope_and_key_id_checks(kms, vault, key_id):
    other = vault.create_key(f"other-{os.urandom(4).hex()}")
    calls = len(vault.calls)
    wrapped = kms.wrap_key(os.urandom(32), key_id)
    with pytest.raises(KmsError, match=rf"key id '{other}' was made by '{key_id}/[0-9a-f]+', another key"):
        kms.unwrap_key(wrapped, other)
    assert len(vault.calls) == calls + 2  # the wrap's get + wrapkey; the refused unwrap made no call
    with pytest.raises(KmsError, match="not a PAZ1 envelope"):
        kms.unwrap_key(b"PGC1" + os.urandom(40), key_id)
    assert kms.key_version(b"garbage", key_id) is None
    from pyiceberg_crypto.kms import _version_label as version_label

    crafted = version_label.pack(b"PAZ1", f"RSA-OAEP-256 {key_id}/..%2F..%2Fother", b"x" * 256)
    with pytest.raises(KmsError, match="names an invalid kid"):
        kms.unwrap_key(crafted, key_id)
    with pytest.raises(UnknownKeyError, match="names a version; use the key without it"):
        kms.wrap_key(os.urandom(32), f"{key_id}/0123456789abcdef0123456789abcdef")
    for bad in ("lake-orders", f"{vault.vault_url}/secrets/lake", key_id.replace("https://", "http://")):
        with pytest.raises(UnknownKeyError, match="is not a key identifier"):
            kms.wrap_key(os.urandom(32), bad)
    with pytest.raises(UnknownKeyError, match=r"key id '.*/keys/missing' failed: KeyNotFound: A key with \(name/id\) "
                                              "missing was not found"):
        kms.current_key_version(f"{vault.vault_url}/keys/missing")


def test_auth_refused(vault, key_id, props, tmp_path, monkeypatch):
    key = os.urandom(32)
    wrapped = load_kms("azure", props).wrap_key(key, key_id)
    forged = tmp_path / "forged"
    forged.write_text("eyJ0eXAiOiJKV1QifQ.forged.token")
    bad = load_kms("azure", {**props, "azure.token-file": str(forged)})
    with pytest.raises(KmsError, match=rf"unwrapKey .* with key id '{key_id}' refused: Unauthorized: AKV10032: "
                                       r"Invalid issuer.*\(check the credential\)") as e:
        bad.unwrap_key(wrapped, key_id)
    _clean(str(e.value), key, wrapped, "forged.token")
    reader = tmp_path / "reader"
    reader.write_text(vault.principal("auditor", roles=(READER,), keys=(key_id.rpartition("/")[2],)))
    audit = load_kms("azure", {**props, "azure.token-file": str(reader)})
    assert audit.current_key_version(key_id)  # may read the key, not use it
    with pytest.raises(KmsError, match=r"refused: Forbidden \(ForbiddenByRbac\): Caller is not authorized.*"
                                       r"keys/unwrap/action.*Key Vault Crypto Service Encryption User"):
        audit.unwrap_key(wrapped, key_id)
    with pytest.raises(KmsError, match="static-token is only for a loopback test vault"):
        load_kms("azure", props).wrap_key(key, "https://lake-kv.vault.azure.net/keys/lake-orders")
    with pytest.raises(KmsError, match="secrets are not properties"):
        load_kms("azure", {**props, "azure.client-secret": "x"})
    monkeypatch.delenv("AZURE_CLIENT_SECRET", raising=False)
    with pytest.raises(KmsError, match="client-secret auth needs azure.tenant-id, azure.client-id and a secret"):
        load_kms("azure", {"azure.auth": "client-secret", "azure.tenant-id": "t", "azure.client-id": "c"})


def test_server_down_and_slow(vault, key_id, props, refused_port):
    port = refused_port
    down = load_kms("azure", props)
    with pytest.raises(KmsError, match=rf"get key with key id 'https://127.0.0.1:{port}/keys/lake' failed: cannot "
                                       "reach the vault"):
        down.wrap_key(os.urandom(32), f"https://127.0.0.1:{port}/keys/lake")
    slow = load_kms("azure", {**props, "azure.timeout": "0.5"})
    wrapped = slow.wrap_key(os.urandom(32), key_id)
    vault.delay = 30.0  # beyond the scaled bound below (a daemon thread sleeps it out): waiting for it fails
    try:
        for call in (lambda: slow.current_key_version(key_id), lambda: slow.unwrap_key(wrapped, key_id)):
            started = time.monotonic()
            with pytest.raises(KmsError, match=rf"key id '{key_id}' failed: no answer within 0.5s"):
                call()
            assert time.monotonic() - started < 1.9 * load_factor()
    finally:
        vault.delay = 0.0


def test_catalog_properties_reach_initialize(vault, key_id, props):
    kms = AzureKeyVaultKms(auth="static-token", token="not-yet-configured")  # registered first
    kms.initialize({**props, "unrelated": "x"})  # then the catalog's pyiceberg-crypto.kms.azure.* arrive
    key = os.urandom(32)
    assert kms.unwrap_key(kms.wrap_key(key, key_id), key_id) == key
    assert kms.timeout == 2.0
