package io.pyicebergcrypto.bridge;

import java.io.IOException;
import java.io.ObjectOutputStream;
import java.net.URLEncoder;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import java.util.StringJoiner;
import java.util.TreeMap;
import java.util.function.Function;
import org.apache.iceberg.encryption.KeyManagementClient;

/**
 * Iceberg {@link KeyManagementClient} that delegates to a KMS written in Python.
 *
 * <p>Configure it as the catalog's {@code encryption.kms-impl}; the catalog property {@code
 * pyiceberg-crypto.kms-name} (default {@code default}) names the Python KMS registered with {@code
 * pyiceberg_crypto.bridge.register_kms}. {@link #initialize} only records the name and the
 * properties to forward: the Python side is resolved lazily on the first call, so catalogs can be
 * created before registration.
 *
 * <p>Catalog properties under {@code pyiceberg-crypto.kms.} are forwarded, without that prefix, to
 * the Python KMS's {@code initialize(properties)} before its first use.
 *
 * <p>Serializable like every Iceberg KMS client, and Iceberg ships it to executors inside task
 * data. When serialized in a JVM where its name is registered, it carries that registration's
 * endpoint (host, port, auth token, object id, timeout): an executor JVM that deserializes it
 * installs the endpoint in its own {@link PythonKmsRegistry} and calls the driver's Python KMS
 * directly. The token therefore travels only inside serialized tasks and broadcasts (Spark RPC),
 * never in a Spark conf, log or the UI; {@link #toString()} does not show it.
 *
 * <p>Or, with the catalog property {@code pyiceberg-crypto.kms-service=HOST:PORT} (and {@code
 * .token-file}, {@code .certificate-sha256}; see {@link KmsServiceAddress}), it calls a {@code
 * pyiceberg-crypto kms serve} service: no Python process in the application (spark-sql, the
 * Thrift server, Spark Connect, JVM jobs). Each JVM reads the token from the file; one that
 * cannot (an executor on a host without the file) uses the token the driver's client carries
 * inside the task, as above.
 */
public class PythonKmsClient implements KeyManagementClient {
  private static final long serialVersionUID = 2L;
  public static final String KMS_NAME_PROPERTY = "pyiceberg-crypto.kms-name";
  public static final String DEFAULT_KMS_NAME = "default";
  /** Catalog properties with this prefix are passed (prefix removed) to the Python initialize(). */
  public static final String FORWARDED_PROPERTY_PREFIX = "pyiceberg-crypto.kms.";

  private String kmsName = DEFAULT_KMS_NAME;
  private String forwardedProperties = "";
  // Refreshed whenever the client is used or serialized in a JVM where the name is registered; a
  // plain field (not only writeObject) so that field-based serializers such as Kryo carry it too.
  private volatile ShippedEndpoint shipped;
  // A kms serve service (null: a KMS registered by a PySpark driver) and the token this client last
  // used for it, carried to executors like the endpoint above.
  private KmsServiceAddress service;
  private volatile String serviceToken;

  @Override
  public void initialize(Map<String, String> properties) {
    String name = properties == null ? null : properties.get(KMS_NAME_PROPERTY);
    this.kmsName = (name == null || name.isBlank()) ? DEFAULT_KMS_NAME : name;
    this.forwardedProperties = encodeForwarded(properties);
    this.service = KmsServiceAddress.fromProperties(properties);
    if (service == null) {
      this.shipped = PythonKmsRegistry.shippable(kmsName);
    } else {
      try {
        this.serviceToken = KmsServiceConnections.token(service, null, false);
      } catch (PythonKmsException e) {
        this.serviceToken = null; // reported at the first key operation, where Iceberg names it
      }
    }
  }

  public String kmsName() {
    return kmsName;
  }

  /** The forwarded properties, URL-encoded (what the Python side receives). */
  public String forwardedProperties() {
    return forwardedProperties;
  }

  @Override
  public ByteBuffer wrapKey(ByteBuffer key, String wrappingKeyId) {
    byte[] raw = toArray(key);
    try {
      byte[] wrapped = call("wrap a key", wrappingKeyId, kms -> kms.wrapKey(raw, wrappingKeyId));
      return ByteBuffer.wrap(requireNonEmpty(wrapped, "wrap a key", wrappingKeyId));
    } finally {
      Arrays.fill(raw, (byte) 0);
    }
  }

