"""An Iceberg REST catalog, asked over HTTP directly (no JVM, no Spark): where a table's current
metadata.json is, the table metadata the catalog serves, and which namespaces and tables exist::

    from pyiceberg_crypto.io.rest_catalog import RestCatalog, RestCatalogError

    catalog = RestCatalog("http://127.0.0.1:8181")                 # or RestCatalog.from_properties(props)
    loaded = catalog.load_table("db", "orders")                     # GET .../namespaces/db/tables/orders
    loaded.metadata_location, loaded.metadata["encryption-keys"]
    for namespace in catalog.list_namespaces():                     # ("db",), ("sales", "eu"), ...
        catalog.list_tables(namespace)                              # ["orders", ...]

It speaks the part of the REST catalog spec (open-api/rest-catalog-open-api.yaml of apache/iceberg)
that reading needs: ``GET /v1/config`` for the path prefix, ``loadTable``, ``listNamespaces`` and
``listTables`` with their page tokens. It authenticates the way Iceberg's Java client does with the
same catalog properties: ``token`` (a bearer token) or ``credential`` (``client_id:client_secret``,
exchanged for a token at ``oauth2-server-uri``, default ``<uri>/v1/oauth/tokens``), plus ``header.*``.

The server is not trusted to be sane: every call has a timeout, every reply is bounded
(:data:`MAX_REPLY_BYTES`), and every failure is a one-line :class:`RestCatalogError` naming the
catalog and what was asked, never a token.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyiceberg_crypto.errors import PyicebergCryptoError

__all__ = ["LoadedTable", "MAX_REPLY_BYTES", "RestCatalog", "RestCatalogError"]

#: A reply larger than this is refused (a table's metadata is well below it).
MAX_REPLY_BYTES = 64 * 1024 * 1024
#: The REST spec's separator of namespace levels in a URL path (``a\x1fb`` for ``a.b``).
NAMESPACE_SEPARATOR = "\x1f"
_MAX_PAGES = 10_000


class RestCatalogError(PyicebergCryptoError):
    """The REST catalog cannot be asked, refused the request, or does not know the table."""

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status, when the server answered


@dataclass(frozen=True)
class LoadedTable:
    """A ``loadTable`` answer: the current metadata.json's location and the metadata the catalog serves."""

    name: str  # namespace.table
    metadata_location: str
    metadata: dict[str, Any] = field(repr=False)
    config: dict[str, str] = field(default_factory=dict, repr=False)  # per-table client settings


