"""Who may use which key, for every face of ``kms serve``: the policy file, parsed and matched.

The policy is a JSON file (``kms serve --policy PATH``) that grants each principal operations on
keys; with a policy, anything it does not grant is denied; without one, every principal may use
every key::

    {"version": 1,
     "principals": {
        "aws:trino": {"grants": [{"keys": ["analytics-*"], "operations": ["Decrypt"]}]},
        "py4j:spark-writers": {"token_file": "tokens/spark-writers.token",
                               "grants": [{"keys": ["orders-key"], "operations": ["wrap", "unwrap"]}]}}}

    policy = load_policy("/etc/lake/kms-policy.json")
    policy.allows("aws:trino", "unwrap", "analytics-2026")     # True
    policy.allows("aws:trino", "wrap", "analytics-2026")       # False

Principals are ``aws:SECTION`` (a section of the AWS face's credentials file) and ``py4j:NAME`` (a
named token of the Py4J face, written to ``token_file``; ``py4j:default`` is ``--token-file``).
Keys are exact ids or ``*`` / ``?`` patterns, alias and ARN forms meaning the same key
(:func:`~pyiceberg_crypto.kms.key_ids.canonical_key_id`); operations are ``wrap``, ``unwrap``,
``generate``, ``describe`` or ``*``. The file must belong to the service's user and be writable by
nobody else (not a symlink).

Principals, grants, token files and reloading (SIGHUP): docs/how-to/govern-keys.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.listener.files import read_operator_file
from pyiceberg_crypto.errors import InvalidArgumentError, PyicebergCryptoError
from pyiceberg_crypto.kms.key_ids import canonical_key_id

__all__ = ["FACES", "OPERATIONS", "Grant", "Policy", "load_policy", "operation_name", "parse_policy"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"PolicyError": InvalidArgumentError})

#: The operations a grant names (the Py4J face's wrap/unwrap/generate; the AWS face's four).
OPERATIONS = ("wrap", "unwrap", "generate", "describe")
#: The faces a principal belongs to (its name's prefix).
FACES = ("aws", "py4j")
_ALIASES = {"wrap": "wrap", "encrypt": "wrap", "wrapkey": "wrap",
            "unwrap": "unwrap", "decrypt": "unwrap", "unwrapkey": "unwrap",
            "generate": "generate", "generatedatakey": "generate", "generatekey": "generate",
            "describe": "describe", "describekey": "describe"}
#: A Py4J principal's name travels in the handshake line: letters, digits, ``.``, ``_``, ``-``.
_PY4J_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: Names the Py4J handshake already uses for its own roles.
_RESERVED_PY4J = {"client", "driver"}
MAX_POLICY_BYTES = 1 << 20


def operation_name(name: str) -> str:
    """The grant operation that ``name`` (``Decrypt``, ``unwrapKey``, ``unwrap``...) is;
    :class:`InvalidArgumentError` for another name."""
    operation = _ALIASES.get(name.lower()) if isinstance(name, str) else None
    if operation is None:
        raise InvalidArgumentError(f"unknown operation {name!r}: one of {', '.join(OPERATIONS)} (or Encrypt, Decrypt, "
                                   "GenerateDataKey, DescribeKey), or *")
    return operation


@dataclass(frozen=True)
class Grant:
    """Key patterns (canonical ids, ``*``/``?`` wildcards) and the operations allowed on them."""

    keys: tuple[str, ...]
    operations: frozenset[str]

    def allows(self, operation: str, key_id: str) -> bool:
        return operation in self.operations and any(fnmatchcase(key_id, pattern) for pattern in self.keys)


@dataclass(frozen=True)
class Policy:
    """A parsed policy: grants per principal, the Py4J face's named token files, the file's SHA-256."""

    grants: dict[str, tuple[Grant, ...]]
    token_files: dict[str, Path]
    sha256: str
    source: str = "<policy>"
    #: Decisions made so far ((principal, operation, canonical key) -> bool): a policy never changes.
    _decided: dict = field(default_factory=dict, compare=False, repr=False)

    def allows(self, principal: str, operation: str, key_id: str) -> bool:
        """Whether ``principal`` may perform ``operation`` (one of :data:`OPERATIONS`) with ``key_id``
        (any spelling: compared as its canonical id)."""
        try:
            key = canonical_key_id(key_id)
        except InvalidArgumentError:
            return False
        return self.allows_canonical(principal, operation, key)

    def allows_canonical(self, principal: str, operation: str, key: str) -> bool:
        """:meth:`allows` for a key id already canonical (the served KMS's hot path; decisions cached)."""
        decided = self._decided.get((principal, operation, key))
        if decided is None:
            decided = any(grant.allows(operation, key) for grant in self.grants.get(principal, ()))
            if len(self._decided) < 65536:  # bounded: key ids come from clients
                self._decided[(principal, operation, key)] = decided
        return decided

    @property
    def principals(self) -> tuple[str, ...]:
        return tuple(sorted(self.grants))

    def describe(self) -> str:
        """One line per principal for the start-up log (names, patterns, operations; no secrets)."""
        lines = []
        for principal in self.principals:
            parts = [f"{'/'.join(sorted(g.operations))} on {', '.join(g.keys)}" for g in self.grants[principal]]
            lines.append(f"{principal}: {'; '.join(parts) or 'nothing'}")
        return "\n".join(lines)


def load_policy(path: str | Path) -> Policy:
    """The policy in ``path`` (see module doc); :class:`InvalidArgumentError` if unreadable, unsafe (another
    user's file, writable by others, a symlink) or malformed."""
    path = Path(path)
    try:
        data = read_operator_file(path, "policy file", limit=MAX_POLICY_BYTES)
    except (OSError, PyicebergCryptoError) as exc:
        raise InvalidArgumentError(str(exc)) from None
    if len(data) > MAX_POLICY_BYTES:
        raise InvalidArgumentError(f"the policy file {path} is larger than {MAX_POLICY_BYTES} bytes")
    return parse_policy(data, base=path.parent, source=str(path))


def parse_policy(data: bytes | str, *, base: str | Path = ".", source: str = "<policy>") -> Policy:
    """A :class:`Policy` from the JSON text ``data`` (token files relative to ``base``)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"the policy {source} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgumentError(f"the policy {source} must be a JSON object")
    unknown = set(document) - {"version", "principals", "comment"}
    if unknown:
        raise InvalidArgumentError(f"the policy {source} has unknown fields: {', '.join(sorted(unknown))}")
    if document.get("version", 1) != 1:
        raise InvalidArgumentError(f"the policy {source}: version must be 1")
    principals = document.get("principals")
    if not isinstance(principals, dict):
        raise InvalidArgumentError(f"the policy {source} needs \"principals\": an object of principal name -> grants")
    grants: dict[str, tuple[Grant, ...]] = {}
    token_files: dict[str, Path] = {}
    for name, entry in principals.items():
        where = f"the policy {source}, principal {name!r}"
        face, _, local = name.partition(":")
        if face not in FACES or not local:
            raise InvalidArgumentError(f"{where}: a principal is aws:SECTION (credentials file) or py4j:NAME (named token)")
        if not isinstance(entry, dict):
            raise InvalidArgumentError(f"{where}: must be an object with \"grants\"")
        unknown = set(entry) - {"grants", "token_file", "comment"}
        if unknown:
            raise InvalidArgumentError(f"{where}: unknown fields {', '.join(sorted(unknown))}")
        if face == "py4j":
            if not _PY4J_NAME.fullmatch(local) or local in _RESERVED_PY4J:
                raise InvalidArgumentError(f"{where}: a Py4J principal's name is 1-64 letters, digits, '.', '_', '-' "
                                           f"(not {', '.join(sorted(_RESERVED_PY4J))})")
            token_file = entry.get("token_file")
            if local == "default":
                if token_file is not None:
                    raise InvalidArgumentError(f"{where}: py4j:default is the token of --token-file: no token_file here")
            elif not isinstance(token_file, str) or not token_file:
                raise InvalidArgumentError(f"{where}: a named Py4J principal needs \"token_file\" (where its token is written)")
            else:
                token_files[local] = (Path(base) / token_file).absolute()
        elif "token_file" in entry:
            raise InvalidArgumentError(f"{where}: token_file is for py4j: principals (aws: ones sign with the credentials file)")
        grants[name] = tuple(_grant(item, f"{where}, grant {i + 1}") for i, item in enumerate(entry.get("grants", [])))
    files = list(token_files.values())
    if len(set(files)) != len(files):
        raise InvalidArgumentError(f"the policy {source}: two principals share a token_file")
    return Policy(grants, token_files, hashlib.sha256(raw).hexdigest(), source)


def _grant(item: Any, where: str) -> Grant:
    if not isinstance(item, dict) or set(item) - {"keys", "operations", "comment"}:
        raise InvalidArgumentError(f"{where}: a grant is {{\"keys\": [...], \"operations\": [...]}}")
    keys, operations = item.get("keys"), item.get("operations")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) and k for k in keys):
        raise InvalidArgumentError(f"{where}: \"keys\" must be a non-empty list of key ids or patterns")
    if not isinstance(operations, list) or not operations or not all(isinstance(o, str) for o in operations):
        raise InvalidArgumentError(f"{where}: \"operations\" must be a non-empty list")
    if any(set(key) & set("[]") for key in keys):
        raise InvalidArgumentError(f"{where}: key patterns know * and ? only")
    named = frozenset(OPERATIONS) if "*" in operations else frozenset(operation_name(o) for o in operations)
    return Grant(tuple(canonical_key_id(k) for k in keys), named)
