"""Issue 50 item 4: retire and revoke take effect in a running ``kms serve`` within seconds, without
a restart or SIGHUP, on both faces: a retired key version stops unwrapping (Trino only ever calls
Decrypt, so nothing else would make the service re-read its keystore), and a credentials section
removed from the AWS face's file is refused."""

from __future__ import annotations

import os
import time

import pytest

from pyiceberg_crypto.kms.keystore import KeystoreKms
from tests.serve.aws_face import CREDENTIALS, FaceProcess
from tests.serve.raw_client import RawClient
from tests.serve.service_process import make_keystore
from tests.testkit import eventually, load_factor

pytestmark = [pytest.mark.loopback]

SPARK_KEY_ID = "AKIDLAKESPARK0000001"
SPARK_SECRET = "spark-secret-0123456789abcdef"
TWO_CLIENTS = CREDENTIALS + f"[spark]\naws_access_key_id = {SPARK_KEY_ID}\naws_secret_access_key = {SPARK_SECRET}\n"


def _py4j_unwrap(face: FaceProcess, wrapped: bytes, key_id: str) -> bytes:
    """unwrapKey through the Py4J face of the same process (a raw client with the service's token)."""
    host, port = face.service.address.rsplit(":", 1)
    with RawClient(host, int(port)) as client:
        assert client.handshake(face.service.token_file.read_text().strip()) == b"!yv"
        return client.call("unwrapKey", wrapped, key_id)


def _write_private(path, text: str) -> None:
    """Replace the file atomically (what an operator's tooling does), mode 0600."""
    temporary = path.with_name(path.name + ".new")
    temporary.write_text(text)
    temporary.chmod(0o600)
    os.replace(temporary, path)


def test_revocation_a_retired_version_stops_unwrapping_at_once_on_both_faces(tmp_path):
    """Finding: right after ``keystore retire KEY 1`` a running service still unwrapped version-1
    blobs through the face (200 and the plaintext) until some wrap made it re-read the keystore.
    Now the next Decrypt (AWS face) and unwrapKey (Py4J face) are refused, with no wrap in between."""
    keystore = make_keystore(tmp_path / "keys.json", "k1")
    face = FaceProcess.start(tmp_path / "face", keystore)
    try:
        kms = face.client()
        secret = os.urandom(32)
        sealed_v1 = kms.encrypt(KeyId="k1", Plaintext=secret)["CiphertextBlob"]
        raw_v1 = KeystoreKms(keystore).wrap_key(secret[:16], "k1")  # a KEK the bridge wrote (Trino reads it)
        assert kms.decrypt(CiphertextBlob=sealed_v1)["Plaintext"] == secret
        assert kms.decrypt(CiphertextBlob=raw_v1, KeyId="k1")["Plaintext"] == secret[:16]
        assert RawClient.bytes_of(_py4j_unwrap(face, raw_v1, "k1")) == secret[:16]

        store = KeystoreKms(keystore)
        store.rotate_key("k1")
        raw_v2 = store.wrap_key(secret[16:], "k1")
        store.retire_version("k1", 1)  # what `pyiceberg-crypto keystore retire` does (after its checks)
        retired = time.monotonic()
        # Only unwraps from here on: nothing else would make the service look at its keystore.
        for blob, extra in ((sealed_v1, {}), (raw_v1, {"KeyId": "k1"})):
            with pytest.raises(kms.exceptions.ClientError) as refused:  # (another body than before the retire)
                kms.decrypt(CiphertextBlob=blob, EncryptionAlgorithm="SYMMETRIC_DEFAULT", **extra)
            assert refused.value.response["Error"]["Code"] in ("NotFoundException", "InvalidCiphertextException")
        assert _py4j_unwrap(face, raw_v1, "k1").startswith(b"!x")
        assert time.monotonic() - retired < 3 * load_factor()
        assert kms.decrypt(CiphertextBlob=raw_v2, KeyId="k1")["Plaintext"] == secret[16:]  # version 2 still opens
        assert RawClient.bytes_of(_py4j_unwrap(face, raw_v2, "k1")) == secret[16:]
        assert secret.hex() not in face.service.log()
    finally:
        face.stop()


