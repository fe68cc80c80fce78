package io.pyicebergcrypto.testkit;

import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Benchmark entry point (no Spark needed): read an AGS1 file with Iceberg's AesGcmInputStream.
 *
 * <pre>java -cp 'pyiceberg_crypto/_jars/*' io.pyicebergcrypto.testkit.Ags1Bench FILE KEY_HEX AAD_HEX WARMUP RUNS [THREADS]</pre>
 *
 * Prints one line per timed run: the elapsed wall nanoseconds of THREADS concurrent full reads
 * of the file (default 1 thread), after WARMUP untimed rounds of the same.
 */
public final class Ags1Bench {
  private Ags1Bench() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 5 && args.length != 6) {
      System.err.println("usage: Ags1Bench FILE KEY_HEX AAD_HEX WARMUP RUNS [THREADS]");
      System.exit(2);
    }
    String file = args[0];
    byte[] key = HexFormat.of().parseHex(args[1]);
    byte[] aad = HexFormat.of().parseHex(args[2]);
    int warmup = Integer.parseInt(args[3]);
    int runs = Integer.parseInt(args[4]);
    int threads = args.length == 6 ? Integer.parseInt(args[5]) : 1;
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    try {
      for (int i = 0; i < warmup; i++) {
        concurrentReads(pool, threads, file, key, aad);
      }
      for (int i = 0; i < runs; i++) {
        System.out.println(concurrentReads(pool, threads, file, key, aad));
      }
    } finally {
      pool.shutdownNow();
    }
  }

  private static long concurrentReads(ExecutorService pool, int threads, String file, byte[] key, byte[] aad)
      throws Exception {
    long start = System.nanoTime();
    List<Future<Long>> reads = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      reads.add(pool.submit(() -> Ags1Vectors.timeRead(file, key, aad, 1)));
    }
    for (Future<Long> read : reads) {
      read.get();
    }
    return System.nanoTime() - start;
  }
}
