package io.pyicebergcrypto.bridge;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnknownHostException;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.net.SocketFactory;
import py4j.CallbackClient;
import py4j.Gateway;

/**
 * Where a registered Python KMS listens: a dedicated, token-authenticated Py4J callback server
 * (loopback unless the registration opted in to another address), separate from PySpark's own
 * callback server. Holds the Py4J client and the proxy; one per registration and JVM.
 *
 * <p>In the driver JVM it is created by {@code register_kms}; in an executor JVM it is created from
 * the {@link ShippedEndpoint} carried by a deserialized {@link PythonKmsClient}.
 */
final class PythonKmsEndpoint {
  /**
   * Py4J logs every callback command and answer at INFO through java.util.logging, and those carry
   * key bytes (base64). The PySpark gateway turns Py4J logging off in the driver; executors never
   * load it, so do it here. Strong references: JUL forgets levels of collected loggers.
   */
  private static final Logger[] SILENCED_LOGGERS = {
    Logger.getLogger("py4j.CallbackClient"), Logger.getLogger("py4j.CallbackConnection")
  };

  static {
    for (Logger logger : SILENCED_LOGGERS) {
      logger.setLevel(Level.OFF);
    }
  }

  private final String name;
  private final ShippedEndpoint address;
  private final boolean registeredHere;
  private final CallbackClient client;
  private final PythonKms proxy;
  private final Set<String> initializedWith = ConcurrentHashMap.newKeySet();

  PythonKmsEndpoint(String name, ShippedEndpoint address, boolean registeredHere)
      throws UnknownHostException {
    this.name = name;
    this.address = address;
    this.registeredHere = registeredHere;
    // Memory management off: the Python object must not be released when a Java proxy is GC'd.
    this.client =
        new CallbackClient(
            address.port,
            InetAddress.getByName(address.host),
            address.authToken,
            CallbackClient.DEFAULT_MIN_CONNECTION_TIME,
            TimeUnit.SECONDS,
            new ConnectTimeoutSocketFactory(address.timeoutMillis),
            false,
            address.timeoutMillis);
    Gateway gateway = new Gateway(null, client);
    this.proxy =
        (PythonKms)
            gateway.createProxy(
                PythonKms.class.getClassLoader(), new Class<?>[] {PythonKms.class}, address.objectId);
  }

  PythonKms proxy() {
    return proxy;
  }

  String name() {
    return name;
  }

  ShippedEndpoint address() {
    return address;
  }

  /** Registered by Python in this JVM (the driver), as opposed to installed from a shipped client. */
  boolean registeredHere() {
    return registeredHere;
  }

  int timeoutMillis() {
    return address.timeoutMillis;
  }

  /**
   * Send the forwarded catalog properties to the Python KMS's {@code initialize()} once per
   * endpoint and distinct property set (the Python side also ignores repeats).
   */
  void ensureInitialized(String encodedProperties) {
    if (encodedProperties.isEmpty() || initializedWith.contains(encodedProperties)) {
      return;
    }
    synchronized (initializedWith) {
      if (!initializedWith.contains(encodedProperties)) {
        proxy.initialize(encodedProperties);
        initializedWith.add(encodedProperties);
      }
    }
  }

  void close() {
    client.shutdown();
  }

  @Override
  public String toString() {
    return "PythonKmsEndpoint{name=" + name + ", " + address + "}";
  }

  /** Plain sockets whose connect() is bounded too (an unreachable driver must not stall a task). */
  private static final class ConnectTimeoutSocketFactory extends SocketFactory {
    private final int timeoutMillis;

    ConnectTimeoutSocketFactory(int timeoutMillis) {
      this.timeoutMillis = timeoutMillis;
    }

    @Override
    public Socket createSocket() {
      return new Socket();
    }

    @Override
    public Socket createSocket(InetAddress host, int port) throws IOException {
      Socket socket = new Socket();
      try {
        socket.connect(new InetSocketAddress(host, port), timeoutMillis);
      } catch (IOException e) {
        socket.close();
        throw e;
      }
      return socket;
    }

    @Override
    public Socket createSocket(String host, int port) throws IOException {
      return createSocket(InetAddress.getByName(host), port);
    }

    @Override
    public Socket createSocket(InetAddress host, int port, InetAddress localHost, int localPort)
        throws IOException {
      return createSocket(host, port);
    }

    @Override
    public Socket createSocket(String host, int port, InetAddress localHost, int localPort)
        throws IOException {
      return createSocket(host, port);
    }
  }
}