class RestCatalog:
    """A client of one REST catalog (thread-safe: it keeps only its settings and a token)."""

    def __init__(self, uri: str, *, token: str | None = None, credential: str | None = None,
                 warehouse: str | None = None, prefix: str | None = None, scope: str = "catalog",
                 oauth2_server_uri: str | None = None, headers: Mapping[str, str] | None = None,
                 timeout: float = 30.0, ssl_context: ssl.SSLContext | None = None):
        if not uri.startswith(("http://", "https://")):
            raise RestCatalogError(f"a REST catalog URI starts with http:// or https://, got {uri!r}")
        self.uri = uri.rstrip("/")
        self.warehouse = warehouse
        self.timeout = timeout
        self._token = token
        self._credential = credential
        self._scope = scope
        self._oauth2_server_uri = oauth2_server_uri or f"{self.uri}/v1/oauth/tokens"
        self._headers = dict(headers or {})
        self._ssl_context = ssl_context
        self._prefix = prefix

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], *, timeout: float = 30.0) -> "RestCatalog":
        """A client from Iceberg REST catalog properties (``uri``, ``token``, ``credential``,
        ``warehouse``, ``prefix``, ``scope``, ``oauth2-server-uri``, ``header.NAME``), e.g. the
        ``spark.sql.catalog.<name>.*`` settings without their prefix."""
        if not properties.get("uri"):
            raise RestCatalogError("the REST catalog has no uri property")
        headers = {key[len("header."):]: value for key, value in properties.items() if key.startswith("header.")}
        return cls(properties["uri"], token=properties.get("token"), credential=properties.get("credential"),
                   warehouse=properties.get("warehouse"), prefix=properties.get("prefix"),
                   scope=properties.get("scope", "catalog"), oauth2_server_uri=properties.get("oauth2-server-uri"),
                   headers=headers, timeout=timeout)

    # --- the calls -------------------------------------------------------------------------------------

    def load_table(self, namespace: str | tuple[str, ...], table: str) -> LoadedTable:
        """The table's current metadata location and metadata (REST ``loadTable``)."""
        levels = _levels(namespace)
        name = ".".join((*levels, table))
        reply = self._get(f"{self._path()}/namespaces/{_encode(levels)}/tables/{urllib.parse.quote(table, safe='')}",
                          f"table {name}")
        location, metadata = reply.get("metadata-location"), reply.get("metadata")
        if not isinstance(location, str) or not location or not isinstance(metadata, dict):
            raise RestCatalogError(f"REST catalog {self.uri}: the answer for table {name} has no metadata-location "
                                   "or metadata")
        config = reply.get("config") if isinstance(reply.get("config"), dict) else {}
        return LoadedTable(name, location, metadata, {str(k): str(v) for k, v in config.items()})

    def list_namespaces(self) -> list[tuple[str, ...]]:
        """Every namespace, nested ones included, sorted."""
        found: list[tuple[str, ...]] = []
        pending: list[tuple[str, ...]] = [()]
        while pending:
            parent = pending.pop()
            query = {"parent": NAMESPACE_SEPARATOR.join(parent)} if parent else {}
            for item in self._pages(f"{self._path()}/namespaces", "namespaces", query, "the namespaces"):
                levels = tuple(str(level) for level in item) if isinstance(item, list) else None
                if not levels or levels in found or levels[:len(parent)] != parent or len(levels) <= len(parent):
                    continue  # a server that ignores ``parent`` answers the top level again
                found.append(levels)
                pending.append(levels)
        return sorted(found)

    def list_tables(self, namespace: str | tuple[str, ...]) -> list[str]:
        """The names of the tables of ``namespace``, sorted."""
        levels = _levels(namespace)
        items = self._pages(f"{self._path()}/namespaces/{_encode(levels)}/tables", "identifiers", {},
                            f"the tables of namespace {'.'.join(levels)}")
        return sorted(str(item["name"]) for item in items if isinstance(item, dict) and "name" in item)

    # --- HTTP ------------------------------------------------------------------------------------------

    def _path(self) -> str:
        if self._prefix is None:
            query = {"warehouse": self.warehouse} if self.warehouse else {}
            reply = self._get("/v1/config", "its configuration", query)
            settings = {**(reply.get("defaults") or {}), **(reply.get("overrides") or {})}
            self._prefix = str(settings.get("prefix") or "")
        return f"/v1/{self._prefix.strip('/')}" if self._prefix.strip("/") else "/v1"

    def _pages(self, path: str, key: str, query: dict[str, str], what: str) -> list:
        items: list = []
        token = None
        for _ in range(_MAX_PAGES):
            page_query = dict(query, **({"pageToken": token} if token else {}))
            reply = self._get(path, what, page_query)
            items += reply.get(key) or []
            token = reply.get("next-page-token")
            if not token:
                return items
        raise RestCatalogError(f"REST catalog {self.uri}: more than {_MAX_PAGES} pages of {what}")

    def _get(self, path: str, what: str, query: Mapping[str, str] | None = None) -> dict:
        url = self.uri + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        headers = {"Accept": "application/json", **self._headers}
        token = self._bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self._send(urllib.request.Request(url, headers=headers, method="GET"), what)

    def _bearer_token(self) -> str | None:
        if self._token is None and self._credential:
            client_id, _, secret = self._credential.rpartition(":")
            form = {"grant_type": "client_credentials", "client_secret": secret, "scope": self._scope}
            if client_id:
                form["client_id"] = client_id
            request = urllib.request.Request(self._oauth2_server_uri, data=urllib.parse.urlencode(form).encode(),
                                             headers={"Content-Type": "application/x-www-form-urlencoded"},
                                             method="POST")
            reply = self._send(request, "a token for its credential")
            token = reply.get("access_token")
            if not isinstance(token, str) or not token:
                raise RestCatalogError(f"REST catalog {self.uri}: the token endpoint answered without an access_token")
            self._token = token
        return self._token

    def _send(self, request: urllib.request.Request, what: str) -> dict:
        handlers: list = [urllib.request.ProxyHandler({})]  # as Iceberg's Java client: no environment proxies
        if self._ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=self._ssl_context))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(request, timeout=self.timeout) as response:
                raw = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise RestCatalogError(f"REST catalog {self.uri} refused {what}: HTTP {exc.code} "
                                   f"{_server_message(exc)}", status=exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RestCatalogError(f"REST catalog {self.uri} cannot be reached for {what}: {reason}") from None
        if len(raw) > MAX_REPLY_BYTES:
            raise RestCatalogError(f"REST catalog {self.uri}: the answer for {what} is larger than "
                                   f"{MAX_REPLY_BYTES} bytes")
        try:
            reply = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise RestCatalogError(f"REST catalog {self.uri}: the answer for {what} is not JSON") from None
        if not isinstance(reply, dict):
            raise RestCatalogError(f"REST catalog {self.uri}: the answer for {what} is not a JSON object")
        return reply

    def __repr__(self) -> str:
        return f"RestCatalog({self.uri!r})"


def _levels(namespace: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    levels = tuple(namespace.split(".")) if isinstance(namespace, str) else tuple(namespace)
    if not levels or not all(levels):
        raise RestCatalogError(f"not a namespace: {namespace!r}")
    return levels


def _encode(levels: tuple[str, ...]) -> str:
    """A namespace in a URL path: levels joined by 0x1F, percent-encoded (REST spec, ``namespace``)."""
    return urllib.parse.quote(NAMESPACE_SEPARATOR.join(levels), safe="")


def _server_message(exc: urllib.error.HTTPError) -> str:
    """The spec's ``ErrorModel`` message (``{"error": {"message", "type", "code"}}``), one line."""
    try:
        body = json.loads(exc.read(64 * 1024) or b"{}")
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict):
            text = f"{error.get('type', '')}: {error.get('message', '')}".strip(": ")
        else:
            text = str(exc.reason)
    except (ValueError, OSError):
        text = str(exc.reason)
    text = " ".join(text.split())
    return text[:300]
