"""AwsKms against a real KMS API server (moto in server mode on loopback)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from pyiceberg_crypto.kms import AwsKms, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.aws import DEFAULT_ENCRYPTION_CONTEXT
from pyiceberg_crypto.kms.loader import load_kms

pytestmark = pytest.mark.loopback


@pytest.fixture
def kms(aws_properties):
    client = load_kms("aws", aws_properties)
    yield client
    client.close()


def test_wrap_unwrap_with_key_id_arn_and_alias(kms, kms_admin, aws_key):
    kms_admin.create_alias(AliasName=f"alias/t-{aws_key['KeyId'][:8]}", TargetKeyId=aws_key["KeyId"])
    for key_id in (aws_key["KeyId"], aws_key["Arn"], f"alias/t-{aws_key['KeyId'][:8]}"):
        dek = os.urandom(16)
        wrapped = kms.wrap_key(dek, key_id)
        assert dek not in wrapped
        assert kms.unwrap_key(wrapped, key_id) == dek


def test_encrypt_carries_the_key_use_context(kms, kms_admin, aws_key, aws_properties):
    """The ciphertext decrypts with the documented context, and only with it."""
    dek = os.urandom(32)
    wrapped = kms.wrap_key(dek, aws_key["KeyId"])
    plain = kms_admin.decrypt(CiphertextBlob=wrapped, EncryptionContext=dict(DEFAULT_ENCRYPTION_CONTEXT))
    assert plain["Plaintext"] == dek
    without_context = AwsKms.from_properties({**aws_properties, "kms.encryption-context": "none"})
    with pytest.raises(KmsError) as excinfo:
        without_context.unwrap_key(wrapped, aws_key["KeyId"])
    assert "InvalidCiphertextException" in str(excinfo.value)
    assert "kms.encryption-context=none" in str(excinfo.value)  # the hint for Java interop
    assert aws_key["KeyId"] in str(excinfo.value)
    other = AwsKms.from_properties({**aws_properties, "kms.encryption-context": '{"table": "db.t"}'})
    assert other.unwrap_key(other.wrap_key(dek, aws_key["KeyId"]), aws_key["KeyId"]) == dek


def test_unwrap_under_another_key_or_tampered_is_refused(kms, kms_admin, aws_key):
    other_key = kms_admin.create_key()["KeyMetadata"]["KeyId"]
    wrapped = kms.wrap_key(os.urandom(16), aws_key["KeyId"])
    with pytest.raises(KmsError, match=f"AWS KMS Decrypt with key id '{other_key}' failed"):
        kms.unwrap_key(wrapped, other_key)
    tampered = bytearray(wrapped)
    tampered[-5] ^= 1
    with pytest.raises(KmsError, match="Decrypt with key id"):
        kms.unwrap_key(bytes(tampered), aws_key["KeyId"])


def test_unknown_key_is_named(kms):
    with pytest.raises(UnknownKeyError, match="AWS KMS Encrypt with key id 'alias/no-such-key' failed: NotFoundException"):
        kms.wrap_key(b"k" * 16, "alias/no-such-key")


@pytest.mark.parametrize("spec,length", [("AES_256", 32), ("AES_128", 16)])
def test_generate_key_through_generate_data_key(aws_properties, aws_key, spec, length):
    kms = AwsKms.from_properties({**aws_properties, "kms.data-key-spec": spec})
    assert kms.supports_key_generation()
    result = kms.generate_key(aws_key["KeyId"])
    assert len(result.key) == length
    assert kms.unwrap_key(result.wrapped_key, aws_key["KeyId"]) == result.key
    assert result.key.hex() not in repr(result)


def test_generate_key_reaches_java_through_the_bridge(spark, jvm, kms, aws_key):
    """The bridge exposes supportsKeyGeneration/generateKey to Iceberg's Java interface."""
    from pyiceberg_crypto.bridge import register_kms

    with register_kms(spark, kms, name="aws-generate") as registration:
        client = jvm.io.pyicebergcrypto.bridge.PythonKmsClient()
        client.initialize({"pyiceberg-crypto.kms-name": "aws-generate"})
        assert client.supportsKeyGeneration()
        generated = client.generateKey(aws_key["KeyId"])
        key = bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(generated.key()))
        wrapped = bytes(jvm.org.apache.iceberg.util.ByteBuffers.toByteArray(generated.wrappedKey()))
        assert len(key) == 32 and kms.unwrap_key(wrapped, aws_key["KeyId"]) == key
        assert registration.stats.generate == 1


def test_concurrent_calls_from_threads(kms, aws_key):
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(10):
                dek = os.urandom(16)
                assert kms.unwrap_key(kms.wrap_key(dek, aws_key["KeyId"]), aws_key["KeyId"]) == dek
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_repr_and_errors_show_no_credentials(kms, aws_properties, moto_kms_endpoint):
    secret = aws_properties["kms.secret-access-key"]
    assert repr(kms) == f"AwsKms(region='us-east-1', endpoint='{moto_kms_endpoint}')"
    with pytest.raises(KmsError) as excinfo:
        kms.wrap_key(b"k" * 16, "alias/missing")
    assert secret not in str(excinfo.value) and secret not in repr(kms)
    assert aws_properties["kms.access-key-id"] not in repr(kms)


def test_configuration_errors_are_clear(aws_properties, monkeypatch):
    with pytest.raises(KmsError, match="must be a JSON object of strings"):
        AwsKms.from_properties({**aws_properties, "kms.encryption-context": "[1]"})
    with pytest.raises(KmsError, match="data key spec must be one of"):
        AwsKms.from_properties({**aws_properties, "kms.data-key-spec": "AES_512"})
    with pytest.raises(KmsError, match="both an access key id and a secret access key"):
        AwsKms(access_key_id="x")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(KmsError, match="cannot create the AWS KMS client: NoRegionError.*client.region / AWS_REGION"):
        AwsKms()
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if the [aws] extra were not installed
    with pytest.raises(KmsError, match=r"pip install 'pyiceberg-crypto\[aws\]'"):
        AwsKms()
