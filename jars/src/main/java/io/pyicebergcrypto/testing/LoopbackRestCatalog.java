package io.pyicebergcrypto.testing;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Executors;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.NotFoundException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.rest.CatalogHandlers;
import org.apache.iceberg.rest.RESTCatalogProperties;
import org.apache.iceberg.rest.RESTSerializers;
import org.apache.iceberg.rest.RESTUtil;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RegisterTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.JsonAutoDetect;
import org.apache.iceberg.shaded.com.fasterxml.jackson.annotation.PropertyAccessor;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.DeserializationFeature;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.iceberg.shaded.com.fasterxml.jackson.databind.PropertyNamingStrategies;

/**
 * A small Iceberg REST catalog server for tests, bound to one address (127.0.0.1 by default).
 *
 * <p>Every route calls Iceberg's own {@link CatalogHandlers} (what Iceberg's REST test fixture does)
 * over a {@link JdbcCatalog} on an H2 database file in the given directory, so namespaces and tables
 * survive a restart and the wire format is Iceberg's ({@link RESTSerializers}, kebab-case, as
 * Iceberg's package-private {@code RESTObjectMapper} configures it). It has no authentication: keep it
 * on loopback.
 *
 * <pre>
 * java -cp "pyspark/jars/*:iceberg-spark-runtime.jar:h2.jar:pyiceberg-crypto-bridge.jar" \
 *   io.pyicebergcrypto.testing.LoopbackRestCatalog --directory /data/rest [--host 127.0.0.1] [--port 0]
 * </pre>
 *
 * <p>Routes (prefix {@code /v1}): {@code GET config}; {@code GET|POST namespaces}; {@code GET|HEAD|DELETE
 * namespaces/NS}; {@code POST namespaces/NS/properties}; {@code GET|POST namespaces/NS/tables} (a
 * create with {@code stage-create} is staged); {@code GET|HEAD|POST|DELETE namespaces/NS/tables/T};
 * {@code POST namespaces/NS/register}; {@code POST tables/rename}; {@code POST
 * namespaces/NS/tables/T/metrics} (accepted and dropped). Others answer 404.
 *
 * <p>Port 0 picks a free port. Once bound it prints one line {@code LISTENING host:port} on
 * standard output (what {@code pyiceberg_crypto.testing.rest} waits for).
 */
public final class LoopbackRestCatalog {
  private static final String SEPARATOR = "%1F";
  private final JdbcCatalog catalog;
  private final ObjectMapper mapper;

  private LoopbackRestCatalog(JdbcCatalog catalog) {
    this.catalog = catalog;
    this.mapper = new ObjectMapper();
    mapper.setVisibility(PropertyAccessor.FIELD, JsonAutoDetect.Visibility.ANY);
    mapper.configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
    mapper.setPropertyNamingStrategy(new PropertyNamingStrategies.KebabCaseStrategy());
    RESTSerializers.registerAll(mapper);
  }