  @Override
  public ByteBuffer unwrapKey(ByteBuffer wrappedKey, String wrappingKeyId) {
    byte[] wrapped = toArray(wrappedKey);
    byte[] key = call("unwrap a key", wrappingKeyId, kms -> kms.unwrapKey(wrapped, wrappingKeyId));
    return ByteBuffer.wrap(requireNonEmpty(key, "unwrap a key", wrappingKeyId));
  }

  @Override
  public boolean supportsKeyGeneration() {
    return call("query key generation support", "-", PythonKms::supportsKeyGeneration);
  }

  @Override
  public KeyGenerationResult generateKey(String wrappingKeyId) {
    byte[] encoded = call("generate a key", wrappingKeyId, kms -> kms.generateKey(wrappingKeyId));
    if (encoded == null || encoded.length < 3) {
      throw failure("generate a key", wrappingKeyId, "the Python KMS returned no key");
    }
    int keyLength = ((encoded[0] & 0xff) << 8) | (encoded[1] & 0xff);
    if (keyLength == 0 || 2 + keyLength >= encoded.length) {
      throw failure("generate a key", wrappingKeyId, "the Python KMS returned a malformed result");
    }
    ByteBuffer key = ByteBuffer.wrap(Arrays.copyOfRange(encoded, 2, 2 + keyLength));
    ByteBuffer wrapped = ByteBuffer.wrap(Arrays.copyOfRange(encoded, 2 + keyLength, encoded.length));
    Arrays.fill(encoded, (byte) 0);
    return new KeyGenerationResult(key, wrapped);
  }

  private PythonKmsEndpoint endpoint(boolean rereadToken) {
    if (service != null) {
      String token;
      token = KmsServiceConnections.token(service, serviceToken, rereadToken);
      this.serviceToken = token;
      return KmsServiceConnections.endpoint(label(), service, token);
    }
    PythonKmsEndpoint endpoint = PythonKmsRegistry.resolve(kmsName, shipped);
    if (endpoint.registeredHere()) {
      this.shipped = endpoint.address().forShipping();
    }
    return endpoint;
  }

  private <T> T call(String operation, String keyId, Function<PythonKms, T> body) {
    if (service != null && service.replicas() > 1) {
      return callReplicas(operation, keyId, body);
    }
    PythonKmsEndpoint endpoint;
    try {
      endpoint = endpoint(false);
    } catch (PythonKmsException e) {
      if (service == null) {
        throw e; // the registry's message says what to register
      }
      throw failure(operation, keyId, e.getMessage());
    }
    try {
      return attempt(endpoint, operation, keyId, body, false);
    } catch (RetryableServiceFailure first) {
      // A kms serve service restarted (new token; our pooled connections are dead), closed our idle
      // connections (--idle-timeout), or refused the token: drop the other pooled connections,
      // re-read the file and try once more on a fresh connection. Key operations may be repeated
      // safely (a wrap gives another valid wrapped key; nothing is stored).
      endpoint.dropIdleConnections();
      PythonKmsEndpoint again = endpoint(true);
      try {
        return attempt(again, operation, keyId, body, true);
      } catch (RetryableServiceFailure second) {
        // only a refused token comes back here: the last attempt reports network failures itself
      }
      throw failure(operation, keyId, "the service refused this JVM's token (" + service.tokenFile
          + " re-read just now" + (Files.isReadable(Path.of(service.tokenFile)) ? "" : ": unreadable on this host,"
          + " so the token came with the task from the driver") + "). Was the service restarted with a"
          + " new token? JVMs re-read the token file when it changes and when a call is refused; an"
          + " executor without the file gets the new token with the next job's tasks");
    }
  }

  /** The first pause before trying a replica again after all failed once; doubled each round, with jitter. */
  static final long FAILOVER_BACKOFF_MILLIS = 50;
  /** The longest pause between two attempts. */
  static final long FAILOVER_BACKOFF_MAX_MILLIS = 1_000;
  /** Rounds over the replicas at most (within the timeout): a rolling restart may take one down after another. */
  static final int FAILOVER_ROUNDS = 3;

  private static final java.util.logging.Logger LOG = java.util.logging.Logger.getLogger(PythonKmsClient.class.getName());

