package io.pyicebergcrypto.testkit;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.iceberg.encryption.AesGcmInputFile;
import org.apache.iceberg.encryption.AesGcmOutputFile;
import org.apache.iceberg.encryption.Ciphers;
import org.apache.iceberg.encryption.EncryptionKeyMetadata;
import org.apache.iceberg.encryption.NativeEncryptionKeyMetadata;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.PositionOutputStream;
import org.apache.iceberg.io.SeekableInputStream;

/**
 * Test-only reference vectors for the Python AGS1 / key metadata codecs, produced by Iceberg's own
 * classes (called from pytest through the Spark session's Py4J gateway).
 *
 * <ul>
 *   <li>AGS1 files: written with {@link AesGcmOutputFile}, read with {@link AesGcmInputFile}. Both
 *       hard-code 1 MiB plain blocks; for other block sizes {@link #writeWithBlockSize} frames the
 *       stream itself around Iceberg's {@link Ciphers.AesGcmEncryptor} (per the AGS1 spec).
 *   <li>StandardKeyMetadata and the manifest-list key envelope: these Iceberg APIs are
 *       package-private, so they are reached by reflection (no classes are added to Iceberg's
 *       package).
 * </ul>
 */
public final class Ags1Vectors {
  private static final String ENC = "org.apache.iceberg.encryption.";

  private Ags1Vectors() {}

  // ---------------------------------------------------------------- AGS1 with Iceberg's classes

  /** Encrypt the file {@code plainPath} to {@code encryptedPath} with AesGcmOutputFile. */
  public static long writeFile(String plainPath, String encryptedPath, byte[] key, byte[] aadPrefix)
      throws IOException {
    AesGcmOutputFile out =
        new AesGcmOutputFile(org.apache.iceberg.Files.localOutput(encryptedPath), key, aadPrefix);
    try (InputStream in = Files.newInputStream(Paths.get(plainPath));
        PositionOutputStream stream = out.createOrOverwrite()) {
      in.transferTo(stream);
    }
    return Files.size(Paths.get(encryptedPath));
  }

  /** Encrypt {@code plaintext} to {@code encryptedPath} with AesGcmOutputFile; returns its size. */
  public static long writeBytes(byte[] plaintext, String encryptedPath, byte[] key, byte[] aadPrefix)
      throws IOException {
    AesGcmOutputFile out =
        new AesGcmOutputFile(org.apache.iceberg.Files.localOutput(encryptedPath), key, aadPrefix);
    try (PositionOutputStream stream = out.createOrOverwrite()) {
      stream.write(plaintext);
    }
    return Files.size(Paths.get(encryptedPath));
  }

  /** Decrypt with AesGcmInputFile (trusted length = the file's size); returns the plaintext. */
  public static byte[] readBytes(String encryptedPath, byte[] key, byte[] aadPrefix)
      throws IOException {
    InputFile in = decryptingFile(encryptedPath, key, aadPrefix);
    try (SeekableInputStream stream = in.newStream()) {
      return stream.readAllBytes();
    }
  }

  /** Decrypt with AesGcmInputFile into {@code plainPath}; returns the plaintext length. */
  public static long readToFile(
      String encryptedPath, byte[] key, byte[] aadPrefix, String plainPath) throws IOException {
    InputFile in = decryptingFile(encryptedPath, key, aadPrefix);
    try (SeekableInputStream stream = in.newStream();
        OutputStream out = new FileOutputStream(plainPath)) {
      return stream.transferTo(out);
    }
  }

  /** Read {@code len} bytes at {@code pos} after a seek (Java's random access). */
  public static byte[] readRange(
      String encryptedPath, byte[] key, byte[] aadPrefix, long pos, int len) throws IOException {
    InputFile in = decryptingFile(encryptedPath, key, aadPrefix);
    try (SeekableInputStream stream = in.newStream()) {
      stream.seek(pos);
      return stream.readNBytes(len);
    }
  }

