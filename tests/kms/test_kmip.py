"""The KMIP KMS against a real PyKMIP server process on 127.0.0.1, over mutual TLS."""

from __future__ import annotations

import base64
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("kmip")

from pyiceberg_crypto.kms import KmipKms, KmsError, UnknownKeyError  # noqa: E402
from pyiceberg_crypto.kms.kmip import WRAPPED_MAGIC  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from tests.kms.kmip_server import ClientFiles, KmipTestServer  # noqa: E402
from tests.testkit import load_factor  # noqa: E402

pytestmark = pytest.mark.loopback


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with KmipTestServer(tmp_path_factory.mktemp("kmip")) as kmip_server:
        yield kmip_server


@pytest.fixture(scope="module")
def kms(server):
    return load_kms("kmip", server.client_properties(**{"kmip.timeout": "5"}))


def _secret_free(message: str, key: bytes, wrapped: bytes = b"") -> None:
    """The error text holds neither the key nor the wrapped key, in any common spelling."""
    for secret in (key, wrapped):
        if secret:
            for spelling in (secret.hex(), base64.b64encode(secret).decode(), repr(secret)[2:-1]):
                assert spelling not in message


def test_round_trip_header_and_key_id_forms(server, kms):
    uid = server.create_key("lake-orders")
    key = os.urandom(32)
    wrapped = kms.wrap_key(key, "lake-orders")
    assert wrapped.startswith(WRAPPED_MAGIC) and key not in wrapped
    assert len(wrapped) == 4 + 2 + len(uid) + 1 + 12 + 16 + 32
    assert kms.unwrap_key(wrapped, "lake-orders") == key
    assert kms.key_version(wrapped, "lake-orders") == uid == kms.current_key_version("lake-orders")
    # By Unique Identifier: always that key.
    by_uid = kms.wrap_key(key, f"uid:{uid}")
    assert kms.key_version(by_uid, f"uid:{uid}") == uid and kms.unwrap_key(by_uid, f"uid:{uid}") == key
    assert kms.current_key_version(f"uid:{uid}") == uid
    # Server-made IVs (HSMs in FIPS mode) and KMIP 2.0 requests work on the same key.
    server_iv = load_kms("kmip", server.client_properties(**{"kmip.iv": "server"}))
    assert server_iv.unwrap_key(server_iv.wrap_key(key, "lake-orders"), "lake-orders") == key
    v20 = load_kms("kmip", server.client_properties(**{"kmip.version": "2.0"}))
    assert v20.unwrap_key(wrapped, "lake-orders") == key
    assert isinstance(kms, KmipKms) and "127.0.0.1" in repr(kms) and str(server.client.key) not in repr(kms)


def test_wrapped_key_is_bound_to_key_id_and_header(server, kms):
    server.create_key("bound")
    other_uid = server.create_key("bound-other")
    key = os.urandom(32)
    wrapped = kms.wrap_key(key, "bound")
    # Presented under another key id: the additional data differs, GCM refuses.
    with pytest.raises(KmsError, match=r"KMIP Decrypt with key id 'other' \(key UID \d+\) failed.*does not "
                                       r"authenticate") as refused:
        kms.unwrap_key(wrapped, "other")
    _secret_free(str(refused.value), key, wrapped)
    # The header's UID pointed at another key the client may use: refused too.
    uid_length = int.from_bytes(wrapped[4:6], "big")
    moved = WRAPPED_MAGIC + len(other_uid).to_bytes(2, "big") + other_uid.encode() + wrapped[6 + uid_length:]
    with pytest.raises(KmsError, match=rf"key id 'bound' \(key UID {other_uid}\) failed"):
        kms.unwrap_key(moved, "bound")
    tampered = wrapped[:-1] + bytes([wrapped[-1] ^ 1])
    with pytest.raises(KmsError, match="does not authenticate"):
        kms.unwrap_key(tampered, "bound")
    with pytest.raises(KmsError, match=r"wrapped key for key id 'bound' is not a KMIP-wrapped key \(PKM1\)"):
        kms.unwrap_key(b"PKW1" + bytes(40), "bound")
    assert kms.key_version(b"vault:v1:abc", "bound") is None


