"""AWS Signature Version 4, checked by a server: who signed a request, and whether to believe it.

    credentials = load_credentials("/etc/lake/aws-kms-api.credentials")   # operator-owned, 0600
    verifier = SigV4Verifier(credentials, region="eu-west-1", service="kms")
    principal = verifier.verify("POST", "/", "", headers, body)           # or raises ApiError

The credentials file is an AWS-style INI file, one section per client (the section name is the
principal the logs name; the secret never appears anywhere)::

    [trino]
    aws_access_key_id = AKIALAKETRINO0000001
    aws_secret_access_key = ...

The canonical request follows the SigV4 specification (AWS "Create a signed AWS API request").
Refused: a missing or malformed ``Authorization``, ``SignedHeaders`` that leave out ``host``,
``x-amz-date``, ``x-amz-target`` or ``content-type``, an unknown access key, a wrong signature, a
credential scope for another date, region or service, and an ``X-Amz-Date`` more than ``max_skew``
(5 minutes) off. Repeats are served, as AWS KMS serves them (botocore signs no nonce): no replay
cache; TLS keeps requests from being captured. :meth:`SigV4Verifier.watch` follows the credentials
file: a section removed or a secret changed is in force within about a second.

Why each check, and why repeats are served: docs/how-to/trino.md#1-serve-the-kms-with-the-aws-face.
"""

from __future__ import annotations

import configparser
import datetime
import hashlib
import hmac
import logging
import re
import threading
import time
import urllib.parse
from calendar import timegm
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto.listener.files import read_operator_file
from pyiceberg_crypto.errors import ApiError, InvalidArgumentError, PyicebergCryptoError
from pyiceberg_crypto.serve.served_kms import RateLimitedLog

log = logging.getLogger(__name__)

__all__ = ["REQUIRED_SIGNED_HEADERS", "Principal", "SigV4Verifier", "load_credentials"]

#: Old names, kept for one release (CHANGELOG.md): a request the verifier does not believe is an
#: ApiError (its ``reason`` a refusal label); a credentials file that cannot be used, an InvalidArgumentError.
__getattr__ = renamed_classes(__name__, {"SigV4RefusedError": ApiError, "CredentialsFileError": InvalidArgumentError})

ALGORITHM = "AWS4-HMAC-SHA256"
DEFAULT_MAX_SKEW_SECONDS = 300.0
#: Headers every request must sign: who it is for, when, which operation, and how the body is framed.
REQUIRED_SIGNED_HEADERS = ("content-type", "host", "x-amz-date", "x-amz-target")
#: How often (seconds, at most) :meth:`SigV4Verifier.watch` looks at the credentials file.
CREDENTIALS_CHECK_INTERVAL_SECONDS = 0.5
#: Derived signing keys kept (one per client and day; a cache, cleared when full).
SIGNING_KEY_CACHE_ENTRIES = 1024
_ACCESS_KEY = re.compile(r"^[A-Za-z0-9_+=,.@-]{1,128}$")
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^,\s]+)\s*,\s*SignedHeaders=([a-z0-9;_.-]+)\s*,\s*Signature=([0-9a-f]{64})$")


def _refused(code: str, reason: str, message: str, status: int = 400) -> ApiError:
    """A request the verifier does not believe: ``code`` is the AWS error type, ``reason`` a fixed
    metrics label, the message is safe to send back (no secret, no expected signature)."""
    return ApiError(code, message, status, reason)


@dataclass(frozen=True)
class Principal:
    """One client's access key pair; ``repr`` never shows the secret."""

    name: str
    access_key_id: str
    secret_access_key: str = field(repr=False)