  /** Plaintext length as Iceberg derives it from the encrypted length. */
  public static long plaintextLength(String encryptedPath, byte[] key, byte[] aadPrefix)
      throws IOException {
    return decryptingFile(encryptedPath, key, aadPrefix).getLength();
  }

  /** Benchmark: read the whole file {@code times} times with AesGcmInputStream; nanoseconds. */
  public static long timeRead(String encryptedPath, byte[] key, byte[] aadPrefix, int times)
      throws IOException {
    byte[] buffer = new byte[1 << 20];
    InputFile in = decryptingFile(encryptedPath, key, aadPrefix);
    long start = System.nanoTime();
    for (int i = 0; i < times; i++) {
      try (SeekableInputStream stream = in.newStream()) {
        while (stream.read(buffer, 0, buffer.length) >= 0) {
          // drain
        }
      }
    }
    return System.nanoTime() - start;
  }

  private static InputFile decryptingFile(String encryptedPath, byte[] key, byte[] aadPrefix)
      throws IOException {
    long length = Files.size(Paths.get(encryptedPath));
    return new AesGcmInputFile(
        org.apache.iceberg.Files.localInput(encryptedPath), key, aadPrefix, length);
  }

  // ---------------------------------------- AGS1 framing with other block sizes (spec, not Iceberg)

  /**
   * Write an AGS1 stream with plain block length {@code blockSize}, encrypting every block with
   * Iceberg's {@link Ciphers.AesGcmEncryptor} (nonce + ciphertext + tag) and AAD = prefix + 4-byte
   * LE block index. Iceberg's own writer only supports 1 MiB blocks. Like Iceberg, an empty
   * plaintext is written as one empty block.
   */
  public static byte[] writeWithBlockSize(
      byte[] plaintext, int blockSize, byte[] key, byte[] aadPrefix) {
    Ciphers.AesGcmEncryptor encryptor = new Ciphers.AesGcmEncryptor(key);
    ByteBuffer out =
        ByteBuffer.allocate(
                8 + plaintext.length + 28 * Math.max(1, (plaintext.length + blockSize - 1) / blockSize))
            .order(ByteOrder.LITTLE_ENDIAN);
    out.put("AGS1".getBytes(StandardCharsets.US_ASCII)).putInt(blockSize);
    int index = 0;
    int offset = 0;
    do {
      int len = Math.min(blockSize, plaintext.length - offset);
      out.put(encryptor.encrypt(plaintext, offset, len, blockAad(aadPrefix, index)));
      offset += len;
      index++;
    } while (offset < plaintext.length);
    return out.array();
  }

  /** Decrypt an AGS1 stream of any block length with Iceberg's {@link Ciphers.AesGcmDecryptor}. */
  public static byte[] readWithBlockSize(byte[] stream, byte[] key, byte[] aadPrefix) {
    ByteBuffer in = ByteBuffer.wrap(stream).order(ByteOrder.LITTLE_ENDIAN);
    byte[] magic = new byte[4];
    in.get(magic);
    if (!"AGS1".equals(new String(magic, StandardCharsets.US_ASCII))) {
      throw new IllegalArgumentException("not AGS1");
    }
    int blockSize = in.getInt();
    Ciphers.AesGcmDecryptor decryptor = new Ciphers.AesGcmDecryptor(key);
    java.io.ByteArrayOutputStream plain = new java.io.ByteArrayOutputStream();
    int index = 0;
    while (in.hasRemaining()) {
      int len = Math.min(blockSize + 28, in.remaining());
      byte[] block = new byte[len];
      in.get(block);
      plain.writeBytes(decryptor.decrypt(block, blockAad(aadPrefix, index++)));
    }
    return plain.toByteArray();
  }

  private static byte[] blockAad(byte[] prefix, int index) {
    return ByteBuffer.allocate(prefix.length + 4)
        .order(ByteOrder.LITTLE_ENDIAN)
        .put(prefix)
        .putInt(index)
        .array();
  }