  /**
   * A call to a service with replicas: at the replica this JVM prefers, then at the next ones in
   * turn, until one answers, at most {@link #FAILOVER_ROUNDS} rounds and within the service's
   * timeout (the whole call's bound; an attempt begun before it ends may take its attempt timeout).
   * A replica that cannot be reached, does not answer within the attempt timeout (a hung replica
   * costs that, not the whole timeout),
   * fails the TLS or token handshake, refuses this JVM's token, or says it cannot serve (its KMS
   * call timed out, its audit trail is unavailable) is passed over for the next, with one log line.
   * Any other answer of the Python side (a refusal by the policy, an unknown key, a KMS error) is
   * the answer: replicas share one configuration, so another would say the same. Key operations
   * may be repeated safely (a wrap whose answer was lost is made again; nothing is stored).
   */
  private <T> T callReplicas(String operation, String keyId, Function<PythonKms, T> body) {
    int replicas = service.replicas();
    long deadline = System.nanoTime() + service.timeoutMillis * 1_000_000L;
    int first = KmsServiceConnections.preferred(service);
    Map<Integer, String> failures = new TreeMap<>();
    boolean rereadToken = false;
    int attempts = replicas * FAILOVER_ROUNDS;
    for (int attempt = 0; attempt < attempts; attempt++) {
      int index = (first + attempt) % replicas;
      if (attempt > 0 && index == first) {  // a new round: every replica failed once, pause
        long round = attempt / replicas;
        long pause = Math.min(FAILOVER_BACKOFF_MAX_MILLIS, FAILOVER_BACKOFF_MILLIS << (2 * (round - 1)));
        pause += java.util.concurrent.ThreadLocalRandom.current().nextLong(pause / 2 + 1);
        long left = (deadline - System.nanoTime()) / 1_000_000L;
        if (left <= pause) {
          break;
        }
        try {
          Thread.sleep(pause);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          break;
        }
      }
      if (attempt > 0 && deadline - System.nanoTime() <= 0) {
        break;
      }
      String token;
      try {
        token = KmsServiceConnections.token(service, serviceToken, rereadToken);
      } catch (PythonKmsException e) {
        throw failure(operation, keyId, e.getMessage());
      }
      this.serviceToken = token;
      rereadToken = false;
      PythonKmsEndpoint endpoint;
      try {
        endpoint = KmsServiceConnections.endpoint(label(), service, index, token);
      } catch (PythonKmsException e) {
        failures.put(index, e.getMessage());
        LOG.warning(String.format("pyiceberg-crypto: KMS service replica %s: %s: failing over to %s",
            service.replicaKey(index), e.getMessage(), service.replicaKey((index + 1) % replicas)));
        continue;
      }
      String reason;
      try {
        T answer = body.apply(endpoint.proxy());
        if (index != first) {
          KmsServiceConnections.prefer(service, first, index);
        }
        return answer;
      } catch (PythonKmsException e) {
        throw e;
      } catch (RuntimeException e) {
        String message = String.valueOf(e.getMessage());
        if (message.contains("Return Message:")) {
          String python = pythonMessage(e, endpoint);
          if (!replicaUnavailable(python)) {
            throw replicaFailure(operation, keyId, index, python);  // the service's answer
          }
          reason = python;
        } else if (tokenRefused(e)) {
          endpoint.dropIdleConnections();
          rereadToken = true;
          reason = pythonMessage(e, endpoint) + "; " + service.tokenFile + " is re-read for the next attempt";
        } else if (e instanceof py4j.Py4JException) {
          endpoint.dropIdleConnections();
          reason = pythonMessage(e, endpoint);
        } else {
          throw failure(operation, keyId, pythonMessage(e, endpoint));
        }
      }
      failures.put(index, reason);
      int next = (index + 1) % replicas;
      LOG.warning(String.format(
          "pyiceberg-crypto: KMS service replica %s failed to %s (%s): failing over to %s",
          service.replicaKey(index), operation, reason, service.replicaKey(next)));
    }
    StringJoiner each = new StringJoiner("; ");
    for (int i = 0; i < replicas; i++) {
      each.add(service.replicaKey(i) + ": " + failures.getOrDefault(i, "not tried within the timeout"));
    }
    throw failure(operation, keyId, "no replica of the KMS service answered (" + replicas + " replicas, "
        + service.timeoutMillis + " ms timeout): " + each);
  }

  /** A Python-side answer that says this replica cannot serve now (not what the service decided). */
  private static boolean replicaUnavailable(String pythonMessage) {
    return pythonMessage.startsWith("KmsTimeoutError")
        || pythonMessage.contains("cannot record this operation in its audit trail");
  }

