package io.pyicebergcrypto.bridge;

import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.Map;
import java.util.function.Supplier;
import org.apache.iceberg.encryption.KeyManagementClient;

/**
 * Iceberg {@link KeyManagementClient} that delegates to a KMS written in Python.
 *
 * <p>Configure it as the catalog's {@code encryption.kms-impl}; the catalog property {@code
 * pyiceberg-crypto.kms-name} (default {@code default}) names the Python KMS registered with {@code
 * pyiceberg_crypto.bridge.register_kms}. {@link #initialize} only records the name: the Python side
 * is resolved lazily on the first wrap/unwrap, so catalogs can be created before registration.
 *
 * <p>Serializable like every Iceberg KMS client: only the name travels, the Py4J proxy is transient
 * and resolved again in the receiving JVM.
 */
public class PythonKmsClient implements KeyManagementClient {
  private static final long serialVersionUID = 1L;
  public static final String KMS_NAME_PROPERTY = "pyiceberg-crypto.kms-name";
  public static final String DEFAULT_KMS_NAME = "default";

  private String kmsName = DEFAULT_KMS_NAME;

  @Override
  public void initialize(Map<String, String> properties) {
    String name = properties == null ? null : properties.get(KMS_NAME_PROPERTY);
    this.kmsName = (name == null || name.isBlank()) ? DEFAULT_KMS_NAME : name;
  }

  public String kmsName() {
    return kmsName;
  }

  @Override
  public ByteBuffer wrapKey(ByteBuffer key, String wrappingKeyId) {
    byte[] raw = toArray(key);
    try {
      byte[] wrapped = call("wrap a key", wrappingKeyId, () -> endpoint().proxy().wrapKey(raw, wrappingKeyId));
      return ByteBuffer.wrap(requireNonEmpty(wrapped, "wrap a key", wrappingKeyId));
    } finally {
      Arrays.fill(raw, (byte) 0);
    }
  }

  @Override
  public ByteBuffer unwrapKey(ByteBuffer wrappedKey, String wrappingKeyId) {
    byte[] wrapped = toArray(wrappedKey);
    byte[] key = call("unwrap a key", wrappingKeyId, () -> endpoint().proxy().unwrapKey(wrapped, wrappingKeyId));
    return ByteBuffer.wrap(requireNonEmpty(key, "unwrap a key", wrappingKeyId));
  }

  @Override
  public boolean supportsKeyGeneration() {
    return call("query key generation support", "-", () -> endpoint().proxy().supportsKeyGeneration());
  }

  @Override
  public KeyGenerationResult generateKey(String wrappingKeyId) {
    byte[] encoded = call("generate a key", wrappingKeyId, () -> endpoint().proxy().generateKey(wrappingKeyId));
    if (encoded == null || encoded.length < 3) {
      throw failure("generate a key", wrappingKeyId, "the Python KMS returned no key");
    }
    int keyLength = ((encoded[0] & 0xff) << 8) | (encoded[1] & 0xff);
    if (keyLength == 0 || 2 + keyLength >= encoded.length) {
      throw failure("generate a key", wrappingKeyId, "the Python KMS returned a malformed result");
    }
    ByteBuffer key = ByteBuffer.wrap(Arrays.copyOfRange(encoded, 2, 2 + keyLength));
    ByteBuffer wrapped = ByteBuffer.wrap(Arrays.copyOfRange(encoded, 2 + keyLength, encoded.length));
    Arrays.fill(encoded, (byte) 0);
    return new KeyGenerationResult(key, wrapped);
  }

  private PythonKmsEndpoint endpoint() {
    return PythonKmsRegistry.lookup(kmsName);
  }

  private <T> T call(String operation, String keyId, Supplier<T> body) {
    try {
      return body.get();
    } catch (PythonKmsException e) {
      throw e;
    } catch (RuntimeException e) {
      throw failure(operation, keyId, pythonMessage(e));
    }
  }

  private PythonKmsException failure(String operation, String keyId, String reason) {
    // No cause attached on purpose: Py4J's message embeds a whole Python traceback.
    return new PythonKmsException(
        String.format("Python KMS '%s' failed to %s with key id '%s': %s", kmsName, operation, keyId, reason));
  }

  private byte[] requireNonEmpty(byte[] bytes, String operation, String keyId) {
    if (bytes == null || bytes.length == 0) {
      throw failure(operation, keyId, "the Python KMS returned no bytes");
    }
    return bytes;
  }

  /**
   * Py4J reports a Python exception as "An exception was raised by the Python Proxy. Return
   * Message: ExceptionType: message": keep that last line. Network failures (Python side gone,
   * no answer within the timeout) are named as such.
   */
  static String pythonMessage(Throwable error) {
    String message = String.valueOf(error.getMessage());
    if (message.contains("Return Message:")) {
      String[] lines = message.strip().split("\n");
      String last = lines[lines.length - 1].strip();
      int marker = last.indexOf("Return Message:");
      return marker >= 0 ? last.substring(marker + "Return Message:".length()).strip() : last;
    }
    for (Throwable t = error; t != null; t = t.getCause()) {
      if (t instanceof java.net.SocketTimeoutException) {
        return "no answer from the Python KMS within its timeout (register_kms(..., timeout_seconds=...))";
      }
      if (t instanceof java.net.ConnectException) {
        return "the Python KMS is unreachable (its callback server is stopped: was the Python"
            + " process or SparkContext stopped, or the KMS unregistered?)";
      }
    }
    if (error instanceof py4j.Py4JNetworkException || message.contains("Error while sending a command")
        || message.contains("communication channel")) {
      return "the Python KMS is unreachable or did not answer (" + message + ")";
    }
    return error.getClass().getSimpleName() + ": " + message;
  }

  private static byte[] toArray(ByteBuffer buffer) {
    ByteBuffer copy = buffer.duplicate();
    byte[] bytes = new byte[copy.remaining()];
    copy.get(bytes);
    return bytes;
  }

  @Override
  public String toString() {
    return "PythonKmsClient{kmsName=" + kmsName + "}";
  }
}
