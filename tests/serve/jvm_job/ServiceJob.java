import java.nio.file.Files;
import java.nio.file.Paths;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * A JVM-only Spark job (no Python anywhere) writing an encrypted Iceberg table through a
 * {@code pyiceberg-crypto kms serve} service that its catalog properties name.
 *
 * <p>Arguments: catalog, the TBLPROPERTIES clause, the token file the catalog reads. After its
 * writes the job deletes that file (a copy of the service's), so the maintenance that follows
 * runs with the token the driver read before: executors get it inside their tasks.
 */
public final class ServiceJob {
  public static void main(String[] args) throws Exception {
    String catalog = args[0];
    String tblproperties = args[1];
    SparkSession spark = SparkSession.builder().appName("kms-service-jvm-job").getOrCreate();
    String t3 = catalog + ".db.t3";
    System.out.println("READ t1 " + count(spark, catalog + ".db.t1") + " t2 " + count(spark, catalog + ".db.t2"));
    spark.sql("CREATE TABLE " + t3 + " (id bigint, v string) USING iceberg " + tblproperties);
    for (int i = 0; i < 3; i++) {
      spark.sql("INSERT INTO " + t3 + " SELECT id, CAST(id AS STRING) FROM range(" + (i * 100) + ", "
          + (i * 100 + 100) + ", 1, 4)");
    }
    Files.delete(Paths.get(args[2]));
    Row expired = spark.sql("CALL " + catalog + ".system.expire_snapshots(table => 'db.t3', "
        + "older_than => TIMESTAMP '9999-12-31 00:00:00', retain_last => 1)").first();
    System.out.println("EXPIRED " + expired.getLong(0) + " " + expired.getLong(4));
    Row sum = spark.sql("SELECT count(*), sum(id) FROM " + t3).first();
    System.out.println("RESULT " + sum.getLong(0) + " " + sum.getLong(1));
    spark.stop();
  }

  private static long count(SparkSession spark, String table) {
    return spark.sql("SELECT count(*) FROM " + table).first().getLong(0);
  }
}
