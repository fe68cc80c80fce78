package io.pyicebergcrypto.bridge;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import scala.Function1;
import scala.runtime.BoxedUnit;

/**
 * A Spark SQL extension (``spark.sql.extensions``) that keeps tables declared for Trino readable by
 * Trino: on a table whose {@code pyiceberg-crypto.readers} names {@code trino}, it refuses
 *
 * <ul>
 *   <li>{@code ALTER TABLE ... SET TBLPROPERTIES} that sets {@code write.delete.mode},
 *       {@code write.update.mode} or {@code write.merge.mode} to {@code merge-on-read}, and
 *   <li>a row-level DELETE, UPDATE or MERGE that Spark planned as a delta write ({@code WriteDelta},
 *       or Iceberg's {@code WriteIcebergDelta} on Spark 3.5:
 *       the table's mode for that operation is merge-on-read, so it would write deletion vectors,
 *       which Trino cannot read when they are encrypted).
 * </ul>
 *
 * <p>It is one check rule ({@code SparkSessionExtensions.injectCheckRule}): it runs at the end of
 * analysis, after Spark rewrote DELETE/UPDATE/MERGE into {@code ReplaceData} (copy-on-write) or
 * {@code WriteDelta} (merge-on-read), and throws a {@link ReadersGuardException} before anything
 * runs. That is an {@code IllegalArgumentException}, not an {@code AnalysisException}: Spark appends
 * the whole plan to every {@code AnalysisException} raised during analysis, and the refusal is one
 * line (PySpark raises it as {@code pyspark.errors.IllegalArgumentException}).
 * The table's properties come from the resolved connector table ({@code Table.properties()}).
 *
 * <p>Spark's classes are reached by reflection and the class compiles against {@code scala-library}
 * only ({@code Function1.apply}, {@code BoxedUnit}), so the one jar serves Spark 3.5 (Scala 2.12)
 * and Spark 4.1 (Scala 2.13): the plan nodes and methods used have the same names on both lines.
 */
public final class ReadersGuardExtensions implements Function1<Object, BoxedUnit> {
  public static final String READERS_PROPERTY = "pyiceberg-crypto.readers";
  public static final String GUARDED_READER = "trino";
  public static final String MERGE_ON_READ = "merge-on-read";
  public static final String[] ROW_LEVEL_MODES = {
    "write.delete.mode", "write.update.mode", "write.merge.mode"
  };
  public static final String WAY_OUT =
      "change the declared readers (" + READERS_PROPERTY + ") or stay copy-on-write";

  /** Called by Spark with the session's {@code SparkSessionExtensions}. */
  @Override
  public BoxedUnit apply(Object extensions) {
    try {
      Method inject = extensions.getClass().getMethod("injectCheckRule", Function1.class);
      inject.invoke(extensions, new CheckRuleBuilder());
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("pyiceberg-crypto readers guard: cannot inject its check rule", e);
    }
    return BoxedUnit.UNIT;
  }

  /** {@code SparkSession => (LogicalPlan => Unit)}. */
  static final class CheckRuleBuilder implements Function1<Object, Function1<Object, BoxedUnit>> {
    @Override
    public Function1<Object, BoxedUnit> apply(Object session) {
      return new CheckRule();
    }
  }

  /** {@code LogicalPlan => Unit}: throws when the plan would break a Trino-declared table. */
  static final class CheckRule implements Function1<Object, BoxedUnit> {
    @Override
    public BoxedUnit apply(Object plan) {
      check(plan);
      return BoxedUnit.UNIT;
    }
  }

  static void check(Object plan) {
    if (plan == null) {
      return;
    }
    String node = plan.getClass().getSimpleName();
    if ("SetTableProperties".equals(node)) {
      checkSetProperties(plan);
    } else if ("WriteDelta".equals(node) || "WriteIcebergDelta".equals(node)) {
      // Spark's delta write; Iceberg's own on Spark 3.5 (its UPDATE and MERGE rewrites)
      checkDeltaWrite(plan);
    }
    for (Object child : children(plan)) {
      check(child);
    }
  }

  private static void checkSetProperties(Object plan) {
    Object resolved = call(plan, "table");
    Map<String, String> current = tableProperties(resolved);
    if (current == null) {
      return;
    }
    Object changes = call(plan, "properties");
    String readers = scalaMapGet(changes, READERS_PROPERTY);
    if (readers == null) {
      readers = current.get(READERS_PROPERTY);
    }
    if (!namesGuardedReader(readers)) {
      return;
    }
    for (String mode : ROW_LEVEL_MODES) {
      String value = scalaMapGet(changes, mode);
      if (value != null && MERGE_ON_READ.equalsIgnoreCase(value.trim())) {
        throw new ReadersGuardException(
            "refused: ALTER TABLE "
                + tableName(resolved)
                + " SET TBLPROPERTIES ('"
                + mode
                + "'='"
                + MERGE_ON_READ
                + "') on a table whose "
                + READERS_PROPERTY
                + " declares "
                + GUARDED_READER
                + " (which cannot read encrypted deletion vectors): "
                + WAY_OUT);
      }
    }
  }

