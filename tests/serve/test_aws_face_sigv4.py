"""The AWS face's SigV4 check against botocore's own signer, the headers it must sign, repeats
served as AWS serves them, and its credentials file; the face's blob format and key-id mapping (no network, no JVM)."""

from __future__ import annotations

import os
import time

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from pyiceberg_crypto.serve.aws.api import AwsKmsApi
from pyiceberg_crypto.serve.served_kms import ServedKms
from pyiceberg_crypto.serve.aws.key_ids import python_key_id
from pyiceberg_crypto.serve.aws.sigv4 import Principal, SigV4Verifier, load_credentials
from pyiceberg_crypto.errors import (
    ApiError,
    FileAccessError,
    InvalidArgumentError,
    KmsError,
    PyicebergCryptoError,
    SetupError,
)
from pyiceberg_crypto.kms.base import INCORRECT_KEY, INVALID_CIPHERTEXT
from pyiceberg_crypto.kms import aws_face_blob
from pyiceberg_crypto.kms.memory import InMemoryKms

SECRET = "aws-face-secret-0123456789"
PRINCIPALS = {"AKIDFACE": Principal("client", "AKIDFACE", SECRET)}


def botocore_signed(body: bytes = b'{"KeyId": "k1"}', *, secret: str = SECRET, region: str = "eu-west-1",
                    service: str = "kms", path: str = "/", extra_headers: dict | None = None):
    request = AWSRequest("POST", f"https://127.0.0.1:9602{path}", data=body, headers={
        "Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "TrentService.Decrypt",
        **(extra_headers or {})})
    SigV4Auth(Credentials("AKIDFACE", secret), service, region).add_auth(request)
    headers = {k.lower(): v for k, v in request.headers.items()}
    headers["host"] = "127.0.0.1:9602"
    return path.partition("?")[0], path.partition("?")[2], headers, body


def verifier(**kwargs) -> SigV4Verifier:
    return SigV4Verifier(PRINCIPALS, region="eu-west-1", **kwargs)


def test_aws_face_sigv4_accepts_what_botocore_signs():
    check = verifier()
    for extra in ({}, {"X-Custom": "  a   b  "}):
        path, query, headers, body = botocore_signed(extra_headers=extra)
        assert check.verify("POST", path, query, headers, body).name == "client"
    path, query, headers, body = botocore_signed(path="/some%20path/x?b=2&a=1&a=0")
    assert check.verify("POST", path, query, headers, body).name == "client"


@pytest.mark.parametrize("change, reason", [
    (lambda h, b: (h, b + b" "), "bad-signature"),
    (lambda h, b: ({**h, "x-amz-target": "TrentService.Encrypt"}, b), "bad-signature"),
    (lambda h, b: ({k: v for k, v in h.items() if k != "authorization"}, b), "unsigned"),
    (lambda h, b: ({**h, "authorization": h["authorization"].replace("AKIDFACE", "AKIDOTHER")}, b),
     "unknown-access-key"),
])
def test_aws_face_sigv4_refuses_altered_requests(change, reason):
    path, query, headers, body = botocore_signed()
    headers, body = change(headers, body)
    with pytest.raises(ApiError) as refused:
        verifier().verify("POST", path, query, headers, body)
    assert refused.value.reason == reason
    assert SECRET not in str(refused.value)


def test_aws_face_sigv4_refuses_wrong_secret_region_service_and_clock():
    for kwargs, reason in (({"secret": "another-secret-0123456789"}, "bad-signature"),
                           ({"region": "us-east-1"}, "wrong-region"), ({"service": "s3"}, "wrong-service")):
        with pytest.raises(ApiError) as refused:
            verifier().verify("POST", *botocore_signed(**kwargs))
        assert refused.value.reason == reason
    signed = botocore_signed()
    for offset in (-301, 301):
        with pytest.raises(ApiError) as refused:
            verifier(clock=lambda: time.time() + offset).verify("POST", *signed)
        assert refused.value.reason == "expired"
    assert verifier(clock=lambda: time.time() + 290).verify("POST", *signed).name == "client"


