package io.pyicebergcrypto.bridge;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Per-JVM registry of Python KMS endpoints, by name.
 *
 * <p>In the driver it is filled from Python by {@code pyiceberg_crypto.bridge.register_kms(spark,
 * kms, name)} through the PySpark gateway. In an executor it is filled from the endpoint that a
 * deserialized {@link PythonKmsClient} carries ({@link #resolve}); a registration made in this JVM
 * always wins over shipped ones, and a newer registration of the driver replaces an older one.
 */
public final class PythonKmsRegistry {
  private static final Map<String, PythonKmsEndpoint> ENDPOINTS = new ConcurrentHashMap<>();
  private static final AtomicLong GENERATIONS = new AtomicLong();

  private PythonKmsRegistry() {}

  /** Register (or replace) a plain loopback endpoint for {@code name} in this JVM. */
  public static void register(
      String name, String host, int port, String authToken, String objectId, int timeoutMillis)
      throws Exception {
    register(name, host, port, authToken, objectId, timeoutMillis, "");
  }

  /**
   * Register (or replace) the endpoint for {@code name} in this JVM. Called from Python. {@code
   * certificateBase64}: the DER certificate of the Python side's TLS listener (pinned), or empty
   * for a plain loopback listener.
   */
  public static void register(
      String name, String host, int port, String authToken, String objectId, int timeoutMillis,
      String certificateBase64)
      throws Exception {
    register(name, host, port, authToken, objectId, timeoutMillis, certificateBase64, null);
  }

  /**
   * Register (or replace) the endpoint for {@code name} in this JVM, with two tokens: {@code
   * driverToken}, which this JVM's connections use and which alone lets the Python side's {@code
   * initialize} through, and {@code clientToken}, the one serialized clients carry to executors.
   * {@code clientToken} null: one token for both (the client role).
   */
  public static void register(
      String name, String host, int port, String driverToken, String objectId, int timeoutMillis,
      String certificateBase64, String clientToken)
      throws Exception {
    byte[] certificate =
        certificateBase64 == null || certificateBase64.isEmpty()
            ? null
            : java.util.Base64.getDecoder().decode(certificateBase64);
    ShippedEndpoint address =
        clientToken == null
            ? new ShippedEndpoint(
                ShippedEndpoint.THIS_JVM, GENERATIONS.incrementAndGet(), host, port, driverToken, objectId,
                timeoutMillis, certificate)
            : new ShippedEndpoint(
                ShippedEndpoint.THIS_JVM, GENERATIONS.incrementAndGet(), host, port, driverToken, objectId,
                timeoutMillis, certificate, null, ShippedEndpoint.DRIVER_ROLE, clientToken);
    PythonKmsEndpoint previous = ENDPOINTS.put(name, new PythonKmsEndpoint(name, address, true));
    if (previous != null) {
      previous.close();
    }
  }

  /** Remove the endpoint for {@code name}; returns whether one was registered. */
  public static boolean unregister(String name) {
    PythonKmsEndpoint previous = ENDPOINTS.remove(name);
    if (previous != null) {
      previous.close();
      return true;
    }
    return false;
  }

  public static boolean isRegistered(String name) {
    return ENDPOINTS.containsKey(name);
  }

  /** True if {@code name} was installed from a shipped client rather than registered here. */
  public static boolean isInstalledFromDriver(String name) {
    PythonKmsEndpoint endpoint = ENDPOINTS.get(name);
    return endpoint != null && !endpoint.registeredHere();
  }

  /** The endpoint a client serialized in this JVM should carry, or null if none is known. */
  static ShippedEndpoint shippable(String name) {
    PythonKmsEndpoint endpoint = ENDPOINTS.get(name);
    return endpoint == null ? null : endpoint.address().forShipping();
  }

  /**
   * The endpoint for {@code name}: the one in this JVM, after installing {@code shipped} (the
   * endpoint a deserialized client carries) when it came from another JVM and is newer.
   */
  static PythonKmsEndpoint resolve(String name, ShippedEndpoint shipped) {
    if (shipped != null && !shipped.fromThisJvm()) {
      install(name, shipped);
    }
    return lookup(name);
  }

  private static void install(String name, ShippedEndpoint shipped) {
    PythonKmsEndpoint current = ENDPOINTS.get(name);
    if (current != null && (current.registeredHere() || !shipped.supersedes(current.address()))) {
      return; // fast path: nothing to do
    }
    PythonKmsEndpoint[] replaced = new PythonKmsEndpoint[1];
    ENDPOINTS.compute(
        name,
        (key, existing) -> {
          if (existing != null
              && (existing.registeredHere() || !shipped.supersedes(existing.address()))) {
            return existing;
          }
          try {
            replaced[0] = existing;
            return new PythonKmsEndpoint(name, shipped, false);
          } catch (java.net.UnknownHostException | java.security.GeneralSecurityException e) {
            throw new PythonKmsException(
                String.format(
                    "Python KMS '%s': cannot set up the client for the driver's endpoint %s: %s",
                    name, shipped, e.getMessage()));
          }
        });
    if (replaced[0] != null) {
      replaced[0].close();
    }
  }

  static PythonKmsEndpoint lookup(String name) {
    PythonKmsEndpoint endpoint = ENDPOINTS.get(name);
    if (endpoint == null) {
      throw new PythonKmsException(
          String.format(
              "No Python KMS is registered under the name '%s' in this JVM. In the PySpark driver,"
                  + " call pyiceberg_crypto.bridge.register_kms(spark, kms, name='%s') before using"
                  + " the catalog (registered names: %s). Executor JVMs learn the driver's KMS from"
                  + " the Iceberg tables Spark ships to them, so the name must be registered in the"
                  + " driver when the job is planned.",
              name, name, ENDPOINTS.keySet()));
    }
    return endpoint;
  }
}
