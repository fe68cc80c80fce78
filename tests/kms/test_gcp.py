"""The Google Cloud KMS provider against a local stand-in of the documented Cloud KMS v1 REST API
(tests/kms/gcp_standin.py): real google-cloud-kms client, REST transport, service account key file."""

from __future__ import annotations

import base64
import os
import time

import pytest

pytest.importorskip("google.cloud.kms_v1")

from pyiceberg_crypto.kms import KmsError, UnknownKeyError  # noqa: E402
from pyiceberg_crypto.kms._crc32c import crc32c  # noqa: E402
from pyiceberg_crypto.kms.gcp import GcpKms  # noqa: E402
from pyiceberg_crypto.kms.loader import load_kms  # noqa: E402
from tests.kms.gcp_standin import ENCRYPTER_DECRYPTER, CloudKmsStandIn  # noqa: E402
from tests.testkit import load_factor  # noqa: E402

pytestmark = pytest.mark.loopback


@pytest.fixture(autouse=True)
def _no_metadata_server(monkeypatch):
    """Application default credentials must never probe the GCE metadata server (a link-local
    address) from a test: every test passes credentials, and should one not, no probe is made."""
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # google-auth reads NO_GCE_CHECK at import
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)


@pytest.fixture
def cloud():
    standin = CloudKmsStandIn()
    standin.key = standin.create_key("lake-orders")
    yield standin
    standin.close()


@pytest.fixture
def props(cloud, tmp_path):
    return {"gcp.endpoint": cloud.address, "gcp.credentials-file": str(cloud.service_account(tmp_path)),
            "gcp.timeout": "2"}


@pytest.fixture
def kms(props):
    return load_kms("gcp", props)


def _clean(message: str, *secrets: bytes) -> None:
    """No key material in an error message, raw, hex or base64."""
    for secret in secrets:
        assert secret.hex() not in message and base64.b64encode(secret).decode() not in message
        assert repr(secret) not in message


def test_crc32c_known_answers():
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720 B.4 check value
    assert crc32c(b"") == 0 and crc32c(bytes(32)) == 0x8A9136AA


def test_round_trip_versions_rotate_rewrap_disable(kms, cloud):
    key = os.urandom(32)
    wrapped = kms.wrap_key(key, cloud.key)
    assert wrapped.startswith(b"PGC1") and key not in wrapped
    assert kms.unwrap_key(wrapped, cloud.key) == key
    assert kms.key_version(wrapped, cloud.key) == "1" and kms.current_key_version(cloud.key) == "1"
    assert cloud.calls[0] == f"encrypt {cloud.key}"

    assert cloud.rotate(cloud.key) == 2  # gcloud kms keys versions create --primary
    assert kms.current_key_version(cloud.key) == "2"
    assert kms.unwrap_key_version(wrapped, cloud.key, "1") == key  # Cloud KMS picks version 1 itself
    rewrapped = kms.wrap_key(kms.unwrap_key_version(wrapped, cloud.key, "1"), cloud.key)  # what keys rewrap does
    assert kms.key_version(rewrapped, cloud.key) == "2" and kms.unwrap_key(rewrapped, cloud.key) == key

    cloud.set_state(cloud.key, 1, "DISABLED")  # gcloud kms keys versions disable 1
    with pytest.raises(KmsError, match=r"Google Cloud KMS decrypt with key id '.*/cryptoKeys/lake-orders' failed: "
                                       r"FAILED_PRECONDITION: .*cryptoKeyVersions/1 is not enabled.*DISABLED") as e:
        kms.unwrap_key(wrapped, cloud.key)
    _clean(str(e.value), key, wrapped)
    assert kms.unwrap_key(rewrapped, cloud.key) == key
    cloud.set_state(cloud.key, 1, "DESTROYED")
    with pytest.raises(KmsError, match="DESTROYED"):
        kms.unwrap_key(wrapped, cloud.key)
    assert "credentials" not in repr(kms) and cloud.address in repr(kms)


def test_additional_authenticated_data_and_envelope(kms, cloud, props):
    other = load_kms("gcp", {**props, "gcp.additional-authenticated-data": "something-else"})
    foreign = other.wrap_key(os.urandom(32), cloud.key)
    with pytest.raises(KmsError, match=r"decrypt with key id '.*lake-orders' failed: INVALID_ARGUMENT: Decryption "
                                       r"failed"):
        kms.unwrap_key(foreign, cloud.key)
    with pytest.raises(KmsError, match="not a PGC1 envelope"):
        kms.unwrap_key(b"PKW1" + os.urandom(40), cloud.key)
    assert kms.key_version(b"garbage", cloud.key) is None
    second = cloud.create_key("lake-other")
    moved = kms.wrap_key(os.urandom(32), cloud.key)
    with pytest.raises(KmsError, match=r"key id '.*lake-other' was made by '.*lake-orders/cryptoKeyVersions/1', "
                                       "another key"):
        kms.unwrap_key(moved, second)


def test_crc32c_integrity_checked(kms, cloud):
    wrapped = kms.wrap_key(os.urandom(32), cloud.key)
    cloud.corrupt = True  # a damaged network path: the checksums no longer match the bytes
    with pytest.raises(KmsError, match=r"encrypt .* corrupted in transit \(ciphertext CRC32C mismatch\)"):
        kms.wrap_key(os.urandom(32), cloud.key)
    with pytest.raises(KmsError, match=r"decrypt .* corrupted in transit \(plaintext CRC32C mismatch\)"):
        kms.unwrap_key(wrapped, cloud.key)
    cloud.corrupt, cloud.drops_checksums = False, True  # the server never saw the request's checksums
    with pytest.raises(KmsError, match=r"encrypt .* the request was corrupted in transit \(CRC32C not verified\)"):
        kms.wrap_key(os.urandom(32), cloud.key)


