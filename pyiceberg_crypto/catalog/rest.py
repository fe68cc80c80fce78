"""An Iceberg REST catalog, asked over HTTP directly (no JVM, no Spark): where a table's current
metadata.json is, the table metadata the catalog serves, and which namespaces and tables exist::

    from pyiceberg_crypto.catalog.rest import RestCatalog, CatalogError

    catalog = RestCatalog("http://127.0.0.1:8181")                 # or RestCatalog.from_properties(props)
    loaded = catalog.load_table("db", "orders")                     # GET .../namespaces/db/tables/orders
    loaded.metadata_location, loaded.metadata["encryption-keys"]
    for namespace in catalog.list_namespaces():                     # ("db",), ("sales", "eu"), ...
        catalog.list_tables(namespace)                              # ["orders", ...]

A namespace is a tuple of levels, end to end: ``("sales", "eu")`` is two levels, a string is one
level (``"x.y"`` is the single level ``x.y``, never split on its dot); in a URL the levels are
joined with 0x1F (``%1F``), as the REST spec says.

It speaks the part of the REST catalog spec (open-api/rest-catalog-open-api.yaml of apache/iceberg)
that reading needs, and authenticates as Iceberg's Java client does (``token``, ``credential``,
``header.*``). The server is not trusted: a commit is never re-sent elsewhere (an unsure one is
:class:`CommitOutcomeUnknownError`), secrets never leave its origin nor go over plain http to a
host that is not loopback, every call has one deadline, every reply and listing is bounded, and
every failure is a one-line :class:`CatalogError`. The details, and what it does not defend
against: docs/explanation/security.md#a-rest-catalog-is-a-peer-not-a-trusted-server and
docs/explanation/limits.md.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg_crypto._deprecated import renamed_classes
from pyiceberg_crypto._net import is_loopback_host
from pyiceberg_crypto.errors import CatalogError, CommitOutcomeUnknownError
from pyiceberg_crypto.properties import CATALOG_TIMEOUT_SECONDS
from pyiceberg_crypto.safe_text import escape_text, shorten

__all__ = ["ALLOW_PLAIN_HTTP_PROPERTY", "CommitOutcomeUnknownError", "LoadedTable", "MAX_REPLY_BYTES", "RestCatalog",
           "namespace_name", "rest_catalog"]

#: Old names, kept for one release (CHANGELOG.md).
__getattr__ = renamed_classes(__name__, {"RestCatalogError": CatalogError})

#: A reply larger than this is refused (a table's metadata is well below it).
MAX_REPLY_BYTES = 64 * 1024 * 1024
#: The REST spec's separator of namespace levels in a URL path (``a\x1fb`` for ``("a", "b")``).
NAMESPACE_SEPARATOR = "\x1f"
#: The catalog property that lets a token or credential travel over plain http to a non-loopback host.
ALLOW_PLAIN_HTTP_PROPERTY = "pyiceberg-crypto.allow-plain-http"
#: The default bounds of a listing (``RestCatalog(max_pages=..., max_namespaces=..., max_depth=...)``).
MAX_PAGES = 1_000
MAX_NAMESPACES = 10_000
MAX_DEPTH = 16
#: How much of a token's ``expires_in`` is used before it is exchanged again (the rest is a margin).
TOKEN_LIFETIME_USED = 0.8
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class LoadedTable:
    """A ``loadTable`` answer: the current metadata.json's location and the metadata the catalog serves."""

    name: str  # namespace.table (a level holding a dot is shown in backticks)
    metadata_location: str
    metadata: dict[str, Any] = field(repr=False)
    config: dict[str, str] = field(default_factory=dict, repr=False)  # per-table client settings


def namespace_name(levels: Sequence[str]) -> str:
    """A namespace shown as text: levels joined by ``.``, a level that holds a dot (or a backtick)
    in backticks, as Spark SQL writes it: ``("x.y", "eu")`` -> ``"`x.y`.eu"``."""
    return ".".join(f"`{level.replace('`', '``')}`" if ("." in level or "`" in level) else level
                    for level in levels)


