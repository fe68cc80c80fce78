"""The AWS KMS face of ``kms serve`` (``--aws-kms-api``) with a client we did not write: boto3, over
TLS, against a real service process. Every call Iceberg, Trino and boto3 make, and every refusal."""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import os
import ssl
import struct
import subprocess
import sys
import urllib.request

import pytest

from pyiceberg_crypto.kms.aws_face_blob import MAGIC
from pyiceberg_crypto.kms.keystore import KeystoreKms
from tests.serve.aws_face import ACCESS_KEY_ID, ACCOUNT, REGION, SECRET, FaceProcess, write_credentials
from tests.serve.service_process import ROOT, make_keystore

pytestmark = [pytest.mark.loopback]


@pytest.fixture(scope="module")
def face_keystore(tmp_path_factory):
    return make_keystore(tmp_path_factory.mktemp("face-keys") / "keys.json", "k1", "k2")


@pytest.fixture(scope="module")
def face(tmp_path_factory, face_keystore):
    process = FaceProcess.start(tmp_path_factory.mktemp("face"), face_keystore, metrics=True)
    try:
        yield process
    finally:
        process.stop()


def code(exc) -> str:
    return exc.value.response["Error"]["Code"]


def arn(name: str) -> str:
    return f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{name}"


def test_aws_face_round_trips_every_call_with_boto3(face):
    kms = face.client()
    for key_id in ("k1", "alias/k1", arn("k1"), f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/k1"):
        secret = os.urandom(32)
        blob = kms.encrypt(KeyId=key_id, Plaintext=secret)
        assert blob["KeyId"] == arn("k1") and blob["EncryptionAlgorithm"] == "SYMMETRIC_DEFAULT"
        assert blob["CiphertextBlob"].startswith(MAGIC) and secret not in blob["CiphertextBlob"]
        # Decrypt needs no KeyId (the blob names its key), as with AWS; with one, it must match.
        for extra in ({}, {"KeyId": key_id}, {"EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}):
            answer = kms.decrypt(CiphertextBlob=blob["CiphertextBlob"], **extra)
            assert answer["Plaintext"] == secret and answer["KeyId"] == arn("k1")
    for spec, length in (({"KeySpec": "AES_256"}, 32), ({"KeySpec": "AES_128"}, 16), ({"NumberOfBytes": 64}, 64)):
        data_key = kms.generate_data_key(KeyId="k2", **spec)
        assert len(data_key["Plaintext"]) == length and data_key["KeyId"] == arn("k2")
        assert kms.decrypt(CiphertextBlob=data_key["CiphertextBlob"])["Plaintext"] == data_key["Plaintext"]
    metadata = kms.describe_key(KeyId="alias/k2")["KeyMetadata"]
    assert metadata["Arn"] == arn("k2") and metadata["KeyId"] == "k2" and metadata["Enabled"]
    assert metadata["AWSAccountId"] == ACCOUNT and metadata["EncryptionAlgorithms"] == ["SYMMETRIC_DEFAULT"]
    context = {"table": "db.orders"}
    blob = kms.encrypt(KeyId="k1", Plaintext=b"x" * 16, EncryptionContext=context)["CiphertextBlob"]
    assert kms.decrypt(CiphertextBlob=blob, EncryptionContext=context)["Plaintext"] == b"x" * 16


def test_aws_face_blob_never_decrypts_under_another_key_or_context(face):
    kms = face.client()
    blob = kms.encrypt(KeyId="k1", Plaintext=b"k" * 32, EncryptionContext={"a": "1"})["CiphertextBlob"]
    with pytest.raises(kms.exceptions.IncorrectKeyException):
        kms.decrypt(CiphertextBlob=blob, KeyId="k2", EncryptionContext={"a": "1"})
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob, EncryptionContext={"a": "2"})
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=blob)  # the context is part of the blob's binding
    # The header edited to name k2 (same length): k2 does not unwrap k1's inner blob, and even a
    # KMS that did would fail the binding sealed inside.
    edited = blob.replace(struct.pack(">H", 2) + b"k1", struct.pack(">H", 2) + b"k2", 1)
    assert edited != blob
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=edited, EncryptionContext={"a": "1"})
    for broken in (blob[:-1], blob[:12], blob + b"\x00", MAGIC + b"\xff\xff"):
        with pytest.raises(kms.exceptions.InvalidCiphertextException):
            kms.decrypt(CiphertextBlob=broken, EncryptionContext={"a": "1"})


