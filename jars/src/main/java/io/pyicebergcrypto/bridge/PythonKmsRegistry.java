package io.pyicebergcrypto.bridge;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Per-JVM registry of Python KMS endpoints, by name. Filled from Python by {@code
 * pyiceberg_crypto.bridge.register_kms(spark, kms, name)} through the PySpark gateway; read by
 * {@link PythonKmsClient} on first use.
 */
public final class PythonKmsRegistry {
  private static final Map<String, PythonKmsEndpoint> ENDPOINTS = new ConcurrentHashMap<>();

  private PythonKmsRegistry() {}

  /** Register (or replace) the endpoint for {@code name}. Called from Python. */
  public static void register(
      String name, String host, int port, String authToken, String objectId, int timeoutMillis)
      throws Exception {
    PythonKmsEndpoint endpoint =
        new PythonKmsEndpoint(name, host, port, authToken, objectId, timeoutMillis);
    PythonKmsEndpoint previous = ENDPOINTS.put(name, endpoint);
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

  static PythonKmsEndpoint lookup(String name) {
    PythonKmsEndpoint endpoint = ENDPOINTS.get(name);
    if (endpoint == null) {
      throw new PythonKmsException(
          String.format(
              "No Python KMS is registered under the name '%s' in this JVM. In the PySpark driver,"
                  + " call pyiceberg_crypto.bridge.register_kms(spark, kms, name='%s') before using"
                  + " the catalog (registered names: %s). Note: executor JVMs do not share the"
                  + " driver's registry.",
              name, name, ENDPOINTS.keySet()));
    }
    return endpoint;
  }
}
