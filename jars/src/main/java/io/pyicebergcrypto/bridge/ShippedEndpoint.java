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
  private static final long serialVersionUID = 1L;

  /** Identifies this JVM, so the driver never installs copies of its own registrations. */
  static final String THIS_JVM = UUID.randomUUID().toString();

  final String originJvm;
  final long generation;
  final String host;
  final int port;
  final String authToken;
  final String objectId;
  final int timeoutMillis;
  /** DER certificate of the Python side's TLS listener, pinned by the client; null: plain loopback. */
  final byte[] certificate;

  ShippedEndpoint(
      String originJvm, long generation, String host, int port, String authToken, String objectId,
      int timeoutMillis, byte[] certificate) {
    this.originJvm = originJvm;
    this.generation = generation;
    this.host = host;
    this.port = port;
    this.authToken = authToken;
    this.objectId = objectId;
    this.timeoutMillis = timeoutMillis;
    this.certificate = certificate;
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
    return "ShippedEndpoint{" + host + ":" + port + (certificate == null ? "" : " (TLS)")
        + ", generation=" + generation + "}";
  }
}