def test_aws_face_unwraps_raw_bridge_blobs_with_the_key_id_iceberg_sends(face, face_keystore, tmp_path):
    """KEKs wrapped by the Py4J bridge are the keystore's raw blobs: Iceberg's Decrypt sends the
    table's key id, which is all the face needs."""
    kms = face.client()
    raw = KeystoreKms(face_keystore).wrap_key(b"r" * 16, "k1")
    assert kms.decrypt(CiphertextBlob=raw, KeyId="k1")["Plaintext"] == b"r" * 16
    assert kms.decrypt(CiphertextBlob=raw, KeyId="alias/k1")["KeyId"] == arn("k1")
    with pytest.raises(kms.exceptions.InvalidCiphertextException, match="needs the KeyId"):
        kms.decrypt(CiphertextBlob=raw)
    with pytest.raises(kms.exceptions.InvalidCiphertextException):
        kms.decrypt(CiphertextBlob=raw, KeyId="k1", EncryptionContext={"a": "1"})
    with pytest.raises(kms.exceptions.InvalidCiphertextException):  # k2 does not authenticate k1's blob
        kms.decrypt(CiphertextBlob=raw, KeyId="k2")
    strict = FaceProcess.start(tmp_path / "strict", face_keystore, extra=["--aws-kms-api-refuse-raw-blobs"])
    try:
        with pytest.raises(strict.client().exceptions.InvalidCiphertextException, match="raw blobs are refused"):
            strict.client().decrypt(CiphertextBlob=raw, KeyId="k1")
    finally:
        strict.stop()


