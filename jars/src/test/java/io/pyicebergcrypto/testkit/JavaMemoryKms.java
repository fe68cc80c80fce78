package io.pyicebergcrypto.testkit;

import java.nio.ByteBuffer;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import org.apache.iceberg.encryption.Ciphers;
import org.apache.iceberg.encryption.KeyManagementClient;

/**
 * Test-only, all-Java in-memory KMS with the same wrapped-key format as Iceberg's {@code
 * MemoryMockKMS} (AES-GCM with the master key: 12-byte nonce + ciphertext + 16-byte tag, no AAD).
 *
 * <p>Master keys come from catalog properties {@code testkit.master-key.<key-id>=<base64 key>}. It
 * is the Java reference the Python {@code InMemoryKms} is checked against, and lets tests write
 * encrypted tables without the Python bridge. Not for production.
 */
public class JavaMemoryKms implements KeyManagementClient {
  public static final String PREFIX = "testkit.master-key.";
  private Map<String, byte[]> masterKeys = new HashMap<>();

  @Override
  public void initialize(Map<String, String> properties) {
    Map<String, byte[]> keys = new HashMap<>();
    for (Map.Entry<String, String> entry : properties.entrySet()) {
      if (entry.getKey().startsWith(PREFIX)) {
        keys.put(
            entry.getKey().substring(PREFIX.length()),
            Base64.getDecoder().decode(entry.getValue()));
      }
    }
    this.masterKeys = keys;
  }

  private byte[] masterKey(String id) {
    byte[] key = masterKeys.get(id);
    if (key == null) {
      throw new IllegalArgumentException("JavaMemoryKms: master key " + id + " is not configured");
    }
    return key;
  }

  @Override
  public ByteBuffer wrapKey(ByteBuffer key, String wrappingKeyId) {
    byte[] plain = new byte[key.remaining()];
    key.duplicate().get(plain);
    return ByteBuffer.wrap(new Ciphers.AesGcmEncryptor(masterKey(wrappingKeyId)).encrypt(plain, null));
  }

  @Override
  public ByteBuffer unwrapKey(ByteBuffer wrappedKey, String wrappingKeyId) {
    byte[] wrapped = new byte[wrappedKey.remaining()];
    wrappedKey.duplicate().get(wrapped);
    return ByteBuffer.wrap(new Ciphers.AesGcmDecryptor(masterKey(wrappingKeyId)).decrypt(wrapped, null));
  }

  /** Wrap with a raw master key (for cross-checks from Python). */
  public static byte[] wrap(byte[] masterKey, byte[] key) {
    return new Ciphers.AesGcmEncryptor(masterKey).encrypt(key, null);
  }

  /** Unwrap with a raw master key (for cross-checks from Python). */
  public static byte[] unwrap(byte[] masterKey, byte[] wrapped) {
    return new Ciphers.AesGcmDecryptor(masterKey).decrypt(wrapped, null);
  }
}
