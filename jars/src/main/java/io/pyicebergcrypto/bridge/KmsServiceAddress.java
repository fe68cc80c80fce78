package io.pyicebergcrypto.bridge;

import java.io.Serializable;
import java.util.Locale;
import java.util.Map;

/**
 * Where a {@code pyiceberg-crypto kms serve} service listens and how a JVM authenticates to it,
 * from catalog properties alone (no Python process in this application):
 *
 * <pre>
 *   pyiceberg-crypto.kms-service                     = HOST:PORT, or HOST:PORT,HOST:PORT,... (replicas)
 *   pyiceberg-crypto.kms-service.token-file          = /run/lake/kms.token   (read by each JVM)
 *   pyiceberg-crypto.kms-service.certificate-sha256  = hex SHA-256 of the service's certificate
 *                                                      (required unless HOST is loopback; the same
 *                                                      for every replica: kms serve --replica)
 *   pyiceberg-crypto.kms-service.timeout-ms          = 60000 (connect and per call; with replicas,
 *                                                      a call's whole bound, failovers included)
 *   pyiceberg-crypto.kms-service.attempt-timeout-ms  = 10000 (with replicas: how long one replica
 *                                                      has to answer one call before the next is
 *                                                      tried; at most timeout-ms)
 * </pre>
 *
 * <p>A list names replicas of one service ({@code kms serve --replica}: the same token file and TLS
 * identity), which {@link PythonKmsClient} fails over between; {@link #host} and {@link #port} are
 * the first one's.
 *
 * <p>Holds no secret: the token is read from the file when the client needs it ({@link
 * KmsServiceConnections}), never kept in a property, so it cannot reach a Spark conf, the UI or a
 * log.
 */
