package io.pyicebergcrypto.bridge;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Per-JVM connections to {@code pyiceberg-crypto kms serve} services, one per HOST:PORT, and the
 * tokens read from their token files.
 *
 * <p>When this JVM re-reads the token file: on first use, when the file's modification time or size
 * changed (checked at most every {@link #RECHECK_MILLIS} ms, a cheap {@code stat}), and at once
 * when the service refuses the token (it was restarted with a new one). A JVM that cannot read the
 * file (an executor on a host without it) uses the token the driver shipped inside the task's
 * serialized KMS client; the token never travels any other way.
 */
final class KmsServiceConnections {
  static final long RECHECK_MILLIS = 1000;

  private static final Map<String, Connection> CONNECTIONS = new ConcurrentHashMap<>();
  private static final Map<String, TokenFile> TOKENS = new ConcurrentHashMap<>();
  private static final Map<String, java.util.concurrent.atomic.AtomicInteger> PREFERRED = new ConcurrentHashMap<>();
  /** With replicas: how long a connection (TCP, TLS, the token handshake) may take before the next replica. */
  static final int REPLICA_CONNECT_MILLIS = 5_000;

  private KmsServiceConnections() {}

  private static final class Connection {
    final String token;
    final PythonKmsEndpoint endpoint;

    Connection(String token, PythonKmsEndpoint endpoint) {
      this.token = token;
      this.endpoint = endpoint;
    }
  }

  /** What this JVM last read from a token file, and when it looked. */
  private static final class TokenFile {
    final String token;  // null: unreadable here
    final String problem;  // why it is unreadable (no secret)
    final long modified;
    final long size;
    final long checkedAt;

    TokenFile(String token, String problem, long modified, long size, long checkedAt) {
      this.token = token;
      this.problem = problem;
      this.modified = modified;
      this.size = size;
      this.checkedAt = checkedAt;
    }
  }

  /**
   * The token this JVM should present to {@code service}: the file's (re-read when it changed, or
   * now if {@code reread}), else the driver's {@code shipped} one.
   *
   * @throws PythonKmsException when neither is available (naming the file and why)
   */
  static String token(KmsServiceAddress service, String shipped, boolean reread) {
    TokenFile file = readToken(service.tokenFile, reread);
    if (file.token != null) {
      return file.token;
    }
    if (shipped != null) {
      return shipped;
    }
    throw new PythonKmsException(
        "cannot read the token of the KMS service " + service + " from " + service.tokenFile + " on this"
            + " host (" + file.problem + "). pyiceberg-crypto kms serve --token-file writes it at start and"
            + " removes it when it stops: is the service running? Every JVM that plans Iceberg work (the"
            + " driver) must be able to read the file; executors get the token with their tasks");
  }

  /** The connection for {@code service} authenticated with {@code token} (replaced when the token changed). */
  static PythonKmsEndpoint endpoint(String label, KmsServiceAddress service, String token) {
    return endpoint(label, service, 0, token);
  }

  /**
   * The replica this JVM tries first for {@code service}: picked at random once per JVM (so that
   * executors spread over the replicas), then the last one that answered after a failover.
   */
  static int preferred(KmsServiceAddress service) {
    if (service.replicas() == 1) {
      return 0;
    }
    return PREFERRED
        .computeIfAbsent(service.key(), key -> new java.util.concurrent.atomic.AtomicInteger(
            java.util.concurrent.ThreadLocalRandom.current().nextInt(service.replicas())))
        .get() % service.replicas();
  }

  /** Replica {@code index} answered after {@code from} failed: start there from now on. */
  static void prefer(KmsServiceAddress service, int from, int index) {
    java.util.concurrent.atomic.AtomicInteger current = PREFERRED.get(service.key());
    if (current != null) {
      current.compareAndSet(from, index);
    }
  }

  /** The connection to replica {@code index} of {@code service}, authenticated with {@code token}. */
  static PythonKmsEndpoint endpoint(String label, KmsServiceAddress service, int index, String token) {
    String connectionKey = service.connectionKey(index);
    Connection current = CONNECTIONS.get(connectionKey);
    if (current != null && current.token.equals(token)) {
      return current.endpoint;
    }
    Connection[] replaced = new Connection[1];
    Connection made =
        CONNECTIONS.compute(
            connectionKey,
            (key, existing) -> {
              if (existing != null && existing.token.equals(token)) {
                return existing;
              }
              replaced[0] = existing;
              ShippedEndpoint address =
                  new ShippedEndpoint(
                      ShippedEndpoint.SERVICE, 0, service.hosts[index], service.ports[index], token,
                      KmsServiceAddress.OBJECT_ID, service.callMillis(), null, service.certificateSha256,
                      roleOf(token), null);
              // Replicas: a replica that does not accept within REPLICA_CONNECT_MILLIS, or does not
              // answer a call within the attempt timeout, is passed over for the next.
              int connectMillis = service.replicas() == 1
                  ? service.timeoutMillis : Math.min(service.timeoutMillis, REPLICA_CONNECT_MILLIS);
              try {
                return new Connection(token, new PythonKmsEndpoint(label, address, false, connectMillis));
              } catch (java.net.UnknownHostException | java.security.GeneralSecurityException e) {
                throw new PythonKmsException(
                    "cannot set up the client of the KMS service " + service + ": " + e.getMessage());
              }
            });
    if (replaced[0] != null) {
      replaced[0].endpoint.close();
    }
    return made.endpoint;
  }

  /**
   * The role a service token proves: {@code NAME} for a named token ({@code NAME:HEX}, written by
   * {@code kms serve} for a policy's {@code py4j:NAME} principal), else the client role.
   */
  static String roleOf(String token) {
    int colon = token.indexOf(':');
    if (colon < 1 || colon > 64) {
      return ShippedEndpoint.CLIENT_ROLE;
    }
    String name = token.substring(0, colon);
    if (!name.matches("[A-Za-z0-9._-]+") || ShippedEndpoint.DRIVER_ROLE.equals(name)) {
      return ShippedEndpoint.CLIENT_ROLE;
    }
    return name;
  }

  private static TokenFile readToken(String path, boolean force) {
    long now = System.currentTimeMillis();
    TokenFile known = TOKENS.get(path);
    if (!force && known != null && now - known.checkedAt < RECHECK_MILLIS) {
      return known;
    }
    TokenFile fresh;
    try {
      Path file = Path.of(path);
      BasicFileAttributes attributes = Files.readAttributes(file, BasicFileAttributes.class);
      long modified = attributes.lastModifiedTime().toMillis();
      if (!force && known != null && known.token != null && known.modified == modified
          && known.size == attributes.size()) {
        fresh = new TokenFile(known.token, null, modified, known.size, now);
      } else {
        String token = new String(Files.readAllBytes(file), StandardCharsets.US_ASCII).strip();
        fresh = token.isEmpty()
            ? new TokenFile(null, "the file is empty", modified, attributes.size(), now)
            : new TokenFile(token, null, modified, attributes.size(), now);
      }
    } catch (NoSuchFileException e) {
      fresh = new TokenFile(null, "no such file", 0, 0, now);
    } catch (java.nio.file.AccessDeniedException e) {
      fresh = new TokenFile(null, "permission denied", 0, 0, now);
    } catch (IOException | SecurityException | java.nio.file.InvalidPathException e) {
      fresh = new TokenFile(null, e.getClass().getSimpleName(), 0, 0, now);
    }
    TOKENS.put(path, fresh);
    return fresh;
  }
}
