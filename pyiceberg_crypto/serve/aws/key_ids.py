"""How the AWS KMS face names keys: an AWS-style ``KeyId`` to the Python KMS's key id, and back.

    python_key_id("alias/orders-key", "us-east-1", "000000000000")                         # "orders-key"
    python_key_id("arn:aws:kms:us-east-1:000000000000:key/orders-key", "us-east-1", "000000000000")
    key_arn("orders-key", "us-east-1", "000000000000")   # "arn:aws:kms:us-east-1:000000000000:key/orders-key"

The Python KMS's key id as is; ``alias/NAME``, ``arn:aws:kms:REGION:ACCOUNT:alias/NAME`` and
``arn:aws:kms:REGION:ACCOUNT:key/NAME`` all mean the Python KMS's key ``NAME`` (an ARN must name
this face's region and account; anything else is an AWS ``NotFoundException``).
"""

from __future__ import annotations

from pyiceberg_crypto.serve.aws.http import ApiError

__all__ = ["key_arn", "python_key_id"]


def python_key_id(key_id: str, region: str, account: str) -> str:
    """The Python KMS's key id that an AWS-style ``KeyId`` names (see module doc)."""
    if key_id.startswith("arn:"):
        parts = key_id.split(":", 5)
        if len(parts) != 6 or parts[2] != "kms" or "/" not in parts[5]:
            raise ApiError("NotFoundException", "the KeyId ARN is not a KMS key or alias ARN")
        if parts[3] != region or parts[4] != account:
            raise ApiError("NotFoundException", f"the KeyId ARN names another region or account than this "
                                                 f"endpoint's ({region}, {account})")
        kind, _, name = parts[5].partition("/")
        if kind not in ("key", "alias") or not name:
            raise ApiError("NotFoundException", "the KeyId ARN is not a KMS key or alias ARN")
        return name
    if key_id.startswith("alias/"):
        return key_id[len("alias/"):]
    return key_id


def key_arn(name: str, region: str, account: str) -> str:
    return f"arn:aws:kms:{region}:{account}:key/{name}"
