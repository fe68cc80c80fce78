"""A KMS client for AWS Key Management Service (boto3; ``pip install 'pyiceberg-crypto[aws]'``).

    from pyiceberg_crypto.kms import AwsKms
    kms = AwsKms(region="eu-west-1")                 # credentials: boto3's usual chain
    register_kms(spark, kms)  # tables: TBLPROPERTIES ('encryption.key-id'='alias/lake-orders')

- wrap = KMS ``Encrypt`` of the key under the master key ``wrapping_key_id`` (a key id, key ARN,
  alias name or alias ARN), with an **encryption context** that names the key use
  (:data:`DEFAULT_ENCRYPTION_CONTEXT`): a ciphertext made for another purpose with the same AWS
  key does not decrypt here, and CloudTrail records the purpose of every call.
- unwrap = KMS ``Decrypt`` with ``KeyId`` and the same context; the ``KeyId`` KMS reports back must
  be the ARN of ``wrapping_key_id`` (aliases are resolved once with ``DescribeKey``).
- :meth:`AwsKms.generate_key` = ``GenerateDataKey`` (``supports_key_generation()`` is True).

Settings come from properties (the names Iceberg's ``AwsKeyManagementClient`` uses where it has
one: ``client.region``, ``kms.endpoint``, ...) or from the environment, never from code you have to
print. Iceberg's Java client calls Encrypt/Decrypt **without** an encryption context, and AWS binds
the context into the ciphertext: set ``kms.encryption-context=none``
(``AwsKms(encryption_context=None)``) on tables that Java's client must also read.

Every setting, IAM, interoperability and errors: docs/kms/aws.md.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from pyiceberg_crypto.kms.base import KeyGenerationResult, KeyManagementClient, KmsError, UnknownKeyError

__all__ = ["AwsKms"]

#: The encryption context sent with every Encrypt/Decrypt/GenerateDataKey unless configured.
DEFAULT_ENCRYPTION_CONTEXT: Mapping[str, str] = {"pyiceberg-crypto:key-use": "iceberg-table-key-wrap"}
VALID_DATA_KEY_SPECS = ("AES_256", "AES_128")
_UNSET: Any = object()
#: Signed into every request (see :func:`_sign_a_nonce`).
NONCE_HEADER = "X-Pyiceberg-Crypto-Nonce"

REGION_PROPERTY = "client.region"
PROFILE_PROPERTY = "client.profile"
ENDPOINT_PROPERTY = "kms.endpoint"
ACCESS_KEY_PROPERTY = "kms.access-key-id"
SECRET_KEY_PROPERTY = "kms.secret-access-key"
SESSION_TOKEN_PROPERTY = "kms.session-token"
ENCRYPTION_CONTEXT_PROPERTY = "kms.encryption-context"
DATA_KEY_SPEC_PROPERTY = "kms.data-key-spec"
ALGORITHM_PROPERTY = "kms.encryption-algorithm-spec"


class AwsKms(KeyManagementClient):
    """AWS KMS through one thread-safe boto3 client. ``repr`` shows region and endpoint only.

    Args:
        region: AWS region (default: from the environment or profile).
        endpoint_url: KMS endpoint (default: AWS's, or ``AWS_ENDPOINT_URL_KMS``).
        encryption_context: sent with every call; ``None`` for none (Iceberg Java's behaviour).
        data_key_spec: ``AES_256`` or ``AES_128`` for :meth:`generate_key`.
        encryption_algorithm: ``EncryptionAlgorithm`` of Encrypt/Decrypt.
        access_key_id, secret_access_key, session_token, profile: credentials; default is
            boto3's chain. They are handed to boto3 and not kept on this object.
    """

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        encryption_context: Mapping[str, str] | None = _UNSET,
        data_key_spec: str = "AES_256",
        encryption_algorithm: str = "SYMMETRIC_DEFAULT",
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        profile: str | None = None,
    ):
        try:
            import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError
        except ImportError:
            raise KmsError(
                "the AWS KMS client needs boto3: pip install 'pyiceberg-crypto[aws]'"
            ) from None
        if data_key_spec not in VALID_DATA_KEY_SPECS:
            raise KmsError(f"data key spec must be one of {VALID_DATA_KEY_SPECS}, got {data_key_spec!r}")
        if (access_key_id is None) != (secret_access_key is None):
            raise KmsError("give both an access key id and a secret access key, or neither")
        if encryption_context is _UNSET:
            encryption_context = DEFAULT_ENCRYPTION_CONTEXT
        self.encryption_context: dict[str, str] = dict(encryption_context or {})
        self.data_key_spec = data_key_spec
        self.encryption_algorithm = encryption_algorithm
        region = region or os.environ.get("AWS_REGION") or None
        config = Config(connect_timeout=10, read_timeout=30, retries={"mode": "standard", "max_attempts": 3})
        try:
            session = boto3.session.Session(
                aws_access_key_id=access_key_id,
                aws_secret_access_key=secret_access_key,
                aws_session_token=session_token,
                region_name=region,
                profile_name=profile,
            )
            self._client = session.client("kms", endpoint_url=endpoint_url, config=config)
            self._client.meta.events.register("before-sign.kms", _sign_a_nonce)
        except BotoCoreError as exc:  # no region, unknown profile, bad endpoint URL
            raise KmsError(
                f"cannot create the AWS KMS client: {type(exc).__name__}: {exc} "
                f"(set {REGION_PROPERTY} / AWS_REGION, {ENDPOINT_PROPERTY}, {PROFILE_PROPERTY})"
            ) from None
        self.region = self._client.meta.region_name
        self.endpoint_url = self._client.meta.endpoint_url
        self._arns: dict[str, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> AwsKms:
        """Build from string properties (see the module docs for the names)."""
        props = dict(properties)
        context = _parse_context(props.get(ENCRYPTION_CONTEXT_PROPERTY))
        return cls(
            region=props.get(REGION_PROPERTY),
            endpoint_url=props.get(ENDPOINT_PROPERTY),
            encryption_context=context,
            data_key_spec=props.get(DATA_KEY_SPEC_PROPERTY, "AES_256"),
            encryption_algorithm=props.get(ALGORITHM_PROPERTY, "SYMMETRIC_DEFAULT"),
            access_key_id=props.get(ACCESS_KEY_PROPERTY),
            secret_access_key=props.get(SECRET_KEY_PROPERTY),
            session_token=props.get(SESSION_TOKEN_PROPERTY),
            profile=props.get(PROFILE_PROPERTY),
        )

    # --- KeyManagementClient ------------------------------------------------------------------

    def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes:
        response = self._call(
            "Encrypt", wrapping_key_id, KeyId=wrapping_key_id, Plaintext=bytes(key), **self._crypto_parameters()
        )
        return response["CiphertextBlob"]

    def unwrap_key(self, wrapped: bytes, wrapping_key_id: str) -> bytes:
        response = self._call(
            "Decrypt", wrapping_key_id, KeyId=wrapping_key_id, CiphertextBlob=bytes(wrapped), **self._crypto_parameters()
        )
        reported = response.get("KeyId", "")
        if reported != self._key_arn(wrapping_key_id) and reported != self._key_arn(wrapping_key_id, refresh=True):
            raise KmsError(
                f"AWS KMS Decrypt for key id {wrapping_key_id!r} reports key {reported!r}, "
                "which is not that key: refusing the unwrapped key"
            )
        return response["Plaintext"]

    def key_version(self, wrapped: bytes, wrapping_key_id: str) -> str | None:
        """The ARN of the KMS key that made ``wrapped`` (from a Decrypt call: AWS keeps the key's
        rotated backing material itself, so the key ARN is the version that matters)."""
        response = self._call("Decrypt", wrapping_key_id, CiphertextBlob=bytes(wrapped), **self._crypto_parameters())
        return response.get("KeyId")

    def unwrap_key_version(self, wrapped: bytes, wrapping_key_id: str, version: str | None) -> bytes:
        """After an alias moved to another KMS key, unwrap with the key that made the blob (its ARN)."""
        if version and version.startswith("arn:") and ":key/" in version:
            return self.unwrap_key(wrapped, version)
        return self.unwrap_key(wrapped, wrapping_key_id)

    def current_key_version(self, wrapping_key_id: str) -> str | None:
        """The ARN ``wrapping_key_id`` (an alias, say) names now: Encrypt uses that key."""
        return self._key_arn(wrapping_key_id, refresh=True)

    def supports_key_generation(self) -> bool:
        return True

    def generate_key(self, wrapping_key_id: str) -> KeyGenerationResult:
        parameters = self._crypto_parameters()
        parameters.pop("EncryptionAlgorithm")  # GenerateDataKey always uses SYMMETRIC_DEFAULT
        response = self._call(
            "GenerateDataKey", wrapping_key_id, KeyId=wrapping_key_id, KeySpec=self.data_key_spec, **parameters
        )
        return KeyGenerationResult(key=response["Plaintext"], wrapped_key=response["CiphertextBlob"])

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"AwsKms(region={self.region!r}, endpoint={self.endpoint_url!r})"

    # --- internals ----------------------------------------------------------------------------

    def _crypto_parameters(self) -> dict[str, Any]:
        """EncryptionAlgorithm and (unless disabled) EncryptionContext of every KMS request."""
        request: dict[str, Any] = {"EncryptionAlgorithm": self.encryption_algorithm}
        if self.encryption_context:
            request["EncryptionContext"] = dict(self.encryption_context)
        return request

    def _key_arn(self, key_id: str, *, refresh: bool = False) -> str:
        """The key ARN of a key id, key ARN, alias or alias ARN (cached; aliases can move)."""
        if key_id.startswith("arn:") and ":key/" in key_id:
            return key_id
        with self._lock:
            cached = self._arns.get(key_id)
        if cached is not None and not refresh:
            return cached
        arn = self._call("DescribeKey", key_id, KeyId=key_id)["KeyMetadata"]["Arn"]
        with self._lock:
            self._arns[key_id] = arn
        return arn

    def _call(self, operation: str, key_id: str, **request: Any) -> dict[str, Any]:
        from botocore.exceptions import BotoCoreError, ClientError

        method = getattr(self._client, _snake(operation))
        try:
            return method(**request)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = error.get("Code", "ClientError")
            reason = f"{code}: {error.get('Message', '')}".rstrip(": ")
            if code == "InvalidCiphertextException" and operation == "Decrypt":
                reason += (
                    " (wrong key, tampered wrapped key, or another encryption context: keys wrapped"
                    " by Iceberg's Java AwsKeyManagementClient have none, set kms.encryption-context=none)"
                )
            error_type = UnknownKeyError if code in ("NotFoundException",) else KmsError
            raise error_type(f"AWS KMS {operation} with key id {key_id!r} failed: {reason}") from None
        except BotoCoreError as exc:  # no credentials, endpoint unreachable, timeouts
            raise KmsError(
                f"AWS KMS {operation} with key id {key_id!r} failed: {type(exc).__name__}: {exc}"
            ) from None


def _sign_a_nonce(request, **_kwargs) -> None:
    """A random signed header per request (and per retry): botocore signs no nonce of its own, so
    two identical calls in the same second would carry the same signature, which a server that
    refuses replays would refuse (pyiceberg-crypto's AWS KMS face serves them, as AWS does). AWS
    KMS ignores the header."""
    request.headers[NONCE_HEADER] = secrets.token_hex(16)


def aws_kms(properties: Mapping[str, str] | None = None) -> AwsKms:
    """Factory for ``load_kms("aws", properties)``: :meth:`AwsKms.from_properties`."""
    return AwsKms.from_properties(properties or {})


def _parse_context(text: str | None) -> Mapping[str, str] | None:
    if text is None:
        return _UNSET
    if text.strip().lower() == "none":
        return None
    try:
        context = json.loads(text)
    except json.JSONDecodeError:
        context = None
    if not isinstance(context, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in context.items()):
        raise KmsError(
            f"{ENCRYPTION_CONTEXT_PROPERTY} must be a JSON object of strings, e.g. "
            '{"purpose": "lake"}, or "none"'
        )
    return context


def _snake(operation: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in operation).lstrip("_")
