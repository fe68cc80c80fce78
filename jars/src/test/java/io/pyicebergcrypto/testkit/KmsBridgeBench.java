package io.pyicebergcrypto.testkit;

import io.pyicebergcrypto.bridge.PythonKmsClient;
import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.iceberg.encryption.KeyManagementClient;

/**
 * Benchmark (called from Python over Py4J): latency of {@code unwrapKey} as the JVM sees it, from
 * {@code threads} plain Java threads, through the Python bridge or through the all-Java {@link
 * JavaMemoryKms} (the reference: the same AES-GCM key wrap without leaving the JVM).
 *
 * <p>Each result is {@code {p50 microseconds, p99 microseconds, calls per second, errors}} over
 * {@code threads * callsPerThread} timed calls, after {@code warmupCalls} untimed calls per thread
 * (which open each thread's connection): the clock starts when every thread has warmed up and
 * stops when the last one is done.
 */
public final class KmsBridgeBench {
  private KmsBridgeBench() {}

  /** Unwrap through the Python KMS registered under {@code kmsName}. */
  public static double[] python(String kmsName, String keyId, int threads, int callsPerThread, int warmupCalls)
      throws Exception {
    PythonKmsClient kms = new PythonKmsClient();
    kms.initialize(Map.of(PythonKmsClient.KMS_NAME_PROPERTY, kmsName));
    return measure(kms, keyId, threads, callsPerThread, warmupCalls);
  }

  /**
   * Unwrap through the Python KMS the catalog {@code properties} name: a {@code kms serve} service
   * ({@code pyiceberg-crypto.kms-service}, its token file and pin), or a registered name.
   */
  public static double[] client(
      Map<String, String> properties, String keyId, int threads, int callsPerThread, int warmupCalls)
      throws Exception {
    PythonKmsClient kms = new PythonKmsClient();
    kms.initialize(properties);
    return measure(kms, keyId, threads, callsPerThread, warmupCalls);
  }

  /**
   * Unwrap through any Iceberg {@link KeyManagementClient} class, made as Iceberg makes it (no-arg
   * constructor, then {@code initialize(properties)}): e.g. Iceberg's own {@code
   * org.apache.iceberg.aws.AwsKeyManagementClient} with {@code kms.endpoint} pointed at {@code kms
   * serve --aws-kms-api}, the client Trino uses.
   */
  public static double[] named(
      String kmsImpl, Map<String, String> properties, String keyId, int threads, int callsPerThread, int warmupCalls)
      throws Exception {
    KeyManagementClient kms =
        (KeyManagementClient) Class.forName(kmsImpl).getDeclaredConstructor().newInstance();
    kms.initialize(properties);
    try {
      return measure(kms, keyId, threads, callsPerThread, warmupCalls);
    } finally {
      kms.close();
    }
  }

  /** Unwrap through {@link JavaMemoryKms} holding {@code masterKey} under {@code keyId}. */
  public static double[] java(byte[] masterKey, String keyId, int threads, int callsPerThread, int warmupCalls)
      throws Exception {
    JavaMemoryKms kms = new JavaMemoryKms();
    kms.initialize(Map.of(JavaMemoryKms.PREFIX + keyId, Base64.getEncoder().encodeToString(masterKey)));
    return measure(kms, keyId, threads, callsPerThread, warmupCalls);
  }

  static double[] measure(KeyManagementClient kms, String keyId, int threads, int callsPerThread, int warmupCalls)
      throws Exception {
    byte[] dek = new byte[16];
    new SecureRandom().nextBytes(dek);
    ByteBuffer wrapped = kms.wrapKey(ByteBuffer.wrap(dek), keyId);
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    long[] latencies = new long[threads * callsPerThread];
    long[] errors = new long[1];
    try {
      List<Future<?>> work = new ArrayList<>();
      long[] start = new long[1];
      java.util.concurrent.CyclicBarrier warm =
          new java.util.concurrent.CyclicBarrier(threads, () -> start[0] = System.nanoTime());
      for (int t = 0; t < threads; t++) {
        int base = t * callsPerThread;
        work.add(pool.submit(() -> {
          for (int i = 0; i < warmupCalls; i++) {
            kms.unwrapKey(wrapped.duplicate(), keyId);
          }
          warm.await();
          for (int i = 0; i < callsPerThread; i++) {
            long begin = System.nanoTime();
            try {
              kms.unwrapKey(wrapped.duplicate(), keyId);
            } catch (RuntimeException e) {
              synchronized (errors) {
                errors[0]++;
              }
            }
            latencies[base + i] = System.nanoTime() - begin;
          }
          return null;
        }));
      }
      for (Future<?> f : work) {
        f.get();
      }
      long wall = System.nanoTime() - start[0];
      long calls = (long) threads * callsPerThread;
      Arrays.sort(latencies);
      return new double[] {
        percentile(latencies, 0.50) / 1e3,
        percentile(latencies, 0.99) / 1e3,
        calls / (wall / 1e9),
        errors[0]
      };
    } finally {
      pool.shutdownNow();
    }
  }

  private static double percentile(long[] sorted, double q) {
    int index = (int) Math.min(sorted.length - 1, Math.round(q * (sorted.length - 1)));
    return sorted[index];
  }
}