def test_aws_face_sigv4_serves_repeats_as_aws_does():
    """botocore signs no nonce: a loop, a second process with the same credential and botocore's
    retries send the same signature again. AWS KMS serves them; so does the face (over TLS no one
    can capture a request, and the skew window bounds a captured one)."""
    check = verifier()
    signed = botocore_signed(b'{"a": 1}')
    for _ in range(500):
        assert check.verify("POST", *signed).name == "client"


def test_aws_face_sigv4_requires_target_and_content_type_signed():
    """A signature that leaves out X-Amz-Target (or Content-Type) would let the operation be
    swapped after signing (a GenerateDataKey turned into a DescribeKey): refused as malformed."""
    from pyiceberg_crypto.serve.aws.sigv4 import ALGORITHM, _sha256_hex, canonical_request, signing_key
    import hashlib
    import hmac

    path, query, headers, body = botocore_signed()
    stamp = headers["x-amz-date"]
    for signed in (["host", "x-amz-date"], ["host", "x-amz-date", "x-amz-target"],
                   ["content-type", "host", "x-amz-date"]):
        request = canonical_request("POST", path, query, headers, signed, body)
        scope = f"{stamp[:8]}/eu-west-1/kms/aws4_request"
        to_sign = "\n".join([ALGORITHM, stamp, scope, _sha256_hex(request.encode())])
        signature = hmac.new(signing_key(SECRET, stamp[:8], "eu-west-1", "kms"), to_sign.encode(),
                             hashlib.sha256).hexdigest()
        forged = dict(headers, authorization=f"{ALGORITHM} Credential=AKIDFACE/{scope}, "
                                             f"SignedHeaders={';'.join(signed)}, Signature={signature}")
        with pytest.raises(ApiError) as refused:
            verifier().verify("POST", path, query, forged, body)
        assert refused.value.reason == "malformed" and "x-amz-target" in str(refused.value)


def test_aws_face_credentials_file(tmp_path):
    path = tmp_path / "creds"
    path.write_text(f"[trino]\naws_access_key_id = AKIDTRINO\naws_secret_access_key = {SECRET}\n"
                    f"[spark]\naws_access_key_id = AKIDSPARK\naws_secret_access_key = {SECRET}x\n")
    path.chmod(0o600)
    loaded = load_credentials(path)
    assert sorted(loaded) == ["AKIDSPARK", "AKIDTRINO"] and loaded["AKIDTRINO"].name == "trino"
    assert SECRET not in repr(loaded)
    path.chmod(0o640)
    with pytest.raises(FileAccessError, match="readable by other users"):
        load_credentials(path)
    for text in ("[a]\naws_access_key_id = AKID\naws_secret_access_key = short\n", "no sections", "",
                 f"[a]\naws_access_key_id=X1\naws_secret_access_key={SECRET}\n[b]\naws_access_key_id=X1\n"
                 f"aws_secret_access_key={SECRET}\n"):
        path.write_text(text)
        path.chmod(0o600)
        with pytest.raises(InvalidArgumentError) as error:
            load_credentials(path)
        assert isinstance(error.value, PyicebergCryptoError) and SECRET not in str(error.value)


def test_aws_face_key_id_mapping():
    region, account = "eu-west-1", "123456789012"
    assert python_key_id("lake-key", region, account) == "lake-key"
    assert python_key_id("alias/lake-key", region, account) == "lake-key"
    assert python_key_id(f"arn:aws:kms:{region}:{account}:key/lake-key", region, account) == "lake-key"
    assert python_key_id(f"arn:aws:kms:{region}:{account}:alias/lake-key", region, account) == "lake-key"
    for other in (f"arn:aws:kms:us-east-1:{account}:key/lake-key", f"arn:aws:kms:{region}:999999999999:key/k",
                  f"arn:aws:s3:{region}:{account}:key/k", f"arn:aws:kms:{region}:{account}:grant/k", "arn:aws:kms"):
        with pytest.raises(ApiError) as error:
            python_key_id(other, region, account)
        assert error.value.code == "NotFoundException"


