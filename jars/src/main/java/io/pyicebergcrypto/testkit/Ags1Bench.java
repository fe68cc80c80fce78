package io.pyicebergcrypto.testkit;

import java.util.HexFormat;

/**
 * Benchmark entry point (no Spark needed): read an AGS1 file with Iceberg's AesGcmInputStream.
 *
 * <pre>java -cp 'pyiceberg_crypto/_jars/*' io.pyicebergcrypto.testkit.Ags1Bench FILE KEY_HEX AAD_HEX WARMUP RUNS</pre>
 *
 * Prints one line per timed run: the elapsed nanoseconds of one full read.
 */
public final class Ags1Bench {
  private Ags1Bench() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 5) {
      System.err.println("usage: Ags1Bench FILE KEY_HEX AAD_HEX WARMUP RUNS");
      System.exit(2);
    }
    byte[] key = HexFormat.of().parseHex(args[1]);
    byte[] aad = HexFormat.of().parseHex(args[2]);
    int warmup = Integer.parseInt(args[3]);
    int runs = Integer.parseInt(args[4]);
    Ags1Vectors.timeRead(args[0], key, aad, warmup);
    for (int i = 0; i < runs; i++) {
      System.out.println(Ags1Vectors.timeRead(args[0], key, aad, 1));
    }
  }
}