def test_aws_face_validates_requests_like_aws(face):
    kms = face.client()
    with pytest.raises(kms.exceptions.NotFoundException):
        kms.describe_key(KeyId="no-such-key")
    with pytest.raises(kms.exceptions.NotFoundException):
        kms.encrypt(KeyId="no-such-key", Plaintext=b"x")
    with pytest.raises(kms.exceptions.NotFoundException):
        kms.encrypt(KeyId=f"arn:aws:kms:us-east-1:{ACCOUNT}:key/k1", Plaintext=b"x")  # another region's ARN
    with pytest.raises(kms.exceptions.InvalidKeyUsageException):
        kms.encrypt(KeyId="k1", Plaintext=b"x", EncryptionAlgorithm="RSAES_OAEP_SHA_256")
    with pytest.raises(kms.exceptions.ClientError) as exc:
        kms.generate_data_key(KeyId="k1", KeySpec="AES_256", NumberOfBytes=32)
    assert code(exc) == "ValidationException"
    with pytest.raises(kms.exceptions.ClientError) as exc:
        kms.list_keys()
    assert code(exc) == "UnknownOperationException"
    # Over 4096 bytes of plaintext: botocore checks it itself, so send it raw.
    status, headers, answer = raw_call(face, "Encrypt", {"KeyId": "k1", "Plaintext": _b64(b"x" * 4097)})
    assert status == 400 and answer["__type"] == "ValidationException" and headers["x-amzn-errortype"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def signed_request(face, operation: str, body: dict, *, secret: str = SECRET, service: str = "kms",
                   region: str = REGION, when: datetime.datetime | None = None, access_key_id: str = ACCESS_KEY_ID):
    """(headers, body bytes) signed by botocore's own SigV4 signer, with a chosen clock."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    data = json.dumps(body).encode()
    request = AWSRequest("POST", face.endpoint + "/", data=data, headers={
        "Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": f"TrentService.{operation}"})

    class Signer(SigV4Auth):
        def _modify_request_before_signing(self, request):
            super()._modify_request_before_signing(request)

    signer = Signer(Credentials(access_key_id, secret), service, region)
    if when is not None:  # add_auth stamps "now": sign as of another time
        import botocore.auth as auth

        original = auth.datetime.datetime
        class Frozen(datetime.datetime):
            @classmethod
            def utcnow(cls):
                return when.replace(tzinfo=None)

            @classmethod
            def now(cls, tz=None):
                return when if tz else when.replace(tzinfo=None)
        auth.datetime.datetime = Frozen
        try:
            signer.add_auth(request)
        finally:
            auth.datetime.datetime = original
    else:
        signer.add_auth(request)
    return dict(request.headers.items()), data


def send(face, headers: dict, body: bytes):
    context = ssl.create_default_context(cafile=str(face.ca_file))
    connection = http.client.HTTPSConnection("127.0.0.1", face.port, context=context, timeout=30)
    try:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(payload or b"{}")
    finally:
        connection.close()


def raw_call(face, operation: str, body: dict, **signing):
    return send(face, *signed_request(face, operation, body, **signing))


def test_aws_face_sigv4_refusals(face):
    kms = face.client()
    with pytest.raises(kms.exceptions.ClientError) as exc:
        face.client(secret="not-the-secret-0123456789").encrypt(KeyId="k1", Plaintext=b"x")
    assert code(exc) == "InvalidSignatureException" and "does not match" in str(exc.value)
    with pytest.raises(kms.exceptions.ClientError) as exc:
        face.client(access_key_id="AKIDUNKNOWN000000000").encrypt(KeyId="k1", Plaintext=b"x")
    assert code(exc) == "UnrecognizedClientException"
    with pytest.raises(kms.exceptions.ClientError) as exc:
        face.client(region="us-east-1").encrypt(KeyId="k1", Plaintext=b"x")
    assert code(exc) == "InvalidSignatureException" and "region" in str(exc.value)

    request = {"KeyId": "k1", "Plaintext": _b64(b"p" * 16)}
    status, _, answer = raw_call(face, "Encrypt", request, service="s3")
    assert (status, answer["__type"]) == (400, "InvalidSignatureException") and "service" in answer["message"]
    now = datetime.datetime.now(datetime.timezone.utc)
    for skew in (datetime.timedelta(minutes=-6), datetime.timedelta(minutes=6)):
        status, _, answer = raw_call(face, "Encrypt", request, when=now + skew)
        assert (status, answer["__type"]) == (400, "InvalidSignatureException") and "expired" in answer["message"]
    status, _, answer = raw_call(face, "Encrypt", request, when=now - datetime.timedelta(minutes=4))
    assert status == 200, answer  # within 5 minutes: fine
    # The same signed request again is served, as AWS serves it (botocore signs no nonce).
    headers, body = signed_request(face, "Encrypt", request)
    assert send(face, headers, body)[0] == 200
    assert send(face, headers, body)[0] == 200
    # The body altered after signing, a signature from another request, no signature at all.
    tampered = body.replace(b"k1", b"k2")
    status, _, answer = send(face, headers, tampered)
    assert answer["__type"] == "InvalidSignatureException" and "does not match" in answer["message"]
    unsigned = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    assert send(face, unsigned, body)[2]["__type"] == "MissingAuthenticationTokenException"
    mangled = dict(headers, Authorization="AWS4-HMAC-SHA256 Credential=nonsense")
    assert send(face, mangled, body)[2]["__type"] == "IncompleteSignatureException"


def test_aws_face_metrics_share_the_metrics_port_and_carry_no_secrets(face):
    kms = face.client()
    secret = os.urandom(32)
    blob = kms.encrypt(KeyId="k1", Plaintext=secret)["CiphertextBlob"]
    kms.decrypt(CiphertextBlob=blob)
    with pytest.raises(kms.exceptions.ClientError):
        face.client(secret="wrong-secret-0123456789abc").decrypt(CiphertextBlob=blob)
    text = urllib.request.urlopen(face.metrics_url(), timeout=10).read().decode()
    assert "pyiceberg_crypto_kms_up 1" in text  # the Py4J face's families are still there
    assert 'pyiceberg_crypto_aws_kms_api_requests_total{operation="Encrypt",result="ok"}' in text
    assert 'pyiceberg_crypto_aws_kms_api_requests_total{operation="Decrypt",result="ok"}' in text
    refused = [line for line in text.splitlines() if line.startswith('pyiceberg_crypto_aws_kms_api_refused_total{reason="bad-signature"}')]
    assert refused and float(refused[0].split()[-1]) >= 1
    assert "pyiceberg_crypto_aws_kms_api_up 1" in text
    log = face.service.log()
    for forbidden in (SECRET, _b64(secret), secret.hex(), _b64(blob)):
        assert forbidden not in text and forbidden not in log


def test_aws_face_refuses_unsafe_credentials_and_plain_http_off_loopback(tmp_path, face_keystore):
    workdir = tmp_path / "w"
    workdir.mkdir(mode=0o700)
    credentials = write_credentials(workdir / "creds")
    credentials.chmod(0o644)
    base = [sys.executable, "-m", "pyiceberg_crypto.cli.main", "kms", "serve", "--kms", "keystore",
            f"--kms-property=keystore.path={face_keystore}", "--listen", "127.0.0.1:0",
            "--token-file", str(workdir / "t.token"), "--aws-kms-api-credentials", str(credentials)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([*base, "--aws-kms-api", "127.0.0.1:0"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "readable by other users" in proc.stderr
    credentials.chmod(0o600)
    proc = subprocess.run([*base, "--aws-kms-api", "0.0.0.0:0", "--aws-kms-api-plaintext"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "needs TLS" in proc.stderr
    proc = subprocess.run([*base[:-2], "--aws-kms-api", "127.0.0.1:0"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2 and "--aws-kms-api-credentials" in proc.stderr
    assert not (workdir / "t.token").exists()  # the Py4J face stopped with it


def test_aws_face_speaks_tls_only(face):
    connection = http.client.HTTPConnection("127.0.0.1", face.port, timeout=10)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        connection.request("POST", "/", body=b"{}")
        connection.getresponse().read()
    connection.close()
    untrusted = ssl.create_default_context()  # the system's CAs only: the face's CA is not among them
    with pytest.raises(ssl.SSLCertVerificationError):
        http.client.HTTPSConnection("127.0.0.1", face.port, context=untrusted, timeout=10).request("POST", "/")