  public static void main(String[] args) throws Exception {
    String host = "127.0.0.1";
    int port = 0;
    String directory = null;
    String warehouse = null;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--host": host = args[++i]; break;
        case "--port": port = Integer.parseInt(args[++i]); break;
        case "--directory": directory = args[++i]; break;
        case "--warehouse": warehouse = args[++i]; break;
        default:
          usage();
      }
    }
    if (directory == null) {
      usage();
    }
    File dir = new File(directory).getAbsoluteFile();
    if (!dir.isDirectory()) {
      System.err.println("error: the catalog directory " + dir + " does not exist: create it first");
      System.exit(2);
    }
    if (warehouse == null) {
      warehouse = new File(dir, "warehouse").toURI().toString();
    }
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(new org.apache.hadoop.conf.Configuration());
    Map<String, String> properties = new HashMap<>();
    properties.put(CatalogProperties.URI, "jdbc:h2:file:" + new File(dir, "catalog").getPath() + ";DATABASE_TO_LOWER=TRUE");
    properties.put(CatalogProperties.WAREHOUSE_LOCATION, warehouse);
    properties.put("jdbc.schema-version", "V1");
    catalog.initialize("rest_backend", properties);

    HttpServer server;
    try {
      server = HttpServer.create(new InetSocketAddress(InetAddress.getByName(host), port), 50);
    } catch (BindException e) {
      System.err.println("error: cannot listen on " + host + ":" + port + ": " + e.getMessage()
          + " (is another server using the port? pick another --port, or 0 for a free one)");
      System.exit(1);
      return;
    }
    LoopbackRestCatalog handler = new LoopbackRestCatalog(catalog);
    server.createContext("/", handler::handle);
    server.setExecutor(Executors.newFixedThreadPool(8));
    server.start();
    InetSocketAddress bound = server.getAddress();
    System.out.println("LISTENING " + bound.getAddress().getHostAddress() + ":" + bound.getPort());
    System.out.flush();
  }

  private static void usage() {
    System.err.println("usage: LoopbackRestCatalog --directory DIR [--host 127.0.0.1] [--port 0] [--warehouse URI]");
    System.exit(2);
  }

  private void handle(HttpExchange exchange) throws IOException {
    try {
      String method = exchange.getRequestMethod();
      Object response = route(method, exchange);
      if (response == null) {
        send(exchange, 204, null);
      } else {
        send(exchange, 200, mapper.writeValueAsBytes(response));
      }
    } catch (RouteNotFound e) {
      sendError(exchange, 404, "NoSuchEndpointException", e.getMessage());
    } catch (NoSuchTableException | NoSuchNamespaceException | NotFoundException e) {
      sendError(exchange, 404, e.getClass().getSimpleName(), e.getMessage());
    } catch (AlreadyExistsException | NamespaceNotEmptyException | CommitFailedException e) {
      sendError(exchange, 409, e.getClass().getSimpleName(), e.getMessage());
    } catch (ValidationException | IllegalArgumentException e) {
      sendError(exchange, 400, e.getClass().getSimpleName(), e.getMessage());
    } catch (UnsupportedOperationException e) {
      sendError(exchange, 406, e.getClass().getSimpleName(), e.getMessage());
    } catch (RuntimeException e) {
      e.printStackTrace();
      sendError(exchange, 500, e.getClass().getSimpleName(), String.valueOf(e.getMessage()));
    } finally {
      exchange.close();
    }
  }

  private Object route(String method, HttpExchange exchange) throws IOException {
    String path = exchange.getRequestURI().getRawPath();
    Map<String, String> query = query(exchange.getRequestURI().getRawQuery());
    String[] parts = path.replaceAll("^/+|/+$", "").split("/");
    if (parts.length < 2 || !"v1".equals(parts[0])) {
      throw new RouteNotFound(method + " " + path);
    }
    // GET /v1/config
    if (parts.length == 2 && "config".equals(parts[1]) && "GET".equals(method)) {
      return ConfigResponse.builder().build();
    }
    // POST /v1/tables/rename
    if (parts.length == 3 && "tables".equals(parts[1]) && "rename".equals(parts[2]) && "POST".equals(method)) {
      CatalogHandlers.renameTable(catalog, read(exchange, RenameTableRequest.class));
      return null;
    }
    if (!"namespaces".equals(parts[1])) {
      throw new RouteNotFound(method + " " + path);
    }
    if (parts.length == 2) {
      if ("GET".equals(method)) {
        String parent = query.get("parent");
        Namespace ns = parent == null ? Namespace.empty() : RESTUtil.decodeNamespace(parent, SEPARATOR);
        return query.containsKey("pageSize")
            ? CatalogHandlers.listNamespaces(catalog, ns, query.get("pageToken"), query.get("pageSize"))
            : CatalogHandlers.listNamespaces(catalog, ns);
      }
      if ("POST".equals(method)) {
        return CatalogHandlers.createNamespace(catalog, read(exchange, CreateNamespaceRequest.class));
      }
      throw new RouteNotFound(method + " " + path);
    }
    Namespace namespace = RESTUtil.decodeNamespace(parts[2], SEPARATOR);
    if (parts.length == 3) {
      switch (method) {
        case "GET": return CatalogHandlers.loadNamespace(catalog, namespace);
        case "HEAD": CatalogHandlers.namespaceExists(catalog, namespace); return null;
        case "DELETE": CatalogHandlers.dropNamespace(catalog, namespace); return null;
        default: throw new RouteNotFound(method + " " + path);
      }
    }
    String section = parts[3];
    if (parts.length == 4 && "properties".equals(section) && "POST".equals(method)) {
      return CatalogHandlers.updateNamespaceProperties(
          catalog, namespace, read(exchange, UpdateNamespacePropertiesRequest.class));
    }
    if (parts.length == 4 && "register".equals(section) && "POST".equals(method)) {
      return CatalogHandlers.registerTable(catalog, namespace, read(exchange, RegisterTableRequest.class));
    }
    if (!"tables".equals(section)) {
      throw new RouteNotFound(method + " " + path);
    }
    if (parts.length == 4) {
      if ("GET".equals(method)) {
        return query.containsKey("pageSize")
            ? CatalogHandlers.listTables(catalog, namespace, query.get("pageToken"), query.get("pageSize"))
            : CatalogHandlers.listTables(catalog, namespace);
      }
      if ("POST".equals(method)) {
        CreateTableRequest request = read(exchange, CreateTableRequest.class);
        return request.stageCreate()
            ? CatalogHandlers.stageTableCreate(catalog, namespace, request)
            : CatalogHandlers.createTable(catalog, namespace, request);
      }
      throw new RouteNotFound(method + " " + path);
    }
    TableIdentifier ident = TableIdentifier.of(namespace, RESTUtil.decodeString(parts[4]));
    if (parts.length == 5) {
      switch (method) {
        case "GET":
          return CatalogHandlers.loadTable(catalog, ident, RESTCatalogProperties.SnapshotMode.ALL);
        case "HEAD": CatalogHandlers.tableExists(catalog, ident); return null;
        case "POST": return CatalogHandlers.updateTable(catalog, ident, read(exchange, UpdateTableRequest.class));
        case "DELETE":
          if ("true".equalsIgnoreCase(query.get("purgeRequested"))) {
            CatalogHandlers.purgeTable(catalog, ident);
          } else {
            CatalogHandlers.dropTable(catalog, ident);
          }
          return null;
        default: throw new RouteNotFound(method + " " + path);
      }
    }
    if (parts.length == 6 && "metrics".equals(parts[5]) && "POST".equals(method)) {
      exchange.getRequestBody().readAllBytes(); // metrics reports are accepted and dropped
      return null;
    }
    throw new RouteNotFound(method + " " + path);
  }

  private <T> T read(HttpExchange exchange, Class<T> type) throws IOException {
    try (InputStream body = exchange.getRequestBody()) {
      return mapper.readValue(body, type);
    }
  }

  private static Map<String, String> query(String raw) {
    Map<String, String> result = new HashMap<>();
    if (raw == null || raw.isEmpty()) {
      return result;
    }
    for (String pair : raw.split("&")) {
      int eq = pair.indexOf('=');
      if (eq > 0) {
        // keep namespaces encoded (decodeNamespace splits on the encoded separator)
        String key = RESTUtil.decodeString(pair.substring(0, eq));
        String value = pair.substring(eq + 1);
        result.put(key, "parent".equals(key) ? value : RESTUtil.decodeString(value));
      }
    }
    return result;
  }

  private void sendError(HttpExchange exchange, int code, String type, String message) throws IOException {
    ErrorResponse error =
        ErrorResponse.builder().responseCode(code).withType(type).withMessage(message).build();
    send(exchange, code, "HEAD".equals(exchange.getRequestMethod()) ? null : mapper.writeValueAsBytes(error));
  }

  private static void send(HttpExchange exchange, int code, byte[] body) throws IOException {
    if (body == null) {
      exchange.sendResponseHeaders(code, -1);
      return;
    }
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(code, body.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(body);
    }
  }

  /** No route for this method and path. */
  private static final class RouteNotFound extends RuntimeException {
    RouteNotFound(String what) {
      super("no such endpoint: " + what);
    }
  }
}
