package io.pyicebergcrypto.testkit;

import io.pyicebergcrypto.bridge.PythonKmsClient;
import java.net.InetAddress;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.apache.iceberg.encryption.KeyManagementClient;
import org.apache.spark.api.java.function.FlatMapFunction;

/**
 * Benchmark (bench/cluster_kms.py): {@code unwrapKey} latency as an executor JVM sees it, through the
 * {@link PythonKmsClient} that Iceberg ships to executors. Made on the driver, where the Python KMS is
 * registered, so that serializing it into the task carries the registration's endpoint (address,
 * token, certificate pin) exactly as Iceberg's own tasks do; each partition then runs {@link
 * KmsBridgeBench#measure} in its executor and returns one line:
 * {@code host,p50 us,p99 us,calls per second,errors}.
 *
 * <pre>
 *   fn = jvm.io.pyicebergcrypto.testkit.ExecutorKmsBench.forRegisteredKms("default", "key", 8, 500, 50)
 *   lines = jsc.parallelize(jvm.java.util.Collections.nCopies(1, 0), 1).mapPartitions(fn).collect()
 * </pre>
 */
public final class ExecutorKmsBench implements FlatMapFunction<Iterator<Object>, String> {
  private static final long serialVersionUID = 1L;

  private final KeyManagementClient kms;
  private final String keyId;
  private final int threads;
  private final int callsPerThread;
  private final int warmupCalls;

  private ExecutorKmsBench(KeyManagementClient kms, String keyId, int threads, int callsPerThread, int warmupCalls) {
    this.kms = kms;
    this.keyId = keyId;
    this.threads = threads;
    this.callsPerThread = callsPerThread;
    this.warmupCalls = warmupCalls;
  }

  /** A task body calling the Python KMS registered in this (driver) JVM under {@code kmsName}. */
  public static ExecutorKmsBench forRegisteredKms(
      String kmsName, String keyId, int threads, int callsPerThread, int warmupCalls) {
    PythonKmsClient kms = new PythonKmsClient();
    kms.initialize(Map.of(PythonKmsClient.KMS_NAME_PROPERTY, kmsName));
    return new ExecutorKmsBench(kms, keyId, threads, callsPerThread, warmupCalls);
  }

  @Override
  public Iterator<String> call(Iterator<Object> ignored) throws Exception {
    double[] result = KmsBridgeBench.measure(kms, keyId, threads, callsPerThread, warmupCalls);
    String host = System.getenv("NM_HOST"); // a YARN container: its NodeManager's address
    if (host == null || host.isEmpty()) {
      host = System.getenv("SPARK_LOCAL_IP"); // a standalone worker's
    }
    if (host == null || host.isEmpty()) {
      host = InetAddress.getLocalHost().getHostAddress();
    }
    return List.of(String.format(Locale.ROOT, "%s,%.3f,%.3f,%.3f,%.0f", host, result[0], result[1], result[2], result[3]))
        .iterator();
  }
}