  private static void checkDeltaWrite(Object plan) {
    Object relation = call(plan, "originalTable");
    if (relation == null) {
      relation = call(plan, "table");
    }
    Map<String, String> properties = tableProperties(relation);
    if (properties == null || !namesGuardedReader(properties.get(READERS_PROPERTY))) {
      return;
    }
    String command = "row-level";
    Object operation = call(plan, "operation");
    if (operation == null) {
      Object rowLevelTable = call(call(plan, "table"), "table"); // RowLevelOperationTable
      operation = rowLevelTable == null ? null : call(rowLevelTable, "operation");
    }
    Object kind = operation == null ? null : call(operation, "command");
    if (kind != null) {
      command = kind.toString().toUpperCase(Locale.ROOT);
    }
    String mode = modeFor(command);
    throw new ReadersGuardException(
        "refused: "
            + command
            + " on "
            + tableName(relation)
            + " would write deletion vectors ("
            + (mode == null ? "merge-on-read" : mode + "=" + MERGE_ON_READ)
            + ") on a table whose "
            + READERS_PROPERTY
            + " declares "
            + GUARDED_READER
            + " (which cannot read encrypted deletion vectors): "
            + WAY_OUT);
  }

  private static String modeFor(String command) {
    switch (command) {
      case "DELETE":
        return "write.delete.mode";
      case "UPDATE":
        return "write.update.mode";
      case "MERGE":
        return "write.merge.mode";
      default:
        return null;
    }
  }

  /** Whether a {@code pyiceberg-crypto.readers} value names {@code trino}. */
  static boolean namesGuardedReader(String readers) {
    if (readers == null) {
      return false;
    }
    for (String name : readers.split(",")) {
      if (GUARDED_READER.equals(name.trim().toLowerCase(Locale.ROOT))) {
        return true;
      }
    }
    return false;
  }

  /**
   * The connector table's properties behind a resolved plan node ({@code ResolvedTable},
   * {@code DataSourceV2Relation}); null when it is not a resolved v2 table.
   */
  @SuppressWarnings("unchecked")
  private static Map<String, String> tableProperties(Object relation) {
    Object table = relation == null ? null : call(relation, "table");
    Object properties = table == null ? null : call(table, "properties");
    return properties instanceof Map ? (Map<String, String>) properties : null;
  }

  private static String tableName(Object relation) {
    Object table = relation == null ? null : call(relation, "table");
    Object name = table == null ? null : call(table, "name");
    return name == null ? String.valueOf(relation) : name.toString();
  }

  private static List<Object> children(Object plan) {
    List<Object> out = new ArrayList<>();
    Object seq = call(plan, "children");
    Object iterator = seq == null ? null : call(seq, "iterator");
    if (iterator == null) {
      return out;
    }
    while (Boolean.TRUE.equals(call(iterator, "hasNext"))) {
      out.add(call(iterator, "next"));
    }
    return out;
  }

  /** {@code map.get(key)} on a Scala map, unwrapped from its {@code Option}; null when absent. */
  private static String scalaMapGet(Object map, String key) {
    if (map == null) {
      return null;
    }
    try {
      Object option = findMethod(map.getClass(), "get", 1).invoke(map, key);
      if (option == null || !Boolean.TRUE.equals(call(option, "isDefined"))) {
        return null;
      }
      Object value = call(option, "get");
      return value == null ? null : value.toString();
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  /** A no-argument public method's result, or null when there is none or it throws. */
  private static Object call(Object target, String name) {
    if (target == null) {
      return null;
    }
    try {
      Method method = findMethod(target.getClass(), name, 0);
      return method == null ? null : method.invoke(target);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  /** Looked-up methods by class, name and arity (the rule runs on every analyzed plan). */
  private static final ConcurrentHashMap<String, Optional<Method>> METHODS = new ConcurrentHashMap<>();

  private static Method findMethod(Class<?> type, String name, int arity) {
    String key = type.getName() + "#" + name + "/" + arity + "@" + System.identityHashCode(type.getClassLoader());
    return METHODS.computeIfAbsent(key, k -> lookUp(type, name, arity)).orElse(null);
  }

  private static Optional<Method> lookUp(Class<?> type, String name, int arity) {
    for (Method method : type.getMethods()) {
      if (method.getName().equals(name) && method.getParameterCount() == arity) {
        try {
          method.setAccessible(true);
        } catch (RuntimeException e) {
          // public method of a public class: invoke works without it
        }
        return Optional.of(method);
      }
    }
    return Optional.empty();
  }
}