  // --------------------------------------------------------------- StandardKeyMetadata (Iceberg)

  /** Serialize with Iceberg's StandardKeyMetadata ({@code fileLength} may be null). */
  public static byte[] keyMetadata(byte[] key, byte[] aadPrefix, Long fileLength)
      throws ReflectiveOperationException {
    Constructor<?> ctor =
        Class.forName(ENC + "StandardKeyMetadata")
            .getDeclaredConstructor(byte[].class, byte[].class, Long.class);
    ctor.setAccessible(true);
    EncryptionKeyMetadata metadata = (EncryptionKeyMetadata) ctor.newInstance(key, aadPrefix, fileLength);
    return toArray(metadata.buffer());
  }

  private static NativeEncryptionKeyMetadata parseKeyMetadata(byte[] serialized)
      throws ReflectiveOperationException {
    Method parse =
        Class.forName(ENC + "StandardKeyMetadata").getDeclaredMethod("parse", ByteBuffer.class);
    parse.setAccessible(true);
    try {
      return (NativeEncryptionKeyMetadata) parse.invoke(null, ByteBuffer.wrap(serialized));
    } catch (java.lang.reflect.InvocationTargetException e) {
      throw new IllegalArgumentException("Iceberg rejected key metadata: " + e.getCause(), e.getCause());
    }
  }

  /** Parsed encryption key (Iceberg's StandardKeyMetadata.parse). */
  public static byte[] keyMetadataKey(byte[] serialized) throws ReflectiveOperationException {
    return toArray(parseKeyMetadata(serialized).encryptionKey());
  }

  /** Parsed AAD prefix, or null. */
  public static byte[] keyMetadataAadPrefix(byte[] serialized) throws ReflectiveOperationException {
    ByteBuffer aad = parseKeyMetadata(serialized).aadPrefix();
    return aad == null ? null : toArray(aad);
  }

  /** Parsed file length, or null. */
  public static Long keyMetadataFileLength(byte[] serialized) throws ReflectiveOperationException {
    return parseKeyMetadata(serialized).fileLength();
  }

  /** Iceberg's EncryptionUtil.setFileLength (parse, copyWithLength, serialize). */
  public static byte[] keyMetadataWithLength(byte[] serialized, long fileLength) {
    return toArray(
        org.apache.iceberg.encryption.EncryptionUtil.setFileLength(
            ByteBuffer.wrap(serialized), fileLength));
  }

  // ------------------------------------------------------ manifest-list key envelope (Iceberg)

  /** Iceberg's package-private EncryptionUtil.encryptManifestListKeyMetadata. */
  public static byte[] encryptManifestListKeyMetadata(
      byte[] kek, String kekTimestamp, byte[] keyMetadata) throws ReflectiveOperationException {
    Method encrypt =
        org.apache.iceberg.encryption.EncryptionUtil.class.getDeclaredMethod(
            "encryptManifestListKeyMetadata",
            ByteBuffer.class,
            String.class,
            EncryptionKeyMetadata.class);
    encrypt.setAccessible(true);
    EncryptionKeyMetadata metadata = parseKeyMetadata(keyMetadata);
    return toArray((ByteBuffer) encrypt.invoke(null, ByteBuffer.wrap(kek), kekTimestamp, metadata));
  }

  /**
   * The decryption half of EncryptionUtil.decryptManifestListKeyMetadata (which needs a whole
   * StandardEncryptionManager): the same Ciphers.AesGcmDecryptor call with the timestamp as AAD.
   */
  public static byte[] decryptManifestListKeyMetadata(
      byte[] kek, String kekTimestamp, byte[] encrypted) {
    return new Ciphers.AesGcmDecryptor(kek)
        .decrypt(encrypted, kekTimestamp.getBytes(StandardCharsets.UTF_8));
  }

  private static byte[] toArray(ByteBuffer buffer) {
    ByteBuffer dup = buffer.duplicate();
    byte[] out = new byte[dup.remaining()];
    dup.get(out);
    return out;
  }
}