class RestCatalog:
    """A client of one REST catalog (thread-safe: it keeps its settings and a token under a lock)."""

    def __init__(self, uri: str, *, token: str | None = None, credential: str | None = None,
                 warehouse: str | None = None, prefix: str | None = None, scope: str = "catalog",
                 oauth2_server_uri: str | None = None, headers: Mapping[str, str] | None = None,
                 timeout: float = CATALOG_TIMEOUT_SECONDS, ssl_context: ssl.SSLContext | None = None,
                 allow_plain_http: bool = False, max_pages: int = MAX_PAGES,
                 max_namespaces: int = MAX_NAMESPACES, max_depth: int = MAX_DEPTH,
                 clock: Callable[[], float] = time.monotonic):
        # clock: the monotonic seconds a token's expires_in is counted on (tests drive it).
        if not uri.startswith(("http://", "https://")):
            raise CatalogError(f"a REST catalog URI starts with http:// or https://, got {uri!r}")
        if timeout <= 0:
            raise CatalogError(f"timeout must be positive seconds, got {timeout!r}")
        self.uri = uri.rstrip("/")
        self.warehouse = warehouse
        self.timeout = timeout
        self.max_pages, self.max_namespaces, self.max_depth = max_pages, max_namespaces, max_depth
        self._token = token
        self._token_refresh_at: float | None = None  # on clock: exchange the credential again
        self._clock = clock
        self._credential = credential
        self._scope = scope
        self._oauth2_server_uri = oauth2_server_uri or f"{self.uri}/v1/oauth/tokens"
        self._headers = dict(headers or {})
        self._ssl_context = ssl_context
        self._prefix = prefix
        self._lock = threading.Lock()
        if token or credential:
            for where in (self.uri, *([self._oauth2_server_uri] if credential else [])):
                _refuse_plain_http(where, allow_plain_http)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], *, timeout: float = CATALOG_TIMEOUT_SECONDS) -> "RestCatalog":
        """A client from Iceberg REST catalog properties (``uri``, ``token``, ``credential``,
        ``warehouse``, ``prefix``, ``scope``, ``oauth2-server-uri``, ``header.NAME``, and this
        package's ``pyiceberg-crypto.allow-plain-http``), e.g. the ``spark.sql.catalog.<name>.*``
        settings without their prefix."""
        if not properties.get("uri"):
            raise CatalogError("the REST catalog has no uri property")
        headers = {key[len("header."):]: value for key, value in properties.items() if key.startswith("header.")}
        allow = str(properties.get(ALLOW_PLAIN_HTTP_PROPERTY, "false")).strip().lower()
        if allow not in ("true", "false"):
            raise CatalogError(f"{ALLOW_PLAIN_HTTP_PROPERTY} must be true or false, got {allow!r}")
        return cls(properties["uri"], token=properties.get("token"), credential=properties.get("credential"),
                   warehouse=properties.get("warehouse"), prefix=properties.get("prefix"),
                   scope=properties.get("scope", "catalog"), oauth2_server_uri=properties.get("oauth2-server-uri"),
                   headers=headers, timeout=timeout, allow_plain_http=allow == "true")

    # --- the calls -------------------------------------------------------------------------------------

    def load_table(self, namespace: str | Sequence[str], table: str) -> LoadedTable:
        """The table's current metadata location and metadata (REST ``loadTable``). ``namespace``:
        a tuple of levels, or one level as a string."""
        levels = _levels(namespace)
        name = f"{namespace_name(levels)}.{table}"
        reply = self._get(f"{self._path()}/namespaces/{_encode(levels)}/tables/{_quote(table)}", f"table {_shown(name)}")
        location, metadata = reply.get("metadata-location"), reply.get("metadata")
        if not isinstance(location, str) or not location or not isinstance(metadata, dict):
            raise CatalogError(f"REST catalog {self.uri}: the answer for table {_shown(name)} has no metadata-location "
                               "or metadata")
        config = reply.get("config") if isinstance(reply.get("config"), dict) else {}
        return LoadedTable(name, location, metadata, {str(k): str(v) for k, v in config.items()})

    def commit_table(self, namespace: str | Sequence[str], table: str, requirements: list[dict[str, Any]],
                     updates: list[dict[str, Any]]) -> LoadedTable:
        """Commit ``updates`` (REST ``updateTable``: ``{"action": "remove-encryption-key", ...}``) if
        every one of ``requirements`` (``{"type": "assert-table-uuid", ...}``) holds; the table as
        the catalog then serves it. CatalogError with ``status`` 409: a requirement failed
        (re-read the table and redo); :class:`CommitOutcomeUnknownError` for a redirect (3xx, never
        followed), a 5xx or no answer (``status`` None): the commit may or may not have happened
        (Iceberg's CommitStateUnknownException), reload the table to see."""
        levels = _levels(namespace)
        name = f"{namespace_name(levels)}.{table}"
        body = {"identifier": {"namespace": list(levels), "name": table}, "requirements": requirements,
                "updates": updates}
        path = f"{self._path()}/namespaces/{_encode(levels)}/tables/{_quote(table)}"
        try:
            reply = self._call("POST", path, f"the commit of table {_shown(name)}", body=body)
        except CatalogError as exc:
            if outcome_unknown(exc.status):
                raise CommitOutcomeUnknownError(
                    f"the outcome of the commit of table {_shown(name)} is unknown ({exc}): it may or may not have "
                    "landed; reload the table to see whether it did before retrying", status=exc.status) from None
            raise
        location, metadata = reply.get("metadata-location"), reply.get("metadata")
        if not isinstance(location, str) or not location or not isinstance(metadata, dict):
            raise CatalogError(f"REST catalog {self.uri}: the answer to the commit of table {_shown(name)} has "
                               "no metadata-location or metadata", status=None)
        return LoadedTable(name, location, metadata)

    def list_namespaces(self) -> list[tuple[str, ...]]:
        """Every namespace, nested ones included, as tuples of levels, sorted. CatalogError when
        there are more than ``max_namespaces``, deeper than ``max_depth``, or a listing has more
        than ``max_pages`` pages."""
        found: set[tuple[str, ...]] = set()
        pending: list[tuple[str, ...]] = [()]
        while pending:
            parent = pending.pop()
            query = {"parent": NAMESPACE_SEPARATOR.join(parent)} if parent else {}
            what = f"the namespaces under {_shown(namespace_name(parent))}" if parent else "the namespaces"
            for item in self._pages(f"{self._path()}/namespaces", "namespaces", query, what):
                levels = parse_namespace(item)
                if not levels or levels in found or levels[:len(parent)] != parent or len(levels) <= len(parent):
                    continue  # a server that ignores ``parent`` answers the top level again
                if len(levels) > self.max_depth:
                    raise CatalogError(f"REST catalog {self.uri}: namespace {_shown(namespace_name(levels))} is "
                                       f"deeper than {self.max_depth} levels (max_depth)")
                found.add(levels)
                if len(found) > self.max_namespaces:
                    raise CatalogError(f"REST catalog {self.uri}: more than {self.max_namespaces} namespaces "
                                       "(max_namespaces)")
                pending.append(levels)
        return sorted(found)

    def list_tables(self, namespace: str | Sequence[str]) -> list[str]:
        """The names of the tables of ``namespace`` (a tuple of levels, or one level), sorted."""
        levels = _levels(namespace)
        items = self._pages(f"{self._path()}/namespaces/{_encode(levels)}/tables", "identifiers", {},
                            f"the tables of namespace {_shown(namespace_name(levels))}")
        return sorted(str(item["name"]) for item in items
                      if isinstance(item, dict) and isinstance(item.get("name"), str) and item["name"])

    # --- HTTP ------------------------------------------------------------------------------------------

    def _path(self) -> str:
        if self._prefix is None:
            query = {"warehouse": self.warehouse} if self.warehouse else {}
            reply = self._get("/v1/config", "its configuration", query)
            settings: dict = {}
            for part in ("defaults", "overrides"):
                if isinstance(reply.get(part), dict):
                    settings.update(reply[part])
            self._prefix = str(settings.get("prefix") or "")
        return f"/v1/{self._prefix.strip('/')}" if self._prefix.strip("/") else "/v1"

    def _pages(self, path: str, key: str, query: dict[str, str], what: str) -> list:
        items: list = []
        token = None
        seen: set[str] = set()
        for _ in range(self.max_pages):
            page_query = dict(query, **({"pageToken": token} if token else {}))
            reply = self._get(path, what, page_query)
            page = reply.get(key)
            if page is not None and not isinstance(page, list):
                raise CatalogError(f"REST catalog {self.uri}: the answer for {what} has no list of {key}")
            items += page or []
            token = reply.get("next-page-token")
            if not token:
                return items
            if not isinstance(token, str) or token in seen:
                raise CatalogError(f"REST catalog {self.uri}: the listing of {what} does not end "
                                   "(its next-page-token repeats or is not a string)")
            seen.add(token)
        raise CatalogError(f"REST catalog {self.uri}: more than {self.max_pages} pages of {what} (max_pages)")

    def _get(self, path: str, what: str, query: Mapping[str, str] | None = None) -> dict:
        return self._call("GET", path, what, query)

    def _call(self, method: str, path: str, what: str, query: Mapping[str, str] | None = None,
              body: dict | None = None) -> dict:
        url = self.uri + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (1, 2):
            headers = {"Accept": "application/json", **self._headers}
            if data is not None:
                headers["Content-Type"] = "application/json"
            token = self._bearer_token()
            if token:
                headers["Authorization"] = f"Bearer {token}"
            try:
                return self._send(urllib.request.Request(url, data=data, headers=headers, method=method), what)
            except CatalogError as exc:
                # a token of our credential that the server no longer takes: exchange it once more
                if exc.status == 401 and attempt == 1 and self._credential and self._forget_token(token):
                    continue
                raise
        raise AssertionError("unreachable")

    def _forget_token(self, token: str | None) -> bool:
        with self._lock:
            if token is not None and self._token == token:
                self._token = None
                return True
            return False

    def _bearer_token(self) -> str | None:
        with self._lock:
            expired = self._token_refresh_at is not None and self._clock() >= self._token_refresh_at
            if self._credential and (self._token is None or expired):
                self._token, self._token_refresh_at = self._exchange_credential()
            return self._token

    def _exchange_credential(self) -> tuple[str, float | None]:
        """A new token for ``credential`` (OAuth2 client credentials), and when to exchange it again."""
        client_id, _, secret = self._credential.rpartition(":")
        form = {"grant_type": "client_credentials", "client_secret": secret, "scope": self._scope}
        if client_id:
            form["client_id"] = client_id
        asked = self._clock()
        request = urllib.request.Request(self._oauth2_server_uri, data=urllib.parse.urlencode(form).encode(),
                                         headers={"Content-Type": "application/x-www-form-urlencoded"},
                                         method="POST")
        reply = self._send(request, "a token for its credential")
        token = reply.get("access_token")
        if not isinstance(token, str) or not token:
            raise CatalogError(f"REST catalog {self.uri}: the token endpoint answered without an access_token")
        lifetime = reply.get("expires_in")
        if isinstance(lifetime, (int, float)) and not isinstance(lifetime, bool) and lifetime > 0:
            return token, asked + lifetime * TOKEN_LIFETIME_USED
        return token, None

    def _send(self, request: urllib.request.Request, what: str) -> dict:
        """One HTTP call, all of it (connect, redirects, headers, body) within ``timeout`` seconds."""
        deadline = _Deadline(self.timeout)
        handlers: list = [urllib.request.ProxyHandler({}),  # as Iceberg's Java client: no environment proxies
                          _SameOriginRedirects(),
                          _DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline, self._ssl_context)]
        opener = urllib.request.build_opener(*handlers)
        try:
            with deadline:
                try:
                    with opener.open(request, timeout=deadline.remaining()) as response:
                        raw = _read_bounded(response, deadline)
                except urllib.error.HTTPError as exc:
                    if 300 <= exc.code < 400:
                        raise CatalogError(f"REST catalog {self.uri} answered {what} with a redirect (HTTP "
                                           f"{exc.code} to {_shown(exc.headers.get('Location') or '?')}): not "
                                           f"followed for a {request.get_method()}", status=exc.code) from None
                    message = _server_message(exc)
                    raise CatalogError(f"REST catalog {self.uri} refused {what}: HTTP {exc.code} {message}",
                                       status=exc.code) from None
        except _CrossOriginRedirectError as exc:
            raise CatalogError(f"REST catalog {self.uri} redirected {what} to another origin ({exc}): refused, "
                               "so its token and headers do not leave the catalog's host") from None
        except _TooLargeError:
            raise CatalogError(f"REST catalog {self.uri}: the answer for {what} is larger than "
                               f"{MAX_REPLY_BYTES} bytes") from None
        except CatalogError:
            raise
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            # each socket operation waits at most the time left: its timeout is the deadline's
            if deadline.expired or any(isinstance(e, TimeoutError) for e in (exc, getattr(exc, "reason", None))):
                raise CatalogError(f"REST catalog {self.uri} did not answer {what} within {self.timeout:g} s "
                                   "(the whole call)") from None
            reason = getattr(exc, "reason", None) or type(exc).__name__
            raise CatalogError(f"REST catalog {self.uri} cannot be reached for {what}: {reason}") from None
        try:
            reply = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise CatalogError(f"REST catalog {self.uri}: the answer for {what} is not JSON") from None
        except RecursionError:
            raise CatalogError(f"REST catalog {self.uri}: the answer for {what} is JSON nested too deeply to "
                               "parse") from None
        if not isinstance(reply, dict):
            raise CatalogError(f"REST catalog {self.uri}: the answer for {what} is not a JSON object")
        return reply

    def __repr__(self) -> str:
        return f"RestCatalog({self.uri!r})"


