package io.pyicebergcrypto.bridge;

/**
 * The interface the Python side implements (a Py4J proxy). Kept byte-oriented and minimal: the
 * Python adapter ({@code pyiceberg_crypto.bridge.adapter.KmsCallbackAdapter}) translates it to the
 * user's {@code pyiceberg_crypto.kms.KeyManagementClient}.
 */
public interface PythonKms {
  /**
   * Forward catalog properties to the Python KMS's {@code initialize()}: URL-encoded {@code
   * key=value} pairs joined by {@code &} (Py4J passes maps only as references into the caller's
   * JVM, which an executor's Python peer could not follow).
   */
  void initialize(String encodedProperties);

  byte[] wrapKey(byte[] key, String wrappingKeyId);

  byte[] unwrapKey(byte[] wrappedKey, String wrappingKeyId);

  boolean supportsKeyGeneration();

  /**
   * Generate a key in the KMS and wrap it. Encoded as: 2-byte big-endian raw key length, the raw
   * key, then the wrapped key (Py4J has no convenient pair of byte arrays).
   */
  byte[] generateKey(String wrappingKeyId);
}
