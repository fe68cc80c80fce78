package io.pyicebergcrypto.bridge;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.UnknownHostException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
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
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
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
  private final DaemonCleanedCallbackClient client;
  private final PythonKms proxy;
  private final Set<String> initializedWith = ConcurrentHashMap.newKeySet();

  PythonKmsEndpoint(String name, ShippedEndpoint address, boolean registeredHere)
      throws UnknownHostException, GeneralSecurityException {
    this(name, address, registeredHere, address.timeoutMillis);
  }

  /** As above; {@code connectMillis} bounds making a connection (TCP, TLS, handshake), the timeout each call. */
  PythonKmsEndpoint(String name, ShippedEndpoint address, boolean registeredHere, int connectMillis)
      throws UnknownHostException, GeneralSecurityException {
    this.name = name;
    this.address = address;
    this.registeredHere = registeredHere;
    // Memory management off: the Python object must not be released when a Java proxy is GC'd.
    this.client =
        new DaemonCleanedCallbackClient(
            address.port,
            InetAddress.getByName(address.host),
            null, // Py4J's "A" command would send the token to whoever listens: see Handshake
            CallbackClient.DEFAULT_MIN_CONNECTION_TIME,
            TimeUnit.SECONDS,
            new BoundedSocketFactory(
                connectMillis, pinnedTls(address.certificate, address.certificateSha256),
                address.authToken, address.role()),
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
    if (!ShippedEndpoint.DRIVER_ROLE.equals(address.role()) || encodedProperties.isEmpty()
        || initializedWith.contains(encodedProperties)) {
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

  /**
   * Close the pooled (idle) connections. After one of them failed, the others, idle as long, may
   * have been closed by the listener too (kms serve --idle-timeout, or a restart): a retry must not
   * meet them. Connections in use are not in the pool and are left alone.
   */
  void dropIdleConnections() {
    client.dropIdleConnections();
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

    void dropIdleConnections() {
      lock.lock();
      try {
        for (py4j.Py4JClientConnection idle : connections) {
          idle.shutdown();
        }
        connections.clear();
      } finally {
        lock.unlock();
      }
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

  /** The listener did not prove it knows the token, or refused ours: nothing else was sent. */
  static final class HandshakeException extends IOException {
    private static final long serialVersionUID = 1L;

    HandshakeException(String message) {
      super(message);
    }
  }

  /**
   * The bridge's mutual authentication, before Py4J sends anything: the listener must prove it
   * knows the token (HMAC-SHA256 over both sides' nonces) before this JVM proves it too, so the
   * token never crosses the wire and a listener squatting on the port of a stopped KMS learns
   * nothing and cannot answer calls. The Python side is {@code callback_server._challenge}.
   */
  static final class Handshake {
    static final String PROTOCOL = "pyiceberg-crypto-kms/1";
    /** A listener at a connection cap answers this, then the reason, then closes. */
    static final String BUSY = "!busy ";
    private static final java.security.SecureRandom RANDOM = new java.security.SecureRandom();

    private Handshake() {}

    static void run(Socket socket, String token, String role, int timeoutMillis) throws IOException {
      socket.setSoTimeout(timeoutMillis);
      byte[] nonce = new byte[32];
      RANDOM.nextBytes(nonce);
      String clientNonce = hex(nonce);
      java.io.OutputStream out = socket.getOutputStream();
      java.io.InputStream in = socket.getInputStream();
      out.write((PROTOCOL + " " + role + " " + clientNonce + "\n").getBytes(StandardCharsets.US_ASCII));
      out.flush();
      String reply = readLine(in, 160);
      if (reply.startsWith(BUSY)) {
        // callback_server._turn_away: the listener is at a connection cap and says which.
        throw new HandshakeException("the KMS listener refused this connection: "
            + reply.substring(BUSY.length()).replaceAll("[^ -~]", "?")
            + "; retry later, or raise the cap (kms serve --max-connections / --max-unauthenticated)");
      }
      if (reply.startsWith("!")) {
        throw new HandshakeException("Could not authenticate connection: the KMS listener refused this JVM's token");
      }
      String[] parts = reply.split(" ");
      if (parts.length != 2
          || !MessageDigest.isEqual(
              proof(token, "server", role, clientNonce, parts[0]).getBytes(StandardCharsets.US_ASCII),
              parts[1].getBytes(StandardCharsets.US_ASCII))) {
        throw new HandshakeException("Could not authenticate connection: the listener did not prove it knows"
            + " this JVM's token (not the KMS registered for it, or a KMS restarted with another token);"
            + " nothing was sent to it");
      }
      out.write((proof(token, "client", role, clientNonce, parts[0]) + "\n").getBytes(StandardCharsets.US_ASCII));
      out.flush();
      if (!"!yv".equals(readLine(in, 16))) {
        throw new HandshakeException("Could not authenticate connection: the KMS listener refused this JVM's token");
      }
    }

    static String proof(String token, String side, String role, String clientNonce, String serverNonce)
        throws IOException {
      try {
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(token.getBytes(StandardCharsets.US_ASCII), "HmacSHA256"));
        return hex(mac.doFinal((PROTOCOL + " " + side + " " + role + " " + clientNonce + " " + serverNonce)
            .getBytes(StandardCharsets.US_ASCII)));
      } catch (GeneralSecurityException e) {
        throw new IOException("HMAC-SHA256 is not available: " + e.getMessage());
      }
    }

    /** One line, byte by byte (Py4J reads the stream after us: nothing may be buffered away). */
    private static String readLine(java.io.InputStream in, int limit) throws IOException {
      StringBuilder line = new StringBuilder();
      while (true) {
        int b = in.read();
        if (b < 0) {
          throw new HandshakeException("Could not authenticate connection: the listener closed the"
              + " connection during the handshake (a stopped KMS, or not a KMS)");
        }
        if (b == '\n') {
          return line.toString();
        }
        if (line.length() >= limit) {
          throw new HandshakeException("Could not authenticate connection: the listener's answer is not"
              + " the KMS handshake");
        }
        line.append((char) b);
      }
    }

    private static String hex(byte[] bytes) {
      StringBuilder out = new StringBuilder(bytes.length * 2);
      for (byte b : bytes) {
        out.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
      }
      return out.toString();
    }
  }

  /**
   * Sockets whose connect(), TLS handshake and authentication are bounded by the call timeout (an
   * unreachable driver must not stall a task), over TLS when the endpoint has a certificate.
   */
  private static final class BoundedSocketFactory extends SocketFactory {
    private final int timeoutMillis;
    private final SSLSocketFactory tls;
    private final String token;
    private final String role;

    BoundedSocketFactory(int timeoutMillis, SSLSocketFactory tls, String token, String role) {
      this.timeoutMillis = timeoutMillis;
      this.tls = tls;
      this.token = token;
      this.role = role;
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
        Socket channel = socket;
        if (tls != null) {
          SSLSocket secured = (SSLSocket) tls.createSocket(socket, host.getHostAddress(), port, true);
          secured.setSoTimeout(timeoutMillis);
          secured.startHandshake();
          channel = secured;
        }
        Handshake.run(channel, token, role, timeoutMillis);
        return channel;
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