# --- namespaces ------------------------------------------------------------------------------------

def _levels(namespace: str | Sequence[str]) -> tuple[str, ...]:
    """A namespace as levels: a string is one level (never split on its dots)."""
    levels = (namespace,) if isinstance(namespace, str) else tuple(namespace)
    if not levels or not all(isinstance(level, str) and level for level in levels):
        raise CatalogError(f"not a namespace: {namespace!r}")
    return levels


def parse_namespace(item: object) -> tuple[str, ...] | None:
    """A namespace of a ``listNamespaces`` answer (a JSON array of non-empty strings) as levels;
    None for anything else."""
    if not isinstance(item, list) or not item or not all(isinstance(level, str) and level for level in item):
        return None
    return tuple(item)


def _encode(levels: tuple[str, ...]) -> str:
    """A namespace in a URL path: levels joined by 0x1F, percent-encoded (REST spec, ``namespace``)."""
    return _quote(NAMESPACE_SEPARATOR.join(levels))


def _quote(text: str) -> str:
    """``text`` percent-encoded as UTF-8 for a URL path; CatalogError for a name UTF-8 cannot
    hold (a lone surrogate, e.g. from a ``"\\ud800"`` escape in a listing): it cannot be asked for."""
    try:
        return urllib.parse.quote(text, safe="")
    except UnicodeEncodeError:
        raise CatalogError(f"the name {_shown(text)} is not valid Unicode (a lone surrogate): it cannot be "
                           "asked for") from None