  private static boolean tokenRefused(Throwable error) {
    for (Throwable t = error; t != null; t = t.getCause()) {
      String message = String.valueOf(t.getMessage());
      if (message.contains("Authentication with callback server unsuccessful")
          || message.contains("refused this JVM's token") || message.contains("did not prove it knows")) {
        return true;
      }
    }
    return false;
  }

  private PythonKmsException replicaFailure(String operation, String keyId, int index, String reason) {
    return new PythonKmsException(String.format(
        "KMS service %s (pyiceberg-crypto kms serve, replica %s) failed to %s with key id '%s': %s",
        service.key(), service.replicaKey(index), operation, keyId, reason));
  }

  private <T> T attempt(
      PythonKmsEndpoint endpoint, String operation, String keyId, Function<PythonKms, T> body, boolean last)
      throws RetryableServiceFailure {
    try {
      // Only the driver JVM forwards its catalog properties (over the driver token): a kms serve
      // service is configured by its operator, and executors carry the driver's properties, which
      // the driver sent before shipping them (writeObject).
      if (service == null) {
        endpoint.ensureInitialized(forwardedProperties);
      }
    } catch (RuntimeException e) {
      retryable(e, last);
      throw failure("initialize (before it could " + operation + ")", keyId, pythonMessage(e, endpoint));
    }
    try {
      return body.apply(endpoint.proxy());
    } catch (PythonKmsException e) {
      throw e;
    } catch (RuntimeException e) {
      retryable(e, last);
      throw failure(operation, keyId, pythonMessage(e, endpoint));
    }
  }

  /**
   * For a KMS service only: a refused token (Py4J's failed {@code A} command), or, on a first
   * attempt, a network failure (a pooled connection to a stopped or restarted service). Errors the
   * Python KMS raised are never retried.
   */
  private void retryable(Throwable error, boolean last) throws RetryableServiceFailure {
    if (service == null || String.valueOf(error.getMessage()).contains("Return Message:")) {
      return;
    }
    for (Throwable t = error; t != null; t = t.getCause()) {
      String message = String.valueOf(t.getMessage());
      if (message.contains("Authentication with callback server unsuccessful")
          || message.contains("Could not authenticate connection")) {
        throw new RetryableServiceFailure();
      }
    }
    if (!last && error instanceof py4j.Py4JException) {
      throw new RetryableServiceFailure();
    }
  }

  private static final class RetryableServiceFailure extends Exception {
    private static final long serialVersionUID = 1L;

    RetryableServiceFailure() {
      super(null, null, false, false);
    }
  }

  /** How errors name this KMS: the registered name, or the service's address. */
  private String label() {
    return service == null ? "Python KMS '" + kmsName + "'" : "KMS service " + service.key() + " (pyiceberg-crypto kms serve)";
  }

  private PythonKmsException failure(String operation, String keyId, String reason) {
    // No cause attached on purpose: Py4J's messages embed whole commands (key bytes) or tracebacks.
    return new PythonKmsException(
        String.format("%s failed to %s with key id '%s': %s", label(), operation, keyId, reason));
  }

  private byte[] requireNonEmpty(byte[] bytes, String operation, String keyId) {
    if (bytes == null || bytes.length == 0) {
      throw failure(operation, keyId, "the Python KMS returned no bytes");
    }
    return bytes;
  }

