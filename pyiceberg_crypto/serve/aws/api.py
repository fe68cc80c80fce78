"""An AWS-KMS-compatible face for any Python KMS: the AWS KMS JSON 1.1 API (``TrentService.*``)
over HTTPS with SigV4, so that clients that only speak AWS KMS (Trino's Iceberg connector, Iceberg's
``org.apache.iceberg.aws.AwsKeyManagementClient``, boto3) use keys from a keystore, Vault/OpenBao,
KMIP or your own ``wrap_key``/``unwrap_key``.

    served = ServedKms(lambda: my_kms).start()
    face = AwsKmsApi(served, credentials=load_credentials("/etc/lake/aws-kms-api.credentials"),
                     listen="127.0.0.1:9602", tls=FaceTls.load_or_create("/etc/lake/aws-kms-api-tls"))
    face.start()      # clients: AWS_ENDPOINT_URL_KMS=https://127.0.0.1:9602, trust face.tls.ca_file
    face.close()

The command line is ``pyiceberg-crypto kms serve ... --aws-kms-api [HOST:]PORT`` (beside the Py4J face).
It serves ``Encrypt`` (Iceberg's ``wrapKey``; a self-describing blob), ``Decrypt`` (``unwrapKey``;
face blobs and raw Python-KMS blobs), ``GenerateDataKey`` and ``DescribeKey``. Key ids are the
Python KMS's, also as ``alias/NAME`` or a key or alias ARN of this face's region and account.

Rooms: the HTTP listener and its bounds (:mod:`.http`), SigV4 (:mod:`.sigv4`), key ids
(:mod:`.key_ids`), TLS and its CA (:mod:`.tls`), the blob format
(:mod:`pyiceberg_crypto.kms.aws_face_blob`); this module is the API itself. Nothing logged, counted
or answered carries key bytes, secrets or signatures.

The bounds, why repeated signatures are served and how raw blobs keep the context binding:
docs/how-to/trino.md#1-serve-the-kms-with-the-aws-face; what each operation takes and the key ids:
docs/how-to/trino.md#3-which-tables-read.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from pyiceberg_crypto._net import is_loopback_host, parse_listen
from pyiceberg_crypto._prometheus import counter, gauge, histogram, render
from pyiceberg_crypto._prometheus import LATENCY_BUCKETS
from pyiceberg_crypto.errors import InvalidArgumentError, SetupError
from pyiceberg_crypto.listener.sockets import LOOPBACK
from pyiceberg_crypto.kms import aws_face_blob
from pyiceberg_crypto.kms.base import KMS_INTERNAL, KeyManagementClient, KmsError, UnknownKeyError
from pyiceberg_crypto.kms.bounded import KmsCallPool, KmsTimeoutError
from pyiceberg_crypto.serve.aws.http import (
    CONTENT_TYPE,
    REFUSAL_REASONS,
    ApiError,
    FaceLimits,
    JsonHttpListener,
)
from pyiceberg_crypto.serve.aws.key_ids import key_arn, python_key_id
from pyiceberg_crypto.serve.aws.sigv4 import Principal, SigV4Verifier
from pyiceberg_crypto.serve.aws.tls import FaceTls
from pyiceberg_crypto.serve.served_kms import ServedKms

__all__ = ["DEFAULT_ACCOUNT", "OPERATIONS", "AwsKmsApi"]

log = logging.getLogger(__name__)

OPERATIONS = ("Encrypt", "Decrypt", "GenerateDataKey", "DescribeKey")
DEFAULT_ACCOUNT = "000000000000"
MAX_PLAINTEXT_BYTES = 4096  # AWS KMS's own limit for Encrypt
DATA_KEY_SPECS = {"AES_256": 32, "AES_128": 16}
#: The policy's name of each operation (:mod:`pyiceberg_crypto.serve.policy`).
GRANT_OPERATIONS = {"Encrypt": "wrap", "Decrypt": "unwrap", "GenerateDataKey": "generate", "DescribeKey": "describe"}
METRICS_PREFIX = "pyiceberg_crypto_aws_kms_api"


class AwsKmsApi(JsonHttpListener):
    """The AWS KMS JSON 1.1 face of the served KMS (see module doc), an equal of the Py4J face.

    Args:
        served: the KMS served (started by :meth:`start` if it is not yet).
        credentials: the access keys clients sign with (:func:`~pyiceberg_crypto.serve.aws.sigv4.load_credentials`).
        pool: the threads the KMS calls run on (None: a thread per call).
        listen: ``HOST:PORT``. region, account: what clients sign for and ARNs name.
        tls: the face's TLS identity (:class:`~pyiceberg_crypto.serve.aws.tls.FaceTls`); None only with
            ``allow_plaintext`` on a loopback address. limits: :class:`~pyiceberg_crypto.serve.aws.http.FaceLimits`.
        accept_raw_blobs: Decrypt raw Python-KMS wrapped keys too (tables written through the Py4J face).
    """

    def __init__(self, served: ServedKms, *, credentials: Mapping[str, Principal], pool: KmsCallPool | None = None,
                 listen: str = f"{LOOPBACK}:0", region: str = "us-east-1", account: str = DEFAULT_ACCOUNT,
                 tls: FaceTls | None = None, allow_plaintext: bool = False, limits: FaceLimits | None = None,
                 accept_raw_blobs: bool = True, max_skew: float = 300.0, clock: Callable[[], float] = time.time):
        host, port = parse_listen(listen, "the AWS KMS face's listen address")
        if tls is None and not (allow_plaintext and is_loopback_host(host)):
            raise SetupError("the AWS KMS face needs TLS (plain HTTP only on a loopback address, when asked for)")
        if not account.isdigit() or len(account) != 12:
            raise InvalidArgumentError("account must be 12 digits")
        super().__init__(host, port, tls=tls, limits=limits or FaceLimits(), name="aws-kms-api")
        self.served = served
        self.pool = pool  # the KMS calls' threads (None: a thread per call)
        self.verifier = SigV4Verifier(credentials, region=region, service="kms", max_skew=max_skew, clock=clock)
        self.region, self.account = region, account
        self.accept_raw_blobs = accept_raw_blobs

    def start(self) -> AwsKmsApi:
        """Start the served KMS if need be, then listen. Raises :class:`~pyiceberg_crypto.errors.SetupError`."""
        self.served.start()
        super().start()
        log.info("AWS KMS face listening on %s (%s, region %s)", self.endpoint, "TLS" if self.tls else "plain HTTP",
                 self.region)
        return self

    def operation_label(self, operation: str) -> str:
        return operation if operation in OPERATIONS else "other"

    # --- requests -----------------------------------------------------------------------------

    def handle(self, peer: str, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes,
                operation: str) -> dict[str, Any]:
        if method != "POST":
            raise ApiError("UnknownOperationException", "only POST is served", reason="bad-request")
        try:
            principal = self.verifier.verify(method, path, query, headers, body)
        except ApiError as exc:  # a request the verifier does not believe (its reason: a refusal label)
            self._refused(peer, exc.reason)
            raise
        try:
            return self._handle_signed(principal, peer, headers, body, operation)
        except ApiError as exc:
            if not getattr(exc, "recorded", False):  # refused before the served KMS saw it: recorded here
                self.served.record_refused("aws", f"aws:{principal.name}", peer,
                                           GRANT_OPERATIONS.get(operation, "other"), getattr(exc, "key_id", None),
                                           exc.code)
            raise

    def _handle_signed(self, principal: Principal, peer: str, headers: Mapping[str, str], body: bytes,
                       operation: str) -> dict[str, Any]:
        """A request of an authenticated principal (every ApiError raised before the served KMS
        recorded it is recorded by :meth:`handle`)."""
        if not headers.get("content-type", "").startswith(CONTENT_TYPE):
            raise ApiError("SerializationException", f"Content-Type must be {CONTENT_TYPE}")
        if operation not in OPERATIONS:
            raise ApiError("UnknownOperationException",
                            f"this KMS face serves {', '.join(OPERATIONS)} (X-Amz-Target TrentService.*)")
        try:
            request = json.loads(body or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise ApiError("SerializationException", "the body is not JSON") from None
        if not isinstance(request, dict):
            raise ApiError("SerializationException", "the body is not a JSON object")
        kms = self.served.client(self.pool)
        try:
            key_id = self._grant_key(operation, request)
        except ApiError as exc:
            exc.key_id = request.get("KeyId")
            raise
        context = request.get("EncryptionContext") if isinstance(request.get("EncryptionContext"), dict) else None
        table = context.get("table") if context and isinstance(context.get("table"), str) else None
        try:
            return self._perform(kms, principal, peer, operation, request, key_id, context, table)
        except ApiError as exc:
            exc.recorded = True  # its line is written (perform records every outcome)
            raise

    def _perform(self, kms, principal: Principal, peer: str, operation: str, request: Mapping[str, Any],
                 key_id: str | None, context: dict | None, table: str | None) -> dict[str, Any]:
        try:
            return self.served.perform(
                "aws", f"aws:{principal.name}", peer, GRANT_OPERATIONS[operation], key_id,
                lambda: getattr(self, f"_op_{operation}")(kms, request), table=table, context=context,
                version=lambda answer: self._version(answer, request, key_id))
        except ApiError:
            raise
        except KmsError as exc:
            if exc.code is not None:  # a kind AWS names (access denied, incorrect key, invalid ciphertext, the
                # audit trail refusing): its message is made to be told to the client
                raise ApiError(exc.code, str(exc), 500 if exc.code == KMS_INTERNAL else 400) from None
            if isinstance(exc, UnknownKeyError):
                raise ApiError("NotFoundException", "the key id is not known to this KMS") from None
            self._warn("kms", "AWS KMS face: %s for %s failed: %s", operation, principal.name, exc)
            raise ApiError("KMSInternalException", "the KMS behind this endpoint failed (its log has the detail)",
                            500) from None
        except KmsTimeoutError:
            self._warn("timeout", "AWS KMS face: %s for %s timed out in the Python KMS", operation, principal.name)
            raise ApiError("DependencyTimeoutException", "the KMS behind this endpoint timed out", 503) from None
        except Exception as exc:  # a third-party KMS's own error: its type only
            self._warn("kms", "AWS KMS face: %s for %s failed: %s", operation, principal.name, type(exc).__name__)
            raise ApiError("KMSInternalException", "the KMS behind this endpoint failed (its log has the detail)",
                            500) from None

    def _grant_key(self, operation: str, request: Mapping[str, Any]) -> str | None:
        """The key the operation uses, as its grant is checked: the KeyId, or a Decrypt blob's own key."""
        if operation != "Decrypt" or request.get("KeyId") is not None:
            return self._key(request)
        try:
            return aws_face_blob.parse(base64.b64decode(request.get("CiphertextBlob") or "", validate=True))[0]
        except (KmsError, binascii.Error, ValueError, TypeError):
            return None

    def _version(self, answer: Mapping[str, Any], request: Mapping[str, Any], key_id: str | None) -> str | None:
        """The key version behind the operation's blob, where the Python KMS can tell (for the audit)."""
        blob = answer.get("CiphertextBlob") or request.get("CiphertextBlob")
        if not isinstance(blob, str) or key_id is None:
            return None
        data = base64.b64decode(blob)
        if aws_face_blob.is_face_blob(data):
            data = aws_face_blob.parse(data)[1]
        return self.served.key_version(data, key_id)

    def _key(self, request: Mapping[str, Any], required: bool = True) -> str | None:
        key_id = request.get("KeyId")
        if key_id is None and not required:
            return None
        if not isinstance(key_id, str) or not 1 <= len(key_id) <= 2048:
            raise ApiError("ValidationException", "KeyId must be a string of 1 to 2048 characters")
        return python_key_id(key_id, self.region, self.account)

    def _context(self, request: Mapping[str, Any]) -> dict[str, str]:
        context = request.get("EncryptionContext") or {}
        if not isinstance(context, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in context.items()):
            raise ApiError("ValidationException", "EncryptionContext must be a map of strings")
        return context

    @staticmethod
    def _algorithm(request: Mapping[str, Any]) -> None:
        if request.get("EncryptionAlgorithm", "SYMMETRIC_DEFAULT") != "SYMMETRIC_DEFAULT":
            raise ApiError("InvalidKeyUsageException", "this KMS face serves symmetric keys: "
                                                        "EncryptionAlgorithm must be SYMMETRIC_DEFAULT")

    def _arn(self, name: str) -> str:
        return key_arn(name, self.region, self.account)

    def _op_Encrypt(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request)
        self._algorithm(request)
        plaintext = _blob(request, "Plaintext", MAX_PLAINTEXT_BYTES)
        blob = aws_face_blob.seal(kms, plaintext, name, self._context(request))
        return {"CiphertextBlob": _b64(blob), "KeyId": self._arn(name), "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}

    def _op_Decrypt(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request, required=False)
        self._algorithm(request)
        blob = _blob(request, "CiphertextBlob", aws_face_blob.MAX_INNER_BYTES)
        made_by, plaintext = aws_face_blob.open_blob(kms, blob, name, self._context(request),
                                                     accept_raw=self.accept_raw_blobs)
        return {"KeyId": self._arn(made_by), "Plaintext": _b64(plaintext), "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}

    def _op_GenerateDataKey(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request)
        spec, count = request.get("KeySpec"), request.get("NumberOfBytes")
        if (spec is None) == (count is None):
            raise ApiError("ValidationException", "give exactly one of KeySpec and NumberOfBytes")
        if spec is not None:
            if spec not in DATA_KEY_SPECS:
                raise ApiError("ValidationException", f"KeySpec must be one of {', '.join(DATA_KEY_SPECS)}")
            count = DATA_KEY_SPECS[spec]
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 1024:
            raise ApiError("ValidationException", "NumberOfBytes must be 1 to 1024")
        plaintext = secrets.token_bytes(count)
        blob = aws_face_blob.seal(kms, plaintext, name, self._context(request))
        return {"CiphertextBlob": _b64(blob), "Plaintext": _b64(plaintext), "KeyId": self._arn(name)}

    def _op_DescribeKey(self, kms: KeyManagementClient, request: Mapping[str, Any]) -> dict[str, Any]:
        name = self._key(request)
        kms.wrap_key(secrets.token_bytes(32), name)  # the Python KMS's only way to say it knows the key
        return {"KeyMetadata": {
            "AWSAccountId": self.account, "KeyId": name, "Arn": self._arn(name), "Enabled": True,
            "KeyState": "Enabled", "KeyUsage": "ENCRYPT_DECRYPT", "KeySpec": "SYMMETRIC_DEFAULT",
            "CustomerMasterKeySpec": "SYMMETRIC_DEFAULT", "EncryptionAlgorithms": ["SYMMETRIC_DEFAULT"],
            "Origin": "EXTERNAL", "KeyManager": "CUSTOMER", "MultiRegion": False,
            "Description": "a key of the Python KMS behind pyiceberg-crypto's AWS KMS face"}}

    def render_metrics(self) -> str:
        """Prometheus text of the face (beside the Py4J face's on ``kms serve --metrics``); fixed labels only."""
        p = METRICS_PREFIX
        with self.stats.lock:
            requests = dict(self.stats.requests)
            refused = dict(self.stats.refused)
            durations = {k: list(v) for k, v in self.stats.duration.items()}
            sums = dict(self.stats.duration_sum)
        return render([
            counter(f"{p}_requests_total", "Requests answered, per operation and result (ok or the AWS error type).",
                    dict(sorted(requests.items())), ("operation", "result")),
            counter(f"{p}_refused_total", "Requests and connections refused, per reason.",
                    {(reason,): refused.get(reason, 0) for reason in REFUSAL_REASONS}, ("reason",)),
            histogram(f"{p}_request_duration_seconds", "Time to answer a request, per operation.", "operation",
                      {operation: (LATENCY_BUCKETS, buckets, sums.get(operation, 0.0))
                       for operation, buckets in sorted(durations.items())}),
            gauge(f"{p}_open_connections", "Open connections.", {(): self.open_connections()}),
            gauge(f"{p}_unsigned_connections", "Open connections that have not sent a validly signed request yet.",
                  {(): self.unsigned_connections()}),
            gauge(f"{p}_silent_connections", "Unsigned connections that have not sent a byte of their request "
                  "(the ones a newcomer at a cap may evict).", {(): self.silent_connections()}),
            gauge(f"{p}_max_connections", "The configured cap.", {(): self.limits.max_connections}),
            gauge(f"{p}_up", "1 while the face accepts connections.", {(): self.accepting}),
        ])


def _blob(request: Mapping[str, Any], field: str, limit: int) -> bytes:
    value = request.get(field)
    if not isinstance(value, str):
        raise ApiError("ValidationException", f"{field} is required (base64)")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError("ValidationException", f"{field} is not base64") from None
    if not 1 <= len(data) <= limit:
        raise ApiError("ValidationException", f"{field} must be 1 to {limit} bytes")
    return data


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode()