def _shown(text: str) -> str:
    """Text from the server (a name, a host, a message) made safe for a one-line error."""
    return shorten(escape_text(text), 200)


# --- where a request may go ------------------------------------------------------------------------

def _origin(url: str) -> tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


def _refuse_plain_http(url: str, allowed: bool) -> None:
    scheme, host, _ = _origin(url)
    if scheme == "http" and not is_loopback_host(host) and not allowed:
        raise CatalogError(f"REST catalog {url}: a token or credential would travel in clear text over http:// "
                           f"to {host}: use https://, or set {ALLOW_PLAIN_HTTP_PROPERTY}=true on a network you "
                           "trust")


class _CrossOriginRedirectError(Exception):  # an internal signal: becomes a CatalogError
    pass


class _TooLargeError(Exception):  # an internal signal: becomes a CatalogError
    pass


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect of a GET (or HEAD) within the origin of the request (scheme, host, port);
    refuses any other, so the Authorization header and the ``header.*`` values never go to another
    origin. A redirect of any other method (a commit's POST) is never followed: urllib would re-send
    it as a GET and report the GET's answer; the 3xx is the answer instead (an HTTPError)."""

    max_redirections = 5

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if req.get_method() not in ("GET", "HEAD"):
            return None  # urllib then raises HTTPError(code): the caller sees the redirect
        source, target = _origin(req.full_url), _origin(urllib.parse.urljoin(req.full_url, newurl))
        if source != target:
            raise _CrossOriginRedirectError(f"HTTP {code} from {source[0]}://{source[1]}:{source[2]} to "
                                       f"{target[0]}://{_shown(target[1])}:{target[2]}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


# --- a deadline for the whole call ----------------------------------------------------------------

class _Deadline:
    """``seconds`` for everything: each socket operation waits at most the time left, and when it
    runs out the call's sockets are shut down, which ends a read that trickles in byte by byte."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> "_Deadline":
        self._timer.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._timer.cancel()

    def remaining(self) -> float:
        left = self.ends - time.monotonic()
        if left <= 0:
            self.expired = True
            raise TimeoutError("the call's deadline passed")
        return left

    def watch(self, sock: socket.socket) -> socket.socket:
        """Shut ``sock`` down when the deadline passes (at once if it has); returns it."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shut(sock)
        return sock

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # a blocked recv (TLS handshake, headers, body) returns at once
    except OSError:
        pass


def _watched(connection_class, deadline: _Deadline):
    """``connection_class`` whose socket is watched by ``deadline`` from the moment it exists
    (before a TLS handshake), each of its operations waiting at most the time left."""

    class Watched(connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            create = self._create_connection  # http.client's hook for the raw socket (an attribute)
            self._create_connection = lambda *a, **k: deadline.watch(create(*a, **k))

        def connect(self):
            self.timeout = min(self.timeout or deadline.seconds, deadline.remaining())
            super().connect()

    return Watched


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._connection = _watched(http.client.HTTPConnection, deadline)

    def http_open(self, req):
        return self.do_open(self._connection, req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline, context: ssl.SSLContext | None):
        super().__init__(context=context)
        self._connection = _watched(http.client.HTTPSConnection, deadline)

    def https_open(self, req):
        return self.do_open(self._connection, req, context=self._context)


def _read_bounded(response, deadline: _Deadline, limit: int = MAX_REPLY_BYTES) -> bytes:
    """The body, read as it arrives (``read1``), within the deadline and at most ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        deadline.remaining()
        chunk = response.read1(_CHUNK)
        if not chunk:
            if deadline.expired:
                raise TimeoutError("the call's deadline passed")
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise _TooLargeError()
        parts.append(chunk)


def _server_message(exc: urllib.error.HTTPError) -> str:
    """The spec's ``ErrorModel`` message (``{"error": {"message", "type", "code"}}``), one line."""
    try:
        body = json.loads(exc.read(64 * 1024) or b"{}")
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            text = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
        else:
            text = str(exc.reason)
    except (ValueError, OSError, http.client.HTTPException):
        text = str(exc.reason)
    text = " ".join(text.split())
    return _shown(text)


def outcome_unknown(status: int | None) -> bool:
    """Whether a commit that failed with HTTP ``status`` (None: no answer) may still have landed:
    a redirect (3xx, never followed), a server error (5xx) or no answer."""
    return status is None or 300 <= status < 400 or status >= 500


def rest_catalog(properties: dict[str, str], *, timeout: float = CATALOG_TIMEOUT_SECONDS) -> RestCatalog:
    """A REST client for a REST catalog's settings (``uri``, ``token``, ``credential``, ``header.*``),
    each call bounded by ``timeout`` seconds (CatalogError for settings that cannot be used)."""
    return RestCatalog.from_properties(properties, timeout=timeout)
