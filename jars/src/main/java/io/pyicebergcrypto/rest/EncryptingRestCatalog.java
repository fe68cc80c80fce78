package io.pyicebergcrypto.rest;

import java.util.Map;
import java.util.function.Function;
import org.apache.iceberg.rest.RESTCatalog;
import org.apache.iceberg.rest.RESTClient;
import org.apache.iceberg.rest.RESTSessionCatalog;

/**
 * Iceberg's REST catalog with table encryption: the same catalog properties as {@link RESTCatalog}
 * ({@code uri}, {@code warehouse}, ...) plus {@code encryption.kms-impl} and that KMS's own
 * properties. Tables with {@code encryption.key-id} are written PARE/AGS1 and their keys committed
 * as {@code add-encryption-key} updates.
 *
 * <p>Spark: {@code spark.sql.catalog.<name>.catalog-impl=io.pyicebergcrypto.rest.EncryptingRestCatalog}
 * (instead of {@code type=rest}).
 */
public class EncryptingRestCatalog extends RESTCatalog {
  static final String OPS_CLASS = "org.apache.iceberg.rest.EncryptingRESTTableOperations";

  public EncryptingRestCatalog() {
    super();
  }

  public EncryptingRestCatalog(Function<Map<String, String>, RESTClient> clientBuilder) {
    super(clientBuilder);
  }

  @Override
  protected RESTSessionCatalog newSessionCatalog(
      Function<Map<String, String>, RESTClient> clientBuilder) {
    checkSameClassLoader();
    return new org.apache.iceberg.rest.EncryptingRESTSessionCatalog(clientBuilder);
  }

  /**
   * The table operations subclass a package-private Iceberg class, which the JVM allows only when
   * both are defined by the same class loader: fail with a message that says so, not an
   * IllegalAccessError in the middle of a query.
   */
  static void checkSameClassLoader() {
    ClassLoader icebergLoader = RESTCatalog.class.getClassLoader();
    ClassLoader ours = EncryptingRestCatalog.class.getClassLoader();
    String problem = null;
    try {
      Class<?> ops = Class.forName(OPS_CLASS, false, ours);
      if (ops.getClassLoader() != icebergLoader) {
        problem = "it is loaded by " + ops.getClassLoader();
      }
    } catch (ClassNotFoundException | LinkageError e) {
      problem = e.getClass().getSimpleName() + ": " + e.getMessage();
    }
    if (problem != null) {
      throw new IllegalStateException(String.format(
          "EncryptingRestCatalog cannot subclass Iceberg's REST table operations (%s), and the "
              + "Iceberg runtime by %s: put the pyiceberg-crypto bridge jar and the Iceberg "
              + "runtime jar on the same classpath channel (both in spark.jars, or both on the "
              + "driver/executor extraClassPath)", problem, icebergLoader));
    }
  }
}