final class KmsServiceAddress implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String PROPERTY = "pyiceberg-crypto.kms-service";
  static final String TOKEN_FILE_PROPERTY = PROPERTY + ".token-file";
  static final String CERTIFICATE_SHA256_PROPERTY = PROPERTY + ".certificate-sha256";
  static final String TIMEOUT_PROPERTY = PROPERTY + ".timeout-ms";
  static final int DEFAULT_TIMEOUT_MILLIS = 60_000;
  static final String ATTEMPT_TIMEOUT_PROPERTY = PROPERTY + ".attempt-timeout-ms";
  /** With replicas, one replica's time to answer one call: a hung replica costs this, not the timeout. */
  static final int DEFAULT_ATTEMPT_TIMEOUT_MILLIS = 10_000;
  /** The id the service registers its KMS object under (Py4J object id). */
  static final String OBJECT_ID = "pyiceberg-crypto-kms";

  final String host;
  final int port;
  /** Every replica, in the order the property lists them (one entry: a single service). */
  final String[] hosts;
  final int[] ports;
  final String tokenFile;
  final byte[] certificateSha256;
  final int timeoutMillis;
  /** With replicas: one attempt's bound (at most {@link #timeoutMillis}). */
  final int attemptTimeoutMillis;

  private KmsServiceAddress(
      String[] hosts, int[] ports, String tokenFile, byte[] certificateSha256, int timeoutMillis,
      int attemptTimeoutMillis) {
    this.hosts = hosts;
    this.ports = ports;
    this.host = hosts[0];
    this.port = ports[0];
    this.tokenFile = tokenFile;
    this.certificateSha256 = certificateSha256;
    this.timeoutMillis = timeoutMillis;
    this.attemptTimeoutMillis = Math.min(attemptTimeoutMillis, timeoutMillis);
  }

  /** The service named by {@code properties}, or null when they name none (a registered KMS). */
  static KmsServiceAddress fromProperties(Map<String, String> properties) {
    String service = properties == null ? null : properties.get(PROPERTY);
    if (service == null || service.isBlank()) {
      return null;
    }
    service = service.strip();
    String[] entries = service.split(",", -1);
    String[] hosts = new String[entries.length];
    int[] ports = new int[entries.length];
    java.util.Set<String> seen = new java.util.HashSet<>();
    for (int i = 0; i < entries.length; i++) {
      String entry = entries[i].strip();
      String what = entries.length == 1 ? "'" + service + "'" : "'" + entry + "' in '" + service + "'";
      int colon = entry.lastIndexOf(':');
      if (colon <= 0 || colon == entry.length() - 1) {
        throw invalid(PROPERTY + " must be HOST:PORT" + (entries.length == 1 ? "" : " (or a comma-separated list)")
            + ", got " + what);
      }
      String host = entry.substring(0, colon);
      if (host.startsWith("[") && host.endsWith("]")) {
        host = host.substring(1, host.length() - 1);
      }
      int port;
      try {
        port = Integer.parseInt(entry.substring(colon + 1));
      } catch (NumberFormatException e) {
        throw invalid(PROPERTY + " must be HOST:PORT" + (entries.length == 1 ? "" : " (or a comma-separated list)")
            + ", got " + what);
      }
      if (port < 1 || port > 65535) {
        throw invalid(PROPERTY + " has an invalid port: " + port);
      }
      hosts[i] = host.strip();
      ports[i] = port;
      if (!seen.add(hosts[i] + ":" + port)) {
        throw invalid(PROPERTY + " lists the replica " + hosts[i] + ":" + port + " twice, in '" + service + "'");
      }
    }
    String tokenFile = properties.get(TOKEN_FILE_PROPERTY);
    if (tokenFile == null || tokenFile.isBlank()) {
      throw invalid(PROPERTY + " is set but " + TOKEN_FILE_PROPERTY + " is not: the JVMs read the"
          + " service's token from that file (written by pyiceberg-crypto kms serve --token-file)");
    }
    String pin = properties.get(CERTIFICATE_SHA256_PROPERTY);
    byte[] sha256 = null;
    if (pin != null && !pin.isBlank()) {
      sha256 = parseHex(pin.strip().replace(":", "").toLowerCase(Locale.ROOT));
      if (sha256 == null || sha256.length != 32) {
        throw invalid(CERTIFICATE_SHA256_PROPERTY + " must be 64 hex digits (the SHA-256 that"
            + " pyiceberg-crypto kms serve prints), got " + pin.strip().length() + " characters");
      }
    } else {
      for (int i = 0; i < hosts.length; i++) {
        if (!isLoopback(hosts[i])) {
          throw invalid("the KMS service " + hosts[i] + ":" + ports[i] + " is not on loopback, so it speaks TLS"
              + " and clients must pin its certificate: set " + CERTIFICATE_SHA256_PROPERTY + " (printed by"
              + " pyiceberg-crypto kms serve, and in its status file)");
        }
      }
    }
    int timeout = millis(properties, TIMEOUT_PROPERTY, DEFAULT_TIMEOUT_MILLIS);
    int attempt = millis(properties, ATTEMPT_TIMEOUT_PROPERTY, DEFAULT_ATTEMPT_TIMEOUT_MILLIS);
    return new KmsServiceAddress(hosts, ports, tokenFile.strip(), sha256, timeout, attempt);
  }

  /** A positive number of milliseconds from {@code properties}, or {@code otherwise} when unset. */
  private static int millis(Map<String, String> properties, String property, int otherwise) {
    String value = properties.get(property);
    if (value == null || value.isBlank()) {
      return otherwise;
    }
    int millis;
    try {
      millis = Integer.parseInt(value.strip());
    } catch (NumberFormatException e) {
      millis = -1;
    }
    if (millis <= 0) {
      throw invalid(property + " must be a positive number of milliseconds, got '" + value + "'");
    }
    return millis;
  }

  /** How long one call may wait for its answer at one replica: the timeout, or with replicas the attempt's. */
  int callMillis() {
    return replicas() == 1 ? timeoutMillis : attemptTimeoutMillis;
  }

  /** Hex digits to bytes; null when not an even number of hex digits (Java 11 has no HexFormat). */
  static byte[] parseHex(String hex) {
    if (hex.length() % 2 != 0) {
      return null;
    }
    byte[] bytes = new byte[hex.length() / 2];
    for (int i = 0; i < bytes.length; i++) {
      int high = Character.digit(hex.charAt(2 * i), 16);
      int low = Character.digit(hex.charAt(2 * i + 1), 16);
      if (high < 0 || low < 0) {
        return null;
      }
      bytes[i] = (byte) ((high << 4) | low);
    }
    return bytes;
  }

  /** The one address where {@code kms serve} listens without TLS (any other gets TLS). */
  static boolean isLoopback(String host) {
    return host.equals("127.0.0.1") || host.equalsIgnoreCase("localhost");
  }

  /** How many replicas the property lists (1: a single service). */
  int replicas() {
    return hosts.length;
  }

  /** HOST:PORT (replicas: HOST:PORT,HOST:PORT,...), as errors name the service. */
  String key() {
    StringBuilder key = new StringBuilder();
    for (int i = 0; i < hosts.length; i++) {
      key.append(i == 0 ? "" : ",").append(replicaKey(i));
    }
    return key.toString();
  }

  /** HOST:PORT of replica {@code index}. */
  String replicaKey(int index) {
    return hosts[index] + ":" + ports[index];
  }

  /** What distinguishes two connections to the service (clients may differ in pin and timeout). */
  String connectionKey() {
    return connectionKey(0);
  }

  /** What distinguishes two connections to replica {@code index}. */
  String connectionKey(int index) {
    StringBuilder pin = new StringBuilder();
    if (certificateSha256 != null) {
      for (byte b : certificateSha256) {
        pin.append(String.format("%02x", b));
      }
    }
    return replicaKey(index) + "|" + pin + "|" + timeoutMillis + "|" + callMillis();
  }

  @Override
  public String toString() {
    return key() + (certificateSha256 == null ? "" : ", TLS");
  }

  private static IllegalArgumentException invalid(String message) {
    return new IllegalArgumentException("pyiceberg-crypto: " + message);
  }
}