  /**
   * Py4J reports a Python exception as "An exception was raised by the Python Proxy. Return
   * Message: ExceptionType: message": keep that last line. Network failures (Python side gone or
   * unreachable, no answer within the timeout) are named as such, with the endpoint's address so
   * that the person reading a task failure knows which listener this JVM could not reach. Never
   * returns Py4J's network messages: they contain the whole command, i.e. key bytes.
   */
  static String pythonMessage(Throwable error, PythonKmsEndpoint endpoint) {
    String message = String.valueOf(error.getMessage());
    if (message.contains("Return Message:")) {
      String[] lines = message.strip().split("\n");
      String last = lines[lines.length - 1].strip();
      int marker = last.indexOf("Return Message:");
      return marker >= 0 ? last.substring(marker + "Return Message:".length()).strip() : last;
    }
    ShippedEndpoint at = endpoint.address();
    String where = at.host + ":" + at.port + (at.tls() ? ", TLS" : "");
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof PythonKmsEndpoint.HandshakeException) {
        return t.getMessage() + " (" + where + ")";  // our own text: no secret in it
      }
    }
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof java.net.SocketTimeoutException) {
        if (String.valueOf(t.getMessage()).toLowerCase(java.util.Locale.ROOT).contains("connect")) {
          return "the Python KMS is unreachable at " + where + ": no connection within its timeout of "
              + at.timeoutMillis + " ms (a firewall, or no route from this host to the driver?)"
              + reachabilityHint(endpoint);
        }
        return "no answer from the Python KMS within its timeout (" + where
            + "; register_kms(..., kms_timeout=...))";
      }
      if (t instanceof javax.net.ssl.SSLException) {
        return "the TLS handshake with the Python KMS failed (not the listener registered for this"
            + " name: " + t.getClass().getSimpleName() + ", at " + where + ")";
      }
      if (t instanceof java.net.ConnectException || t instanceof java.net.NoRouteToHostException) {
        return "the Python KMS is unreachable at " + where + " (" + t.getClass().getSimpleName()
            + ": its callback server is stopped, or not listening where this host can reach it: was the"
            + " Python process or SparkContext stopped, or the KMS unregistered?)" + reachabilityHint(endpoint);
      }
    }
    if (error instanceof py4j.Py4JNetworkException || message.contains("sending a command")
        || message.contains("communication channel")) {
      return "the Python KMS is unreachable or did not answer (" + where + ")"
          + (at.isService() ? reachabilityHint(endpoint) : "");
    }
    return error.getClass().getSimpleName();
  }

  /** What to do when this JVM cannot reach the endpoint: loopback from another JVM says it all. */
  private static String reachabilityHint(PythonKmsEndpoint endpoint) {
    String host = endpoint.address().host;
    if (endpoint.address().isService()) {
      return ". Is pyiceberg-crypto kms serve running there, listening on an address this host can reach?";
    }
    boolean loopback = host.startsWith("127.") || host.equals("::1") || host.equals("localhost");
    if (loopback && !endpoint.registeredHere()) {
      return ". It was registered on loopback (" + host + "), which executors on other machines cannot"
          + " reach: register it with register_kms(..., bind_address=<the driver's address, reachable"
          + " from executors>)";
    }
    return ". On a cluster, executors reach the driver only if the KMS was registered with"
        + " bind_address=<the driver's address, reachable from executors>";
  }

  static String encodeForwarded(Map<String, String> properties) {
    if (properties == null) {
      return "";
    }
    Map<String, String> sorted = new TreeMap<>();
    for (Map.Entry<String, String> entry : properties.entrySet()) {
      String key = entry.getKey();
      if (key != null && key.startsWith(FORWARDED_PROPERTY_PREFIX)
          && key.length() > FORWARDED_PROPERTY_PREFIX.length()) {
        sorted.put(key.substring(FORWARDED_PROPERTY_PREFIX.length()), String.valueOf(entry.getValue()));
      }
    }
    StringJoiner joined = new StringJoiner("&");
    for (Map.Entry<String, String> entry : sorted.entrySet()) {
      joined.add(
          URLEncoder.encode(entry.getKey(), StandardCharsets.UTF_8)
              + "="
              + URLEncoder.encode(entry.getValue(), StandardCharsets.UTF_8));
    }
    return joined.toString();
  }

  private void writeObject(ObjectOutputStream out) throws IOException {
    if (service == null) {
      ShippedEndpoint current = PythonKmsRegistry.shippable(kmsName);
      if (current != null) {
        this.shipped = current;
        // Executors never initialize the driver's KMS (their token may not): the driver does it
        // now, before its properties travel, if no key operation did yet. Best effort: a failure
        // shows at the first key operation.
        try {
          PythonKmsEndpoint here = PythonKmsRegistry.lookup(kmsName);
          if (here.registeredHere()) {
            here.ensureInitialized(forwardedProperties);
          }
        } catch (RuntimeException e) {
          // reported by the key operation that needs it
        }
      }
    } else if (serviceToken == null) {
      try {
        this.serviceToken = KmsServiceConnections.token(service, null, false);
      } catch (PythonKmsException e) {
        // unreadable here too: the receiving JVM reports it at its first key operation
      }
    }
    out.defaultWriteObject();
  }

  private static byte[] toArray(ByteBuffer buffer) {
    ByteBuffer copy = buffer.duplicate();
    byte[] bytes = new byte[copy.remaining()];
    copy.get(bytes);
    return bytes;
  }

  @Override
  public String toString() {
    return service == null
        ? "PythonKmsClient{kmsName=" + kmsName + "}"
        : "PythonKmsClient{service=" + service + "}";
  }
}