def test_rotation_rewrap_and_retiring_the_old_key(server, kms):
    first = server.create_key("rotating")
    created_by = time.time()  # the server (same clock) stamped it at or before this
    key = os.urandom(32)
    old = kms.wrap_key(key, "rotating")
    # The behaviour: Initial Date has one-second resolution; from the next whole second on, the new
    # key is strictly newer (a wait of 0-1 s, not a fixed 1.1 s).
    time.sleep(max(0.0, math.floor(created_by) + 1 - time.time()))
    second = server.create_key("rotating")  # rotation: a new key with the same Name, the old one still Active
    assert second != first and kms.current_key_version("rotating") == second
    assert kms.key_version(old, "rotating") == first
    assert kms.unwrap_key_version(old, "rotating", first) == key
    # What `keys rewrap` does: unwrap with the old version, wrap with the current one.
    rewrapped = kms.wrap_key(kms.unwrap_key_version(old, "rotating", first), "rotating")
    assert kms.key_version(rewrapped, "rotating") == second and kms.unwrap_key(rewrapped, "rotating") == key
    # Retire the old key (Revoke: Deactivated). PyKMIP's server decrypts only with Active keys.
    server.deactivate(first)
    assert kms.current_key_version("rotating") == second
    assert kms.unwrap_key(rewrapped, "rotating") == key
    with pytest.raises(KmsError, match=rf"KMIP Decrypt with key id 'rotating' \(key UID {first}\) failed at "
                                       r"127\.0\.0\.1:\d+: permission denied: .*Active state") as refused:
        kms.unwrap_key(old, "rotating")
    _secret_free(str(refused.value), key, old)


def test_key_deactivated_and_destroyed(server, kms):
    uid = server.create_key("doomed")
    key = os.urandom(32)
    wrapped = kms.wrap_key(key, "doomed")
    server.deactivate(uid)
    with pytest.raises(UnknownKeyError, match=r"KMIP Locate with key id 'doomed' at 127\.0\.0\.1:\d+: no Active "
                                              "symmetric key has this Name"):
        kms.wrap_key(key, "doomed")
    with pytest.raises(KmsError, match=rf"key id 'doomed' \(key UID {uid}\) failed.*must be in the Active state"):
        kms.unwrap_key(wrapped, "doomed")
    server.destroy(uid)
    with pytest.raises(UnknownKeyError, match=rf"KMIP Decrypt with key id 'doomed' \(key UID {uid}\) failed at "
                                              r"127\.0\.0\.1:\d+: item not found: .*\(destroyed, or never existed\)") \
            as gone:
        kms.unwrap_key(wrapped, "doomed")
    _secret_free(str(gone.value), key, wrapped)
    with pytest.raises(UnknownKeyError, match=r"key id 'uid:999999' \(key UID 999999\) failed.*item not found"):
        kms.wrap_key(key, "uid:999999")


def test_client_certificate_refused_and_server_not_trusted(server, tmp_path):
    uid = server.create_key("guarded")
    key = os.urandom(32)
    # A client certificate from a CA the server does not trust: refused in the TLS handshake.
    rogue = load_kms("kmip", server.client_properties(server.rogue_client()))
    with pytest.raises(KmsError, match=r"KMIP Encrypt with key id 'guarded' failed: TLS handshake with "
                                       r"127\.0\.0\.1:\d+ refused .*UNKNOWN_CA.*kmip\.client-cert") as refused:
        rogue.wrap_key(key, "guarded")
    _secret_free(str(refused.value), key)
    # The server's own CA, another identity: PyKMIP's default policy hides other owners' keys.
    stranger = load_kms("kmip", server.client_properties(server.other_identity()))
    with pytest.raises(UnknownKeyError, match="'guarded'.*no Active symmetric key has this Name"):
        stranger.wrap_key(key, "guarded")
    with pytest.raises(KmsError, match=rf"key id 'uid:{uid}' \(key UID {uid}\) failed.*permission denied"):
        stranger.wrap_key(key, f"uid:{uid}")
    # This client does not trust the server (CA file of another CA, or the wrong server name).
    other_ca = server.rogue_client()
    untrusting = load_kms("kmip", server.client_properties(ClientFiles(server.client.cert, server.client.key,
                                                                       other_ca.cert.parent / "rogue-ca.crt")))
    with pytest.raises(KmsError, match=r"server certificate of 127\.0\.0\.1:\d+ is not trusted .*certificate"):
        untrusting.wrap_key(key, "guarded")
    misnamed = load_kms("kmip", server.client_properties(**{"kmip.server-name": "kmip.example"}))
    with pytest.raises(KmsError, match=r"not trusted \(kmip\.ca-cert, kmip\.server-name\).*mismatch"):
        misnamed.wrap_key(key, "guarded")