def test_aws_face_blob_is_self_describing_and_bound_to_its_key():
    kms = InMemoryKms.with_random_keys("k1", "k2")
    secret = os.urandom(32)
    blob = aws_face_blob.seal(kms, secret, "k1", {"t": "1"})
    assert aws_face_blob.parse(blob)[0] == "k1" and secret not in blob
    assert aws_face_blob.open_blob(kms, blob, None, {"t": "1"}) == ("k1", secret)
    with pytest.raises(KmsError) as refused:
        aws_face_blob.open_blob(kms, blob, "k2", {"t": "1"})
    assert refused.value.code == INCORRECT_KEY
    with pytest.raises(KmsError) as refused:
        aws_face_blob.open_blob(kms, blob, None, {"t": "2"})
    assert refused.value.code == INVALID_CIPHERTEXT

    # A KMS that unwraps anything under any key (no authentication of its own): the binding sealed
    # inside still refuses a blob whose header was edited to name another key.
    class Careless(InMemoryKms):
        def unwrap_key(self, wrapped, wrapping_key_id):
            return super().unwrap_key(wrapped, "k1")

    careless = Careless({"k1": os.urandom(16), "k2": os.urandom(16)})
    blob = aws_face_blob.seal(careless, secret, "k1")
    edited = blob.replace(b"\x00\x02k1", b"\x00\x02k2", 1)
    with pytest.raises(KmsError, match="not made with key id 'k2'") as refused:
        aws_face_blob.open_blob(careless, edited)
    assert refused.value.code == INVALID_CIPHERTEXT
    assert aws_face_blob.open_blob(careless, blob) == ("k1", secret)

    wrapper = aws_face_blob.FaceBlobKms(kms)  # the verifier's view of face-written tables
    assert wrapper.unwrap_key(wrapper.wrap_key(secret, "k2"), "k2") == secret
    assert wrapper.unwrap_key(kms.wrap_key(secret, "k2"), "k2") == secret  # raw bridge blobs too
    with pytest.raises(KmsError, match="raw blobs are refused"):
        aws_face_blob.FaceBlobKms(kms, accept_raw=False).unwrap_key(kms.wrap_key(secret, "k2"), "k2")


def test_aws_face_needs_tls_off_loopback():
    with pytest.raises(SetupError, match="needs TLS"):
        AwsKmsApi(ServedKms(lambda: None), credentials=PRINCIPALS, listen="0.0.0.0:0", allow_plaintext=True)
    with pytest.raises(SetupError, match="needs TLS"):
        AwsKmsApi(ServedKms(lambda: None), credentials=PRINCIPALS, listen="127.0.0.1:0")
    AwsKmsApi(ServedKms(lambda: None), credentials=PRINCIPALS, listen="127.0.0.1:0", allow_plaintext=True)  # not started


def test_the_faces_share_one_start_error_and_the_old_name_still_works_with_a_warning():
    from pyiceberg_crypto.serve import py4j
    from pyiceberg_crypto.serve.aws import http

    with pytest.warns(DeprecationWarning, match="KmsServiceError is deprecated: use pyiceberg_crypto.errors.SetupError"):
        assert py4j.KmsServiceError is SetupError
    with pytest.warns(DeprecationWarning, match="FaceStartError is deprecated: use pyiceberg_crypto.errors.SetupError"):
        assert http.FaceStartError is SetupError
    with pytest.raises(AttributeError):
        http.NoSuchName  # noqa: B018


def test_aws_face_x_amz_date_is_parsed_strictly():
    """parse_amz_date (what replaced strptime per request) agrees with strptime and refuses what it refused."""
    import calendar
    import time as _time

    from pyiceberg_crypto.serve.aws.sigv4 import parse_amz_date

    for stamp in ("20261127T081900Z", "20240229T235959Z", "19700101T000000Z"):
        assert parse_amz_date(stamp) == calendar.timegm(_time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    for stamp in ("20261301T000000Z", "20261127T250000Z", "20230229T000000Z", "2026-11-27T08:19:00Z",
                  "20261127T081900", "20261127T081900Z ", "\uff12\uff10\uff12\uff161127T081900Z", ""):
        with pytest.raises(ValueError):
            parse_amz_date(stamp)