def test_auth_refused(cloud, props, tmp_path):
    key = os.urandom(32)
    reader = cloud.service_account(tmp_path, email="auditor@lake-project.iam.gserviceaccount.com",
                                   roles=("roles/cloudkms.viewer",))
    kms = load_kms("gcp", {**props, "gcp.credentials-file": str(reader)})
    assert kms.current_key_version(cloud.key) == "1"  # may read the key, not use it
    with pytest.raises(KmsError, match=r"encrypt with key id '.*lake-orders' refused: PERMISSION_DENIED: Permission "
                                       r"'cloudkms.cryptoKeyVersions.useToEncrypt' denied.*cryptoKeyEncrypterDecrypter"
                       ) as e:
        kms.wrap_key(key, cloud.key)
    _clean(str(e.value), key)
    writer = load_kms("gcp", props)
    wrapped = writer.wrap_key(key, cloud.key)
    cloud.unauthenticated = True  # the account was deleted or its key revoked
    with pytest.raises(KmsError, match=r"decrypt with key id '.*lake-orders' refused: UNAUTHENTICATED: .*check the "
                                       "credentials") as e:
        writer.unwrap_key(wrapped, cloud.key)
    _clean(str(e.value), key, wrapped)
    cloud.unauthenticated = False
    anonymous = load_kms("gcp", {"gcp.endpoint": cloud.address, "gcp.auth": "anonymous"})
    with pytest.raises(KmsError, match="failed: cannot get credentials: .*Anonymous credentials cannot be refreshed"):
        anonymous.wrap_key(key, cloud.key)  # the server asked for credentials (401); there are none
    with pytest.raises(KmsError, match="anonymous is only for a loopback test endpoint"):
        load_kms("gcp", {"gcp.endpoint": "https://cloudkms.googleapis.com", "gcp.auth": "anonymous"})
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": "service_account"}')
    with pytest.raises(KmsError, match=r"cannot load the credentials file '.*broken.json'"):
        load_kms("gcp", {**props, "gcp.credentials-file": str(broken)})
    assert ENCRYPTER_DECRYPTER not in cloud.iam[cloud.key]["auditor@lake-project.iam.gserviceaccount.com"]


def test_missing_and_malformed_key(kms, cloud):
    missing = cloud.key.replace("lake-orders", "missing")
    with pytest.raises(UnknownKeyError, match=r"key id '.*cryptoKeys/missing' failed: NOT_FOUND"):
        kms.wrap_key(os.urandom(32), missing)
    for bad in ("lake-orders", f"{cloud.key}/cryptoKeyVersions/1", f"{cloud.key}?alt=media", f"{cloud.key}/../x"):
        with pytest.raises(UnknownKeyError, match="not a CryptoKey resource name"):
            kms.wrap_key(os.urandom(32), bad)
    cloud.set_state(cloud.key, 1, "DISABLED")  # the primary version disabled: nothing can be wrapped
    with pytest.raises(KmsError, match="encrypt with key id .* FAILED_PRECONDITION: .* not enabled"):
        kms.wrap_key(os.urandom(32), cloud.key)


def test_server_down_and_slow(cloud, props, refused_port):
    port = refused_port
    down = load_kms("gcp", {**props, "gcp.endpoint": f"http://127.0.0.1:{port}"})
    with pytest.raises(KmsError, match=rf"encrypt with key id '.*lake-orders' failed: cannot reach "
                                       rf"http://127.0.0.1:{port}"):
        down.wrap_key(os.urandom(32), cloud.key)
    slow = load_kms("gcp", {**props, "gcp.timeout": "0.5"})
    cloud.delay = 30.0  # beyond the scaled bound below (a daemon thread sleeps it out): waiting for it fails
    started = time.monotonic()
    with pytest.raises(KmsError, match=r"key id '.*lake-orders' failed: no answer from .* within 0.5s"):
        slow.wrap_key(os.urandom(32), cloud.key)
    assert time.monotonic() - started < 1.9 * load_factor()
    cloud.delay = 0.0


def test_no_credentials(cloud, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud application default credentials either
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    kms = GcpKms(endpoint=cloud.address)  # constructing needs no credentials: they are looked up at the first call
    with pytest.raises(KmsError, match=r"Google Cloud KMS encrypt with key id '.*lake-orders' failed: no credentials "
                                       r"\(set GOOGLE_APPLICATION_CREDENTIALS or gcp.credentials-file"):
        kms.wrap_key(os.urandom(32), cloud.key)
    assert cloud.calls == []


def test_catalog_properties_reach_initialize(cloud, props):
    kms = GcpKms(endpoint="http://127.0.0.1:9", anonymous=True)  # registered first, configured by the catalog
    kms.initialize({"gcp.endpoint": cloud.address, "gcp.credentials-file": props["gcp.credentials-file"],
                    "unrelated": "x"})
    key = os.urandom(32)
    assert kms.unwrap_key(kms.wrap_key(key, cloud.key), cloud.key) == key
    assert kms.endpoint == cloud.address