def test_revocation_a_removed_credentials_section_is_refused_within_seconds(tmp_path):
    """Finding: the AWS face read its credentials file at start and on SIGHUP only, so a client
    whose section was removed kept its access. Now the file is followed: the removed client is
    refused within seconds (on a connection it already holds too), the others are untouched, and a
    broken file keeps the previous credentials."""
    keystore = make_keystore(tmp_path / "keys.json", "k1")
    face = FaceProcess.start(tmp_path / "face", keystore, credentials_text=TWO_CLIENTS)
    try:
        trino = face.client()
        spark = face.client(access_key_id=SPARK_KEY_ID, secret=SPARK_SECRET)
        blob = spark.encrypt(KeyId="k1", Plaintext=b"s" * 32)["CiphertextBlob"]
        assert spark.decrypt(CiphertextBlob=blob)["Plaintext"] == b"s" * 32  # its connection is now kept alive

        _write_private(face.credentials, CREDENTIALS)  # [spark] revoked; no restart, no SIGHUP
        revoked = time.monotonic()

        def spark_refused() -> bool:
            try:
                spark.decrypt(CiphertextBlob=blob)
            except spark.exceptions.ClientError as exc:
                return exc.response["Error"]["Code"] == "UnrecognizedClientException"
            return False

        eventually(spark_refused, 5, interval=0.1, message="the removed client refused")
        assert time.monotonic() - revoked < 3 * load_factor()
        assert trino.decrypt(CiphertextBlob=blob)["Plaintext"] == b"s" * 32

        # A file that does not load (mid-edit, wrong mode) keeps the credentials in force.
        (face.credentials).write_text("[trino]\naws_access_key_id = \n")

        def kept_after_a_look() -> bool:  # the face looks at the file on a request, every 0.5 s at most
            assert trino.decrypt(CiphertextBlob=blob)["Plaintext"] == b"s" * 32  # every call: still in force
            return "does not load, keeping the previous credentials" in face.service.log()

        eventually(kept_after_a_look, 10, interval=0.2, retry_on=(), message="the face reading the broken file")
        assert trino.decrypt(CiphertextBlob=blob)["Plaintext"] == b"s" * 32
        _write_private(face.credentials, TWO_CLIENTS)  # given back: in force again, still no restart
        eventually(lambda: spark.decrypt(CiphertextBlob=blob)["Plaintext"] == b"s" * 32, 10, interval=0.1,
                   message="the client given back")
        assert SPARK_SECRET not in face.service.log()
    finally:
        face.stop()


def test_revocation_a_revoked_py4j_token_is_refused_within_seconds(tmp_path):
    """Finding: the Py4J face's token could not be revoked short of a restart. SIGUSR2 now writes a
    fresh token: a connection that authenticated with the old one is closed, the old token is
    refused on a new connection, and a client that re-reads the token file gets in. The AWS face of
    the same process keeps serving."""
    import signal

    keystore = make_keystore(tmp_path / "keys.json", "k1")
    face = FaceProcess.start(tmp_path / "face", keystore)
    try:
        host, port = face.service.address.rsplit(":", 1)
        old_token = face.service.token_file.read_text().strip()
        wrapped = KeystoreKms(keystore).wrap_key(b"t" * 16, "k1")
        held = RawClient(host, int(port))
        assert held.handshake(old_token) == b"!yv"
        assert RawClient.bytes_of(held.call("unwrapKey", wrapped, "k1")) == b"t" * 16

        face.service.signal(signal.SIGUSR2)
        revoked = time.monotonic()
        new_token = eventually(lambda: (t := face.service.token_file.read_text().strip()) != old_token and t, 5,
                               interval=0.05, message="a new token in the token file")

        def held_refused() -> bool:
            try:
                reply = held.call("unwrapKey", wrapped, "k1")
            except OSError:
                return True
            return not reply.startswith(b"!yj")

        eventually(held_refused, 5, interval=0.1, message="the connection holding the old token closed")
        with RawClient(host, int(port)) as again:
            assert again.handshake(old_token) != b"!yv"
        assert time.monotonic() - revoked < 4 * load_factor()
        with RawClient(host, int(port)) as fresh:
            assert fresh.handshake(new_token) == b"!yv"
            assert RawClient.bytes_of(fresh.call("unwrapKey", wrapped, "k1")) == b"t" * 16
        held.close()
        assert face.client().decrypt(CiphertextBlob=wrapped, KeyId="k1")["Plaintext"] == b"t" * 16
        log = face.service.log()
        assert "revoked its token" in log and old_token not in log and new_token not in log
    finally:
        face.stop()
