"""How the AWS KMS face names keys: an AWS-style ``KeyId`` to the Python KMS's key id, and back.

    python_key_id("alias/orders-key", "us-east-1", "000000000000")                         # "orders-key"
    python_key_id("arn:aws:kms:us-east-1:000000000000:key/orders-key", "us-east-1", "000000000000")
    key_arn("orders-key", "us-east-1", "000000000000")   # "arn:aws:kms:us-east-1:000000000000:key/orders-key"

The Python KMS's key id as is; ``alias/NAME``, ``arn:aws:kms:REGION:ACCOUNT:alias/NAME`` and
``arn:aws:kms:REGION:ACCOUNT:key/NAME`` all mean the Python KMS's key ``NAME`` (an ARN must name
this face's region and account; anything else is an AWS ``NotFoundException``). The parsing is
shared with every key command: :mod:`pyiceberg_crypto.kms.key_ids`.
"""

from __future__ import annotations

from pyiceberg_crypto.errors import ApiError, InvalidArgumentError
from pyiceberg_crypto.kms.key_ids import aws_key_name

__all__ = ["key_arn", "python_key_id"]


def python_key_id(key_id: str, region: str, account: str) -> str:
    """The Python KMS's key id that an AWS-style ``KeyId`` names (see module doc): the parsing is
    :func:`pyiceberg_crypto.kms.key_ids.aws_key_name` (the mapping every key command shares); an
    ARN must also name this face's region and account."""
    try:
        parsed = aws_key_name(key_id)
    except InvalidArgumentError:
        raise ApiError("NotFoundException", "the KeyId ARN is not a KMS key or alias ARN" if key_id.startswith("arn:")
                       else "the KeyId alias has no name (alias/NAME)") from None
    if parsed.region is not None and (parsed.region != region or parsed.account != account):
        raise ApiError("NotFoundException", f"the KeyId ARN names another region or account than this "
                                             f"endpoint's ({region}, {account})")
    return parsed.name


def key_arn(name: str, region: str, account: str) -> str:
    return f"arn:aws:kms:{region}:{account}:key/{name}"
