// Trino in one JVM, for the test kit: reads Iceberg tables through Trino's Iceberg connector.
//
//   java <options> -cp '.cache/trino/*' TrinoHarness.java catalog.properties < queries.txt
//
// Java 25 (Trino 483), run as a single-file source program: nothing to build. catalog.properties
// holds the Iceberg catalog's properties (java.util.Properties format). Each stdin line is one SQL
// query, run in catalog "iceberg"; each answer is one JSON line on stdout:
//   {"query": "...", "columns": [...], "rows": [[...], ...]}   or   {"query": "...", "error": "..."}
// The first line is {"ready": true, "startup_ms": N} once Trino is up. Airlift takes over
// System.out when Trino starts, so answers go through the stream taken before.
import io.trino.Session;
import io.trino.plugin.iceberg.IcebergPlugin;
import io.trino.testing.DistributedQueryRunner;
import io.trino.testing.MaterializedResult;
import io.trino.testing.MaterializedRow;

import java.io.BufferedReader;
import java.io.FileReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import static io.trino.testing.TestingSession.testSessionBuilder;

public class TrinoHarness {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
                StandardCharsets.UTF_8);
        Properties properties = new Properties();
        try (FileReader reader = new FileReader(args[0], StandardCharsets.UTF_8)) {
            properties.load(reader);
        }
        Map<String, String> catalog = new HashMap<>();
        for (String name : properties.stringPropertyNames()) {
            catalog.put(name, properties.getProperty(name));
        }
        long started = System.nanoTime();
        Session session = testSessionBuilder().setCatalog("iceberg").setSchema("default").build();
        try (DistributedQueryRunner runner = DistributedQueryRunner.builder(session).setWorkerCount(0).build()) {
            runner.installPlugin(new IcebergPlugin());
            runner.createCatalog("iceberg", "iceberg", catalog);
            out.println("{\"ready\": true, \"startup_ms\": " + (System.nanoTime() - started) / 1_000_000 + "}");
            BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String query;
            while ((query = input.readLine()) != null) {
                if (query.isBlank()) {
                    continue;
                }
                long begin = System.nanoTime();
                try {
                    MaterializedResult result = runner.execute(session, query);
                    List<String> rows = new ArrayList<>();
                    for (MaterializedRow row : result.getMaterializedRows()) {
                        List<String> fields = new ArrayList<>();
                        for (Object field : row.getFields()) {
                            fields.add(json(field));
                        }
                        rows.add("[" + String.join(", ", fields) + "]");
                    }
                    List<String> columns = new ArrayList<>();
                    for (String column : result.getColumnNames()) {
                        columns.add(json(column));
                    }
                    out.println("{\"query\": " + json(query) + ", \"ms\": " + (System.nanoTime() - begin) / 1_000_000
                            + ", \"columns\": [" + String.join(", ", columns) + "], \"rows\": ["
                            + String.join(", ", rows) + "]}");
                }
                catch (Throwable failure) {
                    StringBuilder text = new StringBuilder();
                    for (Throwable cause = failure; cause != null && text.length() < 4000; cause = cause.getCause()) {
                        text.append(cause.getClass().getName()).append(": ").append(cause.getMessage()).append(" | ");
                    }
                    out.println("{\"query\": " + json(query) + ", \"error\": " + json(text.toString()) + "}");
                }
            }
        }
        out.flush();
        System.exit(0);
    }

    private static String json(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Number || value instanceof Boolean) {
            return value.toString();
        }
        String text = value.toString();
        StringBuilder escaped = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> escaped.append("\\\"");
                case '\\' -> escaped.append("\\\\");
                case '\n' -> escaped.append("\\n");
                case '\r' -> escaped.append("\\r");
                case '\t' -> escaped.append("\\t");
                default -> {
                    if (c < 0x20) {
                        escaped.append(String.format("\\u%04x", (int) c));
                    }
                    else {
                        escaped.append(c);
                    }
                }
            }
        }
        return escaped.append('"').toString();
    }
}
