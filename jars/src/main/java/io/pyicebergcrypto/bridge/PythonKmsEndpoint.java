package io.pyicebergcrypto.bridge;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.concurrent.TimeUnit;
import javax.net.SocketFactory;
import py4j.CallbackClient;
import py4j.Gateway;

/**
 * Where a registered Python KMS listens: a dedicated, token-authenticated Py4J callback server on
 * loopback, separate from PySpark's own (unauthenticated in pinned-thread mode) callback server.
 * Holds the Py4J client and the proxy; one per registration.
 */
final class PythonKmsEndpoint {
  private final String name;
  private final int port;
  private final int timeoutMillis;
  private final CallbackClient client;
  private final PythonKms proxy;

  PythonKmsEndpoint(String name, String host, int port, String authToken, String objectId, int timeoutMillis)
      throws UnknownHostException {
    this.name = name;
    this.port = port;
    this.timeoutMillis = timeoutMillis;
    // Memory management off: the Python object must not be released when a Java proxy is GC'd.
    this.client =
        new CallbackClient(
            port,
            InetAddress.getByName(host),
            authToken,
            CallbackClient.DEFAULT_MIN_CONNECTION_TIME,
            TimeUnit.SECONDS,
            SocketFactory.getDefault(),
            false,
            timeoutMillis);
    Gateway gateway = new Gateway(null, client);
    this.proxy =
        (PythonKms)
            gateway.createProxy(
                PythonKms.class.getClassLoader(), new Class<?>[] {PythonKms.class}, objectId);
  }

  PythonKms proxy() {
    return proxy;
  }

  String name() {
    return name;
  }

  int timeoutMillis() {
    return timeoutMillis;
  }

  void close() {
    client.shutdown();
  }

  @Override
  public String toString() {
    return "PythonKmsEndpoint{name=" + name + ", port=" + port + "}";
  }
}