def load_credentials(path: str | Path) -> dict[str, Principal]:
    """Access key id -> :class:`Principal`, from an operator-owned file of mode 0600 (refused if
    another user owns it, others can read or write it, or it is a symlink)."""
    text = read_operator_file(path, "credentials file", private=True, limit=1 << 20).decode("utf-8", "replace")
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error as exc:
        raise InvalidArgumentError(f"the credentials file {path} is not an INI file: {type(exc).__name__}") from None
    principals: dict[str, Principal] = {}
    for section in parser.sections():
        key_id = parser.get(section, "aws_access_key_id", fallback="").strip()
        secret = parser.get(section, "aws_secret_access_key", fallback="").strip()
        if not _ACCESS_KEY.match(key_id) or len(secret) < 16:
            raise InvalidArgumentError(f"the credentials file {path}, section [{section}]: needs aws_access_key_id "
                                       "(letters, digits) and aws_secret_access_key (16 characters or more)")
        if key_id in principals:
            raise InvalidArgumentError(f"the credentials file {path}: access key id in [{section}] is used twice")
        principals[key_id] = Principal(section, key_id, secret)
    if not principals:
        raise InvalidArgumentError(f"the credentials file {path} has no [section] with aws_access_key_id")
    return principals


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The SigV4 signing key of one day, region and service."""
    return _hmac(_hmac(_hmac(_hmac(("AWS4" + secret).encode(), date), region), service), "aws4_request")


_AMZ_DATE = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$", re.ASCII)


def parse_amz_date(stamp: str) -> int:
    """Seconds since the epoch of an ``X-Amz-Date`` (``YYYYMMDDTHHMMSSZ``, UTC); ValueError if it is
    not one (a regular expression and ``datetime``'s range checks: ~10x cheaper than ``strptime``,
    which each request paid)."""
    match = _AMZ_DATE.match(stamp)
    if not match:
        raise ValueError("not YYYYMMDDTHHMMSSZ")
    year, month, day, hour, minute, second = map(int, match.groups())
    datetime.datetime(year, month, day, hour, minute, second)  # ValueError for a day or hour out of range
    return timegm((year, month, day, hour, minute, second))


def _canonical_uri(path: str) -> str:
    # Non-S3 services: the path as sent (already URI-encoded once) is URI-encoded again, as
    # botocore and the AWS SDK for Java do.
    return urllib.parse.quote(path or "/", safe="/~")


def _canonical_query(query: str) -> str:
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    encoded = sorted((urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def canonical_request(method: str, path: str, query: str, headers: Mapping[str, str], signed: list[str],
                      body: bytes) -> str:
    """The SigV4 canonical request over the headers in ``signed`` (lower-case names)."""
    lines = []
    for name in signed:
        value = headers.get(name)
        if value is None:
            raise _refused("IncompleteSignatureException", "malformed", f"signed header {name!r} is missing")
        lines.append(f"{name}:{' '.join(value.strip().split())}\n")
    return "\n".join([method, _canonical_uri(path), _canonical_query(query), "".join(lines), ";".join(signed),
                      _sha256_hex(body)])


class SigV4Verifier:
    """Checks SigV4 requests for one region and service against a credentials map."""

    def __init__(self, credentials: Mapping[str, Principal], *, region: str, service: str = "kms",
                 max_skew: float = DEFAULT_MAX_SKEW_SECONDS, clock=time.time):
        self.credentials = dict(credentials)
        self.region, self.service, self.max_skew = region, service, max_skew
        self.clock = clock
        self._signing_keys: dict[tuple[Principal, str], bytes] = {}
        self._watched: Path | None = None
        self._watched_signature: tuple[int, int, int] | None = None
        self._next_check = 0.0
        self._watch_lock = threading.Lock()
        self._log = RateLimitedLog(log)

    def watch(self, path: str | Path) -> None:
        """Follow the credentials file at ``path`` (the one :attr:`credentials` came from): when it
        changes, it is read again (at most every :data:`CREDENTIALS_CHECK_INTERVAL_SECONDS`, on the
        next request), so a removed section is refused within about a second. A file that does not
        load keeps the previous credentials and logs why (rate-limited)."""
        self._watched = Path(path)
        self._watched_signature = _file_signature(self._watched)

    def _follow(self) -> None:
        now = time.monotonic()
        if self._watched is None or now < self._next_check:
            return
        with self._watch_lock:
            if now < self._next_check:
                return
            self._next_check = now + CREDENTIALS_CHECK_INTERVAL_SECONDS
            signature = _file_signature(self._watched)
            if signature == self._watched_signature:
                return
            try:
                credentials = load_credentials(self._watched)
            except (OSError, PyicebergCryptoError, ValueError) as exc:
                self._log.warning("credentials-file", "AWS KMS face: the credentials file %s changed but does not "
                                  "load, keeping the previous credentials: %s", self._watched, exc)
                return
            self.credentials = credentials
            self._watched_signature = signature
            log.info("AWS KMS face: re-read the credentials file %s (%d clients)", self._watched, len(credentials))

    def verify(self, method: str, path: str, query: str, headers: Mapping[str, str], body: bytes) -> Principal:
        """The principal that signed the request, or :class:`~pyiceberg_crypto.errors.ApiError`. ``headers``: lower-case names."""
        authorization = headers.get("authorization", "")
        if not authorization:
            raise _refused("MissingAuthenticationTokenException", "unsigned", "the request is not signed (SigV4)")
        match = _AUTHORIZATION.match(authorization.strip())
        if not match:
            raise _refused("IncompleteSignatureException", "malformed",
                               "the Authorization header is not AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., "
                               "Signature=...")
        credential, signed_text, signature = match.groups()
        parts = credential.split("/")
        if len(parts) != 5 or parts[4] != "aws4_request":
            raise _refused("IncompleteSignatureException", "malformed", "the credential scope is malformed")
        access_key, date, region, service, _ = parts
        signed = signed_text.split(";")
        if signed != sorted(set(signed)) or not set(REQUIRED_SIGNED_HEADERS) <= set(signed):
            raise _refused("IncompleteSignatureException", "malformed",
                               f"SignedHeaders must be sorted and include {', '.join(REQUIRED_SIGNED_HEADERS)}")
        self._follow()
        principal = self.credentials.get(access_key)
        if principal is None:
            raise _refused("UnrecognizedClientException", "unknown-access-key",
                               "the security token included in the request is invalid (unknown access key id)")
        if service != self.service:
            raise _refused("InvalidSignatureException", "wrong-service",
                               f"credential scope names service {service[:32]!r}, this endpoint is {self.service!r}")
        if region != self.region:
            raise _refused("InvalidSignatureException", "wrong-region",
                               f"credential scope names region {region[:32]!r}, this endpoint is {self.region!r}")
        stamp = headers.get("x-amz-date", "")
        try:
            signed_at = parse_amz_date(stamp)
        except ValueError:
            raise _refused("IncompleteSignatureException", "malformed", "X-Amz-Date is not YYYYMMDDTHHMMSSZ") from None
        if stamp[:8] != date:
            raise _refused("InvalidSignatureException", "malformed", "the credential scope date is not X-Amz-Date's")
        now = self.clock()
        if abs(now - signed_at) > self.max_skew:
            raise _refused("InvalidSignatureException", "expired",
                               f"signature expired or not yet valid: X-Amz-Date {stamp} is more than "
                               f"{self.max_skew:g} s from the server's clock")
        scope = f"{date}/{region}/{service}/aws4_request"
        request = canonical_request(method, path, query, headers, signed, body)
        to_sign = "\n".join([ALGORITHM, stamp, scope, _sha256_hex(request.encode())])
        expected = hmac.new(self._signing_key(principal, date), to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise _refused("InvalidSignatureException", "bad-signature",
                               "the request signature does not match (wrong secret, or the request was altered)")
        return principal

    def _signing_key(self, principal: Principal, date: str) -> bytes:
        """:func:`signing_key` of ``principal`` for ``date`` (this region and service), kept for
        the day: four HMACs fewer per request. Keyed by the principal itself (its secret
        included), so re-read credentials never meet a stale key; at most a few days' keys of the
        clients seen are held (cleared past :data:`SIGNING_KEY_CACHE_ENTRIES`)."""
        cache_key = (principal, date)
        key = self._signing_keys.get(cache_key)
        if key is None:
            key = signing_key(principal.secret_access_key, date, self.region, self.service)
            if len(self._signing_keys) >= SIGNING_KEY_CACHE_ENTRIES:
                self._signing_keys.clear()
            self._signing_keys[cache_key] = key
        return key


def _file_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