def test_server_down_and_slow(server, refused_port):
    server.create_key("patient")
    key = os.urandom(32)
    down = load_kms("kmip", server.client_properties(**{"kmip.port": str(refused_port),
                                                         "kmip.timeout": "2"}))
    with pytest.raises(KmsError, match=r"KMIP Encrypt with key id 'patient' failed: cannot reach "
                                       r"127\.0\.0\.1:\d+: ConnectionRefusedError"):
        down.wrap_key(key, "patient")
    slow = load_kms("kmip", server.client_properties(**{"kmip.timeout": "1.5"}))
    wrapped = slow.wrap_key(key, "patient")
    server.pause()  # SIGSTOP: the kernel accepts the connection, nobody answers

    def hung(call) -> tuple[float, KmsError]:
        started = time.monotonic()
        with pytest.raises(KmsError, match=r"key id 'patient'.* within 1\.5s \(kmip\.timeout\)") as refused:
            call()
        return time.monotonic() - started, refused.value

    try:  # the wrap and the unwrap time out at once (one wait of 1.5 s, not two)
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(hung, (lambda: slow.wrap_key(key, "patient"),
                                            lambda: slow.unwrap_key(wrapped, "patient"))))
        for elapsed, error in outcomes:
            # The paused server never answers: any bound proves the timeout; scaled for a loaded machine.
            assert elapsed < 2.5 * load_factor()
            _secret_free(str(error), key, wrapped)
    finally:
        server.resume()
    assert slow.unwrap_key(wrapped, "patient") == key


def test_settings_from_environment_and_errors(server, monkeypatch, tmp_path):
    props = server.client_properties()
    for name, value in props.items():
        monkeypatch.setenv("PYICEBERG_CRYPTO_KMIP_" + name.removeprefix("kmip.").upper().replace("-", "_"), value)
    server.create_key("from-env")
    from_env = load_kms("kmip")
    assert from_env.unwrap_key(from_env.wrap_key(b"e" * 32, "from-env"), "from-env") == b"e" * 32
    for name in props:
        monkeypatch.delenv("PYICEBERG_CRYPTO_KMIP_" + name.removeprefix("kmip.").upper().replace("-", "_"))
    with pytest.raises(KmsError, match=r"KMIP: missing settings kmip\.host, kmip\.client-cert, kmip\.client-key, "
                                       r"kmip\.ca-cert"):
        load_kms("kmip", {"kmip.port": "5696"})
    with pytest.raises(KmsError, match=r"kmip\.timeout must be a number, got 'soon'"):
        load_kms("kmip", {**props, "kmip.timeout": "soon"})
    with pytest.raises(KmsError, match=r"kmip\.version must be one of \('1\.4', '2\.0'\), got '1\.2'"):
        load_kms("kmip", {**props, "kmip.version": "1.2"})
    with pytest.raises(KmsError, match=r"cannot load the client certificate .* and key '.*missing\.key'"):
        load_kms("kmip", {**props, "kmip.client-key": str(tmp_path / "missing.key")})
    with pytest.raises(KmsError, match=r"cannot load the CA file '.*nothing\.crt' \(kmip\.ca-cert\)"):
        load_kms("kmip", {**props, "kmip.ca-cert": str(tmp_path / "nothing.crt")})


def test_initialize_applies_kmip_properties(server, refused_port):
    """Catalog properties pyiceberg-crypto.kms.kmip.* reach initialize() with the prefix removed."""
    server.create_key("configured")
    props = server.client_properties()
    kms = KmipKms(host="127.0.0.1", port=refused_port, client_cert=props["kmip.client-cert"],
                  client_key=props["kmip.client-key"], ca_cert=props["kmip.ca-cert"], timeout=2)
    with pytest.raises(KmsError, match="cannot reach"):
        kms.current_key_version("configured")
    kms.initialize({"kmip.port": str(server.port), "kmip.timeout": "3", "keystore.path": "/ignored"})
    assert (kms.port, kms.timeout) == (server.port, 3.0)
    assert kms.unwrap_key(kms.wrap_key(b"i" * 32, "configured"), "configured") == b"i" * 32
    kms.initialize({"unrelated": "x"})  # no kmip.* property: nothing changes
    with pytest.raises(KmsError, match=r"kmip\.timeout must be a number, got 'later'"):
        kms.initialize({"kmip.timeout": "later"})
    assert kms.timeout == 3.0 and kms.current_key_version("configured")


def test_concurrent_calls_from_threads(server, kms):
    """The JVM calls from several threads at once: one connection per operation, nothing shared."""
    server.create_key("busy")
    keys = [os.urandom(32) for _ in range(6)]
    results: dict[int, bytes] = {}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for _ in range(3):
                results[index] = kms.unwrap_key(kms.wrap_key(keys[index], "busy"), "busy")
        except BaseException as exc:  # handed to the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(keys))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and results == dict(enumerate(keys))
