package io.pyicebergcrypto.bridge;

import java.io.Serializable;
import java.util.UUID;

/**
 * The connection details of a registered Python KMS as they travel inside a serialized {@link
 * PythonKmsClient}: Iceberg ships the KMS client to executors inside task data (apache/iceberg
 * #14751), so an executor JVM learns where the driver's Python KMS listens and the token that
 * authenticates it, without the token ever being put in a Spark conf, a log or the UI.
 *
 * <p>{@link #toString()} never shows the token.
 */
final class ShippedEndpoint implements Serializable {
  private static final long serialVersionUID = 3L;
  /** The role of the driver JVM's own connections: the only ones the Python side lets initialize. */
  static final String DRIVER_ROLE = "driver";
  /** Every other JVM's role (executors, a kms serve service's clients). */
  static final String CLIENT_ROLE = "client";

  /** Identifies this JVM, so the driver never installs copies of its own registrations. */
  static final String THIS_JVM = UUID.randomUUID().toString();
  /** The origin of endpoints of a {@code kms serve} service (made from catalog properties). */
  static final String SERVICE = "kms-service";

  final String originJvm;
  final long generation;
  final String host;
  final int port;
  final String authToken;
  final String objectId;
  final int timeoutMillis;
  /** DER certificate of the Python side's TLS listener, pinned by the client; null: see below. */
  final byte[] certificate;
  /** Or the SHA-256 of that certificate (a KMS service's pin, from a catalog property). */
  final byte[] certificateSha256;
  /** Which of the Python side's tokens {@link #authToken} is ({@link #DRIVER_ROLE}: never shipped). */
  final String role;
  /** For the driver's own endpoint: the token executors get instead (null otherwise). */
  private final transient String shippedToken;

  ShippedEndpoint(
      String originJvm, long generation, String host, int port, String authToken, String objectId,
      int timeoutMillis, byte[] certificate) {
    this(originJvm, generation, host, port, authToken, objectId, timeoutMillis, certificate, null);
  }

  ShippedEndpoint(
      String originJvm, long generation, String host, int port, String authToken, String objectId,
      int timeoutMillis, byte[] certificate, byte[] certificateSha256) {
    this(originJvm, generation, host, port, authToken, objectId, timeoutMillis, certificate,
        certificateSha256, CLIENT_ROLE, null);
  }

  ShippedEndpoint(
      String originJvm, long generation, String host, int port, String authToken, String objectId,
      int timeoutMillis, byte[] certificate, byte[] certificateSha256, String role, String shippedToken) {
    this.role = role;
    this.shippedToken = shippedToken;
    this.originJvm = originJvm;
    this.generation = generation;
    this.host = host;
    this.port = port;
    this.authToken = authToken;
    this.objectId = objectId;
    this.timeoutMillis = timeoutMillis;
    this.certificate = certificate;
    this.certificateSha256 = certificateSha256;
  }

  /**
   * The role this endpoint authenticates with (a shipped copy from an older jar: client): the
   * driver's, the client's, or a kms serve service's named token ({@link KmsServiceConnections#roleOf}).
   */
  String role() {
    if (DRIVER_ROLE.equals(role)) {
      return DRIVER_ROLE;
    }
    return isService() && role != null ? role : CLIENT_ROLE;
  }

  /**
   * What a serialized client carries to other JVMs: for the driver's own endpoint a copy with the
   * executors' token (the driver token never leaves this JVM); any other endpoint as it is.
   */
  ShippedEndpoint forShipping() {
    if (!DRIVER_ROLE.equals(role)) {
      return this;
    }
    return new ShippedEndpoint(originJvm, generation, host, port, shippedToken, objectId, timeoutMillis,
        certificate, certificateSha256, CLIENT_ROLE, null);
  }

  private void writeObject(java.io.ObjectOutputStream out) throws java.io.IOException {
    if (DRIVER_ROLE.equals(role)) {
      throw new java.io.NotSerializableException("the driver's own KMS endpoint is never shipped");
    }
    out.defaultWriteObject();
  }

  /** True when the channel is TLS (a pinned certificate); plain loopback otherwise. */
  boolean tls() {
    return certificate != null || certificateSha256 != null;
  }

  /** True for a {@code kms serve} service rather than a PySpark driver's registration. */
  boolean isService() {
    return SERVICE.equals(originJvm);
  }

  boolean fromThisJvm() {
    return THIS_JVM.equals(originJvm);
  }

  /** True if this endpoint should replace {@code other} (a newer registration of the same driver). */
  boolean supersedes(ShippedEndpoint other) {
    return !originJvm.equals(other.originJvm) || generation > other.generation;
  }

  @Override
  public String toString() {
    return "ShippedEndpoint{" + host + ":" + port + (tls() ? " (TLS)" : "")
        + ", generation=" + generation + "}";
  }
}
