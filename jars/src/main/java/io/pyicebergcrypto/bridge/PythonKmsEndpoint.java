package io.pyicebergcrypto.bridge;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnknownHostException;
import java.security.GeneralSecurityException;
import java.security.cert.CertificateException;
import java.security.cert.X509Certificate;
import java.util.Arrays;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import javax.net.SocketFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManager;
import javax.net.ssl.X509TrustManager;
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
      throws UnknownHostException, GeneralSecurityException {
    this.name = name;
    this.address = address;
    this.registeredHere = registeredHere;
    // Memory management off: the Python object must not be released when a Java proxy is GC'd.
    this.client =
        new DaemonCleanedCallbackClient(
            address.port,
            InetAddress.getByName(address.host),
            address.authToken,
            CallbackClient.DEFAULT_MIN_CONNECTION_TIME,
            TimeUnit.SECONDS,
            new BoundedSocketFactory(
                address.timeoutMillis, pinnedTls(address.certificate, address.certificateSha256)),
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

  /**
   * Py4J's client closes idle connections from a thread of its own pool, which is not a daemon:
   * a JVM-only application (spark-submit of a Java job calling a kms serve service) would never
   * exit after its main method. Same cleanup, on one shared daemon thread.
   */
  private static final class DaemonCleanedCallbackClient extends CallbackClient {
    private static final ScheduledExecutorService CLEANER =
        Executors.newSingleThreadScheduledExecutor(
            task -> {
              Thread thread = new Thread(task, "pyiceberg-crypto-kms-connection-cleaner");
              thread.setDaemon(true);
              return thread;
            });
    private ScheduledFuture<?> cleaning; // set from the super constructor (setupCleaner): no initializer

    DaemonCleanedCallbackClient(
        int port, InetAddress address, String authToken, long minConnectionTime, TimeUnit unit,
        SocketFactory socketFactory, boolean enableMemoryManagement, int readTimeout) {
      super(port, address, authToken, minConnectionTime, unit, socketFactory, enableMemoryManagement, readTimeout);
    }

    @Override
    protected void setupCleaner() {
      if (minConnectionTime > 0) {
        cleaning = CLEANER.scheduleAtFixedRate(
            this::periodicCleanup, minConnectionTime, minConnectionTime, minConnectionTimeUnit);
      }
    }

    @Override
    public void shutdown() {
      if (cleaning != null) {
        cleaning.cancel(false);
      }
      super.shutdown();
    }
  }

  /**
   * TLS that trusts exactly one certificate: the one the Python side generated for this
   * registration, or the one whose SHA-256 a KMS service's clients are configured with (no CA, no
   * host name: the pin is the identity). Null for plain loopback.
   */
  private static SSLSocketFactory pinnedTls(byte[] certificate, byte[] certificateSha256)
      throws GeneralSecurityException {
    if (certificate == null && certificateSha256 == null) {
      return null;
    }
    X509TrustManager pinned =
        new X509TrustManager() {
          @Override
          public void checkServerTrusted(X509Certificate[] chain, String authType)
              throws CertificateException {
            if (chain == null || chain.length == 0 || !pinned(chain[0].getEncoded())) {
              throw new CertificateException(
                  "the Python KMS listener presented another certificate than the registered one");
            }
          }

          private boolean pinned(byte[] presented) throws CertificateException {
            if (certificate != null) {
              return Arrays.equals(presented, certificate);
            }
            try {
              return java.security.MessageDigest.isEqual(
                  java.security.MessageDigest.getInstance("SHA-256").digest(presented), certificateSha256);
            } catch (java.security.NoSuchAlgorithmException e) {
              throw new CertificateException(e);
            }
          }

          @Override
          public void checkClientTrusted(X509Certificate[] chain, String authType)
              throws CertificateException {
            throw new CertificateException("not a server");
          }

          @Override
          public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
          }
        };
    SSLContext context = SSLContext.getInstance("TLS");
    context.init(null, new TrustManager[] {pinned}, null);
    return context.getSocketFactory();
  }

  /**
   * Sockets whose connect() and TLS handshake are bounded by the call timeout (an unreachable
   * driver must not stall a task), over TLS when the endpoint has a certificate.
   */
  private static final class BoundedSocketFactory extends SocketFactory {
    private final int timeoutMillis;
    private final SSLSocketFactory tls;

    BoundedSocketFactory(int timeoutMillis, SSLSocketFactory tls) {
      this.timeoutMillis = timeoutMillis;
      this.tls = tls;
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
        if (tls == null) {
          return socket;
        }
        SSLSocket secured = (SSLSocket) tls.createSocket(socket, host.getHostAddress(), port, true);
        secured.setSoTimeout(timeoutMillis);
        secured.startHandshake();
        return secured;
      } catch (IOException e) {
        socket.close();
        throw e;
      }
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
