"""One canonical key id: the AWS-style names of a Python KMS's key (``alias/NAME`` and the key and
alias ARNs) to the Python KMS's own key id ``NAME``.

    canonical_key_id("orders-key")                                             # "orders-key"
    canonical_key_id("alias/orders-key")                                       # "orders-key"
    canonical_key_id("arn:aws:kms:eu-west-1:000000000000:alias/orders-key")    # "orders-key"
    canonical_key_id("arn:aws:kms:eu-west-1:000000000000:key/orders-key")      # "orders-key"
    aws_key_name("arn:aws:kms:eu-west-1:000000000000:key/orders-key")
        # AwsKeyName(name="orders-key", kind="key", region="eu-west-1", account="000000000000")

The AWS KMS face (``kms serve --aws-kms-api``) accepts all four spellings as a table's
``encryption.key-id``, so one Python KMS key may appear under several names in a lake. Every
command that matches a table's key id with a key (``keys where-used``, ``keystore retire``,
``keys rewrap``, ``keys prune``, the key inventory, the audit) compares canonical ids, so a table
keyed ``alias/orders-key`` is found by ``orders-key``. The mapping is the Python KMS's, asked
through :meth:`KeyManagementClient.canonical_key_id <pyiceberg_crypto.kms.KeyManagementClient.canonical_key_id>`:
the shipped KMSs the face may serve map with :func:`canonical_key_id`;
:class:`~pyiceberg_crypto.kms.AwsKms` and a user's own KMS keep the id as is (for real AWS KMS an
alias and a key ARN are different names). An ARN's region and account are not checked here, so a
check errs towards "needed", never towards "unused".

Which KMSs map, and why: docs/how-to/trino.md#3-which-tables-read (its "Key ids").
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg_crypto.errors import InvalidArgumentError

__all__ = ["ALIAS_PREFIX", "AwsKeyName", "KeyIdError", "PlainKeyIds", "aws_key_name", "canonical_key_id", "kms_key_id"]

ALIAS_PREFIX = "alias/"
_ARN_PREFIX = "arn:"


class KeyIdError(InvalidArgumentError):
    """A key id that cannot name a key: empty or not a string, or an ``arn:`` that is not a KMS key
    or alias ARN. The message names the key id and the reason."""


@dataclass(frozen=True)
class AwsKeyName:
    """What an AWS-style key id says: the Python KMS's key ``name``, and how it was spelled
    (``kind``: ``"id"`` as is, ``"alias"``, ``"key"`` (a key ARN) or ``"alias-arn"``); ``region``
    and ``account`` for an ARN (else None)."""

    name: str
    kind: str
    region: str | None = None
    account: str | None = None


def aws_key_name(key_id: str) -> AwsKeyName:
    """Parse an AWS-style key id (see the module doc); KeyIdError for an empty id or an ``arn:`` id
    that is not a KMS key or alias ARN with a name.

        aws_key_name("alias/orders-key").name      # "orders-key"
    """
    if not isinstance(key_id, str) or not key_id:
        raise KeyIdError(f"a key id must be a non-empty string, got {key_id!r}")
    if key_id.startswith(_ARN_PREFIX):
        parts = key_id.split(":", 5)
        if len(parts) != 6 or parts[2] != "kms" or "/" not in parts[5]:
            raise KeyIdError(f"key id {key_id!r} is not a KMS key or alias ARN "
                             "(arn:aws:kms:REGION:ACCOUNT:key/NAME or ...:alias/NAME)")
        kind, _, name = parts[5].partition("/")
        if kind not in ("key", "alias") or not name:
            raise KeyIdError(f"key id {key_id!r} is not a KMS key or alias ARN "
                             "(arn:aws:kms:REGION:ACCOUNT:key/NAME or ...:alias/NAME)")
        return AwsKeyName(name, "key" if kind == "key" else "alias-arn", parts[3], parts[4])
    if key_id.startswith(ALIAS_PREFIX):
        name = key_id[len(ALIAS_PREFIX):]
        if not name:
            raise KeyIdError(f"key id {key_id!r} is an alias without a name (alias/NAME)")
        return AwsKeyName(name, "alias")
    return AwsKeyName(key_id, "id")


def canonical_key_id(key_id: str) -> str:
    """The Python KMS's key id that ``key_id`` names: ``NAME`` for ``alias/NAME``,
    ``arn:aws:kms:REGION:ACCOUNT:alias/NAME`` and ``arn:aws:kms:REGION:ACCOUNT:key/NAME``; any other
    id as it is (an ``arn:`` that is no KMS ARN too: no Python KMS key has that name, so the
    KMS does not know it). KeyIdError for an empty id or one that is not a string.

        canonical_key_id("alias/orders-key") == canonical_key_id("orders-key")     # True
    """
    try:
        return aws_key_name(key_id).name
    except KeyIdError:
        if not isinstance(key_id, str) or not key_id:
            raise
        return key_id


class PlainKeyIds:
    """Mixin for a :class:`~pyiceberg_crypto.kms.KeyManagementClient` whose own key ids are never
    in alias or ARN form, so those forms can only be the AWS face's names of its keys: its
    ``canonical_key_id`` is :func:`canonical_key_id`.

        class MyKms(PlainKeyIds, KeyManagementClient): ...
        MyKms().canonical_key_id("alias/orders-key")     # "orders-key"
    """

    def canonical_key_id(self, key_id: str) -> str:
        """The key id ``key_id`` names in this KMS (:func:`canonical_key_id`)."""
        return canonical_key_id(key_id)


def kms_key_id(kms, key_id: str) -> str:
    """The id ``kms`` (a :class:`~pyiceberg_crypto.kms.KeyManagementClient`, or None) gives the key
    that ``key_id`` (a table's ``encryption.key-id``, a KEK's ``encrypted-by-id``, a command's
    KEY_ID) names: ``kms.canonical_key_id(key_id)``; without a KMS (or with a KMS object that has no
    ``canonical_key_id``), :func:`canonical_key_id`, which errs towards two ids naming one key.
    Compare these, never the ids as written, and pass them to ``key_version``,
    ``current_key_version`` and ``compromised_versions``. KeyIdError for an empty key id.

        kms_key_id(KeystoreKms(path), "alias/orders-key")    # "orders-key"
        kms_key_id(AwsKms(...), "alias/orders-key")          # "alias/orders-key" (AWS resolves it)
    """
    if not isinstance(key_id, str) or not key_id:
        raise KeyIdError(f"a key id must be a non-empty string, got {key_id!r}")
    ask = getattr(kms, "canonical_key_id", None)
    return ask(key_id) if ask is not None else canonical_key_id(key_id)
