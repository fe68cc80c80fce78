package io.pyicebergcrypto.testkit;

import java.io.IOException;
import java.io.Writer;
import java.lang.reflect.Method;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.Table;
import org.apache.iceberg.encryption.NativeEncryptionKeyMetadata;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.parquet.ParquetReadOptions;
import org.apache.parquet.column.ColumnDescriptor;
import org.apache.parquet.column.ParquetProperties;
import org.apache.parquet.column.page.DataPage;
import org.apache.parquet.column.page.DataPageV1;
import org.apache.parquet.column.page.DataPageV2;
import org.apache.parquet.column.page.PageReadStore;
import org.apache.parquet.column.page.PageReader;
import org.apache.parquet.crypto.ColumnDecryptionProperties;
import org.apache.parquet.crypto.ColumnEncryptionProperties;
import org.apache.parquet.crypto.FileDecryptionProperties;
import org.apache.parquet.crypto.FileEncryptionProperties;
import org.apache.parquet.crypto.InternalFileDecryptor;
import org.apache.parquet.crypto.ParquetCipher;
import org.apache.parquet.example.data.Group;
import org.apache.parquet.example.data.simple.SimpleGroupFactory;
import org.apache.parquet.example.data.simple.convert.GroupRecordConverter;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.ParquetFileWriter;
import org.apache.parquet.hadoop.ParquetWriter;
import org.apache.parquet.hadoop.example.ExampleParquetWriter;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData;
import org.apache.parquet.hadoop.metadata.ColumnPath;
import org.apache.parquet.hadoop.metadata.CompressionCodecName;
import org.apache.parquet.io.ColumnIOFactory;
import org.apache.parquet.io.LocalInputFile;
import org.apache.parquet.io.LocalOutputFile;
import org.apache.parquet.io.MessageColumnIO;
import org.apache.parquet.io.RecordReader;
import org.apache.parquet.io.api.Binary;
import org.apache.parquet.schema.GroupType;
import org.apache.parquet.schema.LogicalTypeAnnotation;
import org.apache.parquet.schema.MessageType;
import org.apache.parquet.schema.MessageTypeParser;
import org.apache.parquet.schema.PrimitiveType;
import org.apache.parquet.schema.Type;

/**
 * Test-only reference vectors for Parquet Modular Encryption, written and read by parquet-java.
 *
 * <p>Python describes each file with a fluent {@link Spec} and calls {@link Spec#write()}; keys and
 * AAD prefixes come from Python so the pure-Python verifier can be tested against the files:
 *
 * <pre>
 *   ParquetVectors.spec("/tmp/v.parquet", "/tmp/v.expected.jsonl")
 *       .footerKey(key16).algorithm("AES_GCM_CTR_V1").plaintextFooter(true)
 *       .columnKey("name", key32, "k-name").plaintextColumn("payload")
 *       .aadPrefix(prefix, false).bloomFilter("id").write();
 *   ParquetVectors.readJsonLines("/tmp/v.parquet", ParquetVectors.keys().footer(key16)..., out);
 * </pre>
 *
 * <p>Rows are deterministic functions of the row index over {@link #SCHEMA}; they are written to a
 * JSON-lines file (see {@link #toJson}) so Python can compare values "as Java wrote / read them".
 */
public final class ParquetVectors {
  private ParquetVectors() {}

  /** One schema exercising flat, optional, decimal, timestamp, struct and list columns. */
  public static final String SCHEMA =
      "message vector {\n"
          + "  required int64 id;\n"
          + "  optional binary name (STRING);\n"
          + "  required double score;\n"
          + "  required boolean flag;\n"
          + "  optional int64 amount (DECIMAL(18,2));\n"
          + "  required int64 ts (TIMESTAMP(MICROS,true));\n"
          + "  optional group address {\n"
          + "    required binary city (STRING);\n"
          + "    optional int32 zip;\n"
          + "  }\n"
          + "  optional group tags (LIST) {\n"
          + "    repeated group list {\n"
          + "      optional binary element (STRING);\n"
          + "    }\n"
          + "  }\n"
          + "  required binary payload;\n"
          + "}\n";

  public static Spec spec(String path, String expectedJsonLines) {
    return new Spec(path, expectedJsonLines);
  }

  public static Keys keys() {
    return new Keys();
  }

  /** Everything that varies between vectors. Setters return this (fluent, Py4J-friendly). */
  public static final class Spec {
    private final String path;
    private final String expectedJsonLines;
    private byte[] footerKey;
    private byte[] footerKeyMetadata;
    private ParquetCipher algorithm = ParquetCipher.AES_GCM_V1;
    private boolean plaintextFooter = false;
    private byte[] aadPrefix;
    private boolean storeAadPrefix = true;
    private final Map<String, byte[]> columnKeys = new LinkedHashMap<>();
    private final Map<String, byte[]> columnKeyMetadata = new HashMap<>();
    private final Set<String> footerKeyColumns = new LinkedHashSet<>();
    private final Set<String> plaintextColumns = new LinkedHashSet<>();
    private boolean completeColumnEncryption = false;
    private boolean dictionary = true;
    private boolean pageV2 = false;
    private final Set<String> bloomColumns = new LinkedHashSet<>();
    private int rows = 400;
    private int rowGroupRows = 150;
    private int pageRows = 50;
    private CompressionCodecName codec = CompressionCodecName.UNCOMPRESSED;

    private Spec(String path, String expectedJsonLines) {
      this.path = path;
      this.expectedJsonLines = expectedJsonLines;
    }

    public Spec footerKey(byte[] key) {
      this.footerKey = key;
      return this;
    }

    public Spec footerKeyMetadata(byte[] metadata) {
      this.footerKeyMetadata = metadata;
      return this;
    }

    /** "AES_GCM_V1" or "AES_GCM_CTR_V1". */
    public Spec algorithm(String name) {
      this.algorithm = ParquetCipher.valueOf(name);
      return this;
    }

    public Spec plaintextFooter(boolean on) {
      this.plaintextFooter = on;
      return this;
    }

    public Spec aadPrefix(byte[] prefix, boolean store) {
      this.aadPrefix = prefix;
      this.storeAadPrefix = store;
      return this;
    }

    /** Encrypt the column (dotted path) with its own key; metadata may be null. */
    public Spec columnKey(String dottedPath, byte[] key, byte[] keyMetadata) {
      columnKeys.put(dottedPath, key);
      if (keyMetadata != null) {
        columnKeyMetadata.put(dottedPath, keyMetadata);
      }
      return this;
    }

    /** List the column explicitly as encrypted with the footer key (per-column mode). */
    public Spec footerKeyColumn(String dottedPath) {
      footerKeyColumns.add(dottedPath);
      return this;
    }

    /**
     * Leave the column unencrypted. In per-column mode parquet-java leaves every column not listed
     * unencrypted; this is only bookkeeping for the honesty checks (and turns on per-column mode).
     */
    public Spec plaintextColumn(String dottedPath) {
      plaintextColumns.add(dottedPath);
      return this;
    }

    /** Columns not listed get the footer key (parquet-java withCompleteColumnEncryption). */
    public Spec completeColumnEncryption(boolean on) {
      this.completeColumnEncryption = on;
      return this;
    }

    public Spec dictionary(boolean on) {
      this.dictionary = on;
      return this;
    }

    public Spec pageV2(boolean on) {
      this.pageV2 = on;
      return this;
    }

    public Spec bloomFilter(String dottedPath) {
      bloomColumns.add(dottedPath);
      return this;
    }

    public Spec rows(int count) {
      this.rows = count;
      return this;
    }

    public Spec rowGroupRows(int count) {
      this.rowGroupRows = count;
      return this;
    }

    public Spec pageRows(int count) {
      this.pageRows = count;
      return this;
    }

    /** "UNCOMPRESSED", "SNAPPY", "ZSTD", "GZIP". */
    public Spec codec(String name) {
      this.codec = CompressionCodecName.valueOf(name);
      return this;
    }

    FileEncryptionProperties encryptionProperties() {
      FileEncryptionProperties.Builder builder =
          FileEncryptionProperties.builder(footerKey).withAlgorithm(algorithm);
      if (footerKeyMetadata != null) {
        builder.withFooterKeyMetadata(footerKeyMetadata);
      }
      if (plaintextFooter) {
        builder.withPlaintextFooter();
      }
      if (aadPrefix != null) {
        builder.withAADPrefix(aadPrefix);
        if (!storeAadPrefix) {
          builder.withoutAADPrefixStorage();
        }
      }
      boolean perColumn =
          !columnKeys.isEmpty() || !footerKeyColumns.isEmpty() || !plaintextColumns.isEmpty();
      if (perColumn) {
        Map<ColumnPath, ColumnEncryptionProperties> columns = new HashMap<>();
        for (Map.Entry<String, byte[]> entry : columnKeys.entrySet()) {
          ColumnPath columnPath = ColumnPath.fromDotString(entry.getKey());
          ColumnEncryptionProperties.Builder column =
              ColumnEncryptionProperties.builder(columnPath).withKey(entry.getValue());
          byte[] metadata = columnKeyMetadata.get(entry.getKey());
          if (metadata != null) {
            column.withKeyMetaData(metadata);
          }
          columns.put(columnPath, column.build());
        }
        for (String column : footerKeyColumns) {
          ColumnPath columnPath = ColumnPath.fromDotString(column);
          columns.put(columnPath, ColumnEncryptionProperties.builder(columnPath).build());
        }
        builder.withEncryptedColumns(columns);
        if (completeColumnEncryption) {
          builder.withCompleteColumnEncryption();
        }
      }
      return builder.build();
    }

    /** Write the Parquet file and the JSON lines of the rows written; returns the row count. */
    public int write() throws IOException {
      MessageType schema = MessageTypeParser.parseMessageType(SCHEMA);
      ExampleParquetWriter.Builder builder =
          ExampleParquetWriter.builder(new LocalOutputFile(Paths.get(path)))
              .withType(schema)
              .withWriteMode(ParquetFileWriter.Mode.OVERWRITE)
              .withCompressionCodec(codec)
              .withDictionaryEncoding(dictionary)
              .withWriterVersion(
                  pageV2
                      ? ParquetProperties.WriterVersion.PARQUET_2_0
                      : ParquetProperties.WriterVersion.PARQUET_1_0)
              .withRowGroupRowCountLimit(rowGroupRows)
              .withPageRowCountLimit(pageRows)
              .withEncryption(encryptionProperties());
      for (String column : bloomColumns) {
        // Sized for our row count (the default is up to 1 MiB per column chunk).
        builder.withBloomFilterEnabled(column, true).withBloomFilterNDV(column, Math.max(rows, 1));
      }
      SimpleGroupFactory factory = new SimpleGroupFactory(schema);
      try (ParquetWriter<Group> writer = builder.build();
          Writer json = Files.newBufferedWriter(Paths.get(expectedJsonLines), StandardCharsets.UTF_8)) {
        for (int i = 0; i < rows; i += 1) {
          Group row = row(factory, i);
          writer.write(row);
          json.write(toJson(row));
          json.write('\n');
        }
      }
      return rows;
    }
  }

  /** Deterministic row {@code i}: nulls, repeats (dictionary-friendly) and unique binaries. */
  static Group row(SimpleGroupFactory factory, int i) {
    Group row = factory.newGroup();
    row.append("id", (long) i);
    if (i % 7 != 3) {
      row.append("name", "name-" + (i % 5));
    }
    row.append("score", i * 0.25);
    row.append("flag", i % 3 == 0);
    if (i % 11 != 5) {
      row.append("amount", (long) i * 137 - 5000);
    }
    row.append("ts", 1_700_000_000_000_000L + (long) i * 1_000_003L);
    if (i % 13 != 0) {
      Group address = row.addGroup("address");
      address.append("city", "city-" + (i % 3));
      if (i % 4 != 1) {
        address.append("zip", 10000 + i);
      }
    }
    if (i % 9 != 2) {
      Group tags = row.addGroup("tags");
      for (int j = 0; j < i % 4; j += 1) {
        Group element = tags.addGroup("list");
        if ((i + j) % 5 != 0) {
          element.append("element", "t" + j);
        }
      }
    }
    byte[] payload = new byte[8 + (i % 17)];
    for (int k = 0; k < payload.length; k += 1) {
      payload[k] = (byte) (i * 31 + k * 7);
    }
    row.append("payload", Binary.fromConstantByteArray(payload));
    return row;
  }

  /** Decryption keys for reading; all parts optional. */
  public static final class Keys {
    private byte[] footer;
    private byte[] aadPrefix;
    private final Map<String, byte[]> columns = new LinkedHashMap<>();

    public Keys footer(byte[] key) {
      this.footer = key;
      return this;
    }

    public Keys aadPrefix(byte[] prefix) {
      this.aadPrefix = prefix;
      return this;
    }

    public Keys column(String dottedPath, byte[] key) {
      columns.put(dottedPath, key);
      return this;
    }

    public FileDecryptionProperties toDecryptionProperties() {
      FileDecryptionProperties.Builder builder = FileDecryptionProperties.builder();
      if (footer != null) {
        builder.withFooterKey(footer);
      } else {
        builder.withoutFooterSignatureVerification();
      }
      if (aadPrefix != null) {
        builder.withAADPrefix(aadPrefix);
      }
      if (!columns.isEmpty()) {
        Map<ColumnPath, ColumnDecryptionProperties> props = new HashMap<>();
        for (Map.Entry<String, byte[]> entry : columns.entrySet()) {
          ColumnPath columnPath = ColumnPath.fromDotString(entry.getKey());
          props.put(
              columnPath,
              ColumnDecryptionProperties.builder(columnPath).withKey(entry.getValue()).build());
        }
        builder.withColumnKeys(props);
      }
      return builder.build();
    }
  }

  private static ParquetFileReader open(String path, Keys keys) throws IOException {
    ParquetReadOptions.Builder options = ParquetReadOptions.builder();
    if (keys != null) {
      options.withDecryption(keys.toDecryptionProperties());
    }
    return ParquetFileReader.open(new LocalInputFile(Paths.get(path)), options.build());
  }

  /**
   * Read every row of {@code path} with parquet-java (decrypting with {@code keys}, or none if
   * null) and write them as JSON lines to {@code out}; returns the row count. Works for any
   * Parquet file, including Iceberg data files.
   */
  public static long readJsonLines(String path, Keys keys, String out) throws IOException {
    long count = 0;
    try (ParquetFileReader reader = open(path, keys);
        Writer json = Files.newBufferedWriter(Paths.get(out), StandardCharsets.UTF_8)) {
      MessageType schema = reader.getFooter().getFileMetaData().getSchema();
      MessageColumnIO columnIO = new ColumnIOFactory().getColumnIO(schema);
      PageReadStore pages;
      while ((pages = reader.readNextRowGroup()) != null) {
        RecordReader<Group> records =
            columnIO.getRecordReader(pages, new GroupRecordConverter(schema));
        for (long i = 0; i < pages.getRowCount(); i += 1) {
          json.write(toJson(records.read()));
          json.write('\n');
          count += 1;
        }
      }
    }
    return count;
  }

  /**
   * What parquet-java sees in the file, as JSON:
   *
   * <pre>
   * {"encryption_type": "ENCRYPTED_FOOTER"|"PLAINTEXT_FOOTER"|"UNENCRYPTED",
   *  "row_groups": [{"rows": n, "columns": {"dotted.path": {
   *     "encrypted": bool, "column_metadata_encrypted": bool (own-key columns),
   *     "dictionary_page": bool, "column_index": bool, "offset_index": bool, "bloom_filter": bool,
   *     "codec": "ZSTD", "data_pages": ["v1"|"v2", ...], "column_index_pages": n|null,
   *     "offset_index_pages": n|null, "bloom_filter_bytes": n|null}}}]}
   * </pre>
   *
   * Reads every page, column index, offset index and bloom filter (so it also proves that
   * parquet-java decrypts each of them).
   */
  public static String inspect(String path, Keys keys) throws IOException {
    StringBuilder out = new StringBuilder();
    try (ParquetFileReader reader = open(path, keys)) {
      MessageType schema = reader.getFooter().getFileMetaData().getSchema();
      out.append("{\"encryption_type\":")
          .append(quote(String.valueOf(reader.getFooter().getFileMetaData().getEncryptionType())))
          .append(",\"row_groups\":[");
      List<BlockMetaData> blocks = reader.getRowGroups();
      for (int b = 0; b < blocks.size(); b += 1) {
        BlockMetaData block = blocks.get(b);
        PageReadStore pages = reader.readNextRowGroup();
        if (b > 0) {
          out.append(',');
        }
        out.append("{\"rows\":").append(block.getRowCount()).append(",\"columns\":{");
        List<ColumnChunkMetaData> columns = block.getColumns();
        for (int c = 0; c < columns.size(); c += 1) {
          ColumnChunkMetaData column = columns.get(c);
          ColumnDescriptor descriptor = schema.getColumnDescription(column.getPath().toArray());
          if (c > 0) {
            out.append(',');
          }
          out.append(quote(column.getPath().toDotString())).append(":{");
          InternalFileDecryptor decryptor = reader.getFooter().getFileMetaData().getFileDecryptor();
          boolean encrypted =
              decryptor != null
                  ? decryptor.getColumnSetup(column.getPath()).isEncrypted()
                  : column.isEncrypted();
          out.append("\"encrypted\":").append(encrypted);
          // True only when the ColumnMetaData is encrypted separately (column's own key).
          out.append(",\"column_metadata_encrypted\":").append(column.isEncrypted());
          out.append(",\"dictionary_page\":").append(column.hasDictionaryPage());
          out.append(",\"column_index\":").append(column.getColumnIndexReference() != null);
          out.append(",\"offset_index\":").append(column.getOffsetIndexReference() != null);
          out.append(",\"bloom_filter\":").append(column.getBloomFilterOffset() >= 0);
          out.append(",\"codec\":").append(quote(column.getCodec().name()));
          out.append(",\"data_pages\":[");
          PageReader pageReader = pages.getPageReader(descriptor);
          if (pageReader.readDictionaryPage() != null && !column.hasDictionaryPage()) {
            throw new IllegalStateException("dictionary page without metadata flag");
          }
          boolean first = true;
          DataPage page;
          while ((page = pageReader.readPage()) != null) {
            out.append(first ? "" : ",").append(page instanceof DataPageV2 ? "\"v2\"" : "\"v1\"");
            if (!(page instanceof DataPageV1) && !(page instanceof DataPageV2)) {
              throw new IllegalStateException("unknown page class " + page.getClass());
            }
            first = false;
          }
          out.append("],\"column_index_pages\":");
          out.append(
              column.getColumnIndexReference() != null
                  ? String.valueOf(reader.readColumnIndex(column).getNullCounts().size())
                  : "null");
          out.append(",\"offset_index_pages\":");
          out.append(
              column.getOffsetIndexReference() != null
                  ? String.valueOf(reader.readOffsetIndex(column).getPageCount())
                  : "null");
          out.append(",\"bloom_filter_bytes\":");
          out.append(
              column.getBloomFilterOffset() >= 0
                  ? String.valueOf(reader.readBloomFilter(column).getBitsetSize())
                  : "null");
          out.append('}');
        }
        out.append("}}");
      }
      out.append("]}");
    }
    return out.toString();
  }

  // ---- Iceberg data files ----

  /**
   * For each data file of an (encrypted) Iceberg table: {@code location \t base64(DEK) \t
   * base64(AAD prefix)}, one per line. The key metadata of a data file is Iceberg's {@code
   * StandardKeyMetadata} (stored in the encrypted manifest); its {@code parse} is package-private in
   * 1.11.0 (and the class itself is package-private), so it is called reflectively and the result
   * read through the public {@code NativeEncryptionKeyMetadata} interface.
   */
  public static String dataFileKeys(Table table) throws Exception {
    Class<?> standard = Class.forName("org.apache.iceberg.encryption.StandardKeyMetadata");
    Method parse = standard.getDeclaredMethod("parse", ByteBuffer.class);
    parse.setAccessible(true);
    StringBuilder out = new StringBuilder();
    try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
      for (FileScanTask task : tasks) {
        ByteBuffer keyMetadata = task.file().keyMetadata();
        if (keyMetadata == null) {
          throw new IllegalStateException("data file without key metadata: " + task.file().location());
        }
        NativeEncryptionKeyMetadata parsed =
            (NativeEncryptionKeyMetadata) parse.invoke(null, keyMetadata.duplicate());
        out.append(task.file().location())
            .append('\t')
            .append(base64(parsed.encryptionKey()))
            .append('\t')
            .append(base64(parsed.aadPrefix()))
            .append('\n');
      }
    }
    return out.toString();
  }

  private static String base64(ByteBuffer buffer) {
    if (buffer == null) {
      return "";
    }
    byte[] bytes = new byte[buffer.remaining()];
    buffer.duplicate().get(bytes);
    return Base64.getEncoder().encodeToString(bytes);
  }

  // ---- JSON rendering of rows ----

  /**
   * One row as JSON: structs are objects, LIST groups arrays (elements may be null), missing
   * optional fields null; STRING as text, other binaries/fixed as lowercase hex, DECIMAL as plain
   * decimal text ("-49.63"), TIMESTAMP/other int64 as integers, booleans/doubles as JSON.
   */
  public static String toJson(Group group) {
    StringBuilder out = new StringBuilder();
    appendGroup(out, group, group.getType());
    return out.toString();
  }

  private static void appendGroup(StringBuilder out, Group group, GroupType type) {
    out.append('{');
    for (int f = 0; f < type.getFieldCount(); f += 1) {
      Type field = type.getType(f);
      if (f > 0) {
        out.append(',');
      }
      out.append(quote(field.getName())).append(':');
      if (field.isRepetition(Type.Repetition.REPEATED)) {
        out.append('[');
        for (int r = 0; r < group.getFieldRepetitionCount(f); r += 1) {
          out.append(r > 0 ? "," : "");
          appendValue(out, group, f, r, field);
        }
        out.append(']');
      } else if (group.getFieldRepetitionCount(f) == 0) {
        out.append("null");
      } else {
        appendValue(out, group, f, 0, field);
      }
    }
    out.append('}');
  }

  private static void appendValue(StringBuilder out, Group group, int f, int r, Type field) {
    if (!field.isPrimitive()) {
      Group child = group.getGroup(f, r);
      GroupType childType = field.asGroupType();
      if (childType.getLogicalTypeAnnotation() instanceof LogicalTypeAnnotation.ListLogicalTypeAnnotation) {
        appendList(out, child, childType);
      } else {
        appendGroup(out, child, childType);
      }
      return;
    }
    PrimitiveType primitive = field.asPrimitiveType();
    LogicalTypeAnnotation logical = primitive.getLogicalTypeAnnotation();
    switch (primitive.getPrimitiveTypeName()) {
      case INT32:
        appendDecimalOr(out, BigInteger.valueOf(group.getInteger(f, r)), logical);
        break;
      case INT64:
        appendDecimalOr(out, BigInteger.valueOf(group.getLong(f, r)), logical);
        break;
      case BOOLEAN:
        out.append(group.getBoolean(f, r));
        break;
      case FLOAT:
        out.append(group.getFloat(f, r));
        break;
      case DOUBLE:
        out.append(group.getDouble(f, r));
        break;
      case INT96:
        out.append(quote(hex(group.getInt96(f, r).getBytes())));
        break;
      default: // BINARY, FIXED_LEN_BYTE_ARRAY
        byte[] bytes = group.getBinary(f, r).getBytes();
        if (logical instanceof LogicalTypeAnnotation.StringLogicalTypeAnnotation) {
          out.append(quote(new String(bytes, StandardCharsets.UTF_8)));
        } else if (logical instanceof LogicalTypeAnnotation.DecimalLogicalTypeAnnotation) {
          appendDecimalOr(out, new BigInteger(bytes), logical);
        } else {
          out.append(quote(hex(bytes)));
        }
    }
  }

  private static void appendDecimalOr(StringBuilder out, BigInteger value, LogicalTypeAnnotation logical) {
    if (logical instanceof LogicalTypeAnnotation.DecimalLogicalTypeAnnotation) {
      int scale = ((LogicalTypeAnnotation.DecimalLogicalTypeAnnotation) logical).getScale();
      out.append(quote(new BigDecimal(value, scale).toPlainString()));
    } else {
      out.append(value);
    }
  }

  /** 3-level LIST: list group holds repeated "list" groups, each with one (optional) element. */
  private static void appendList(StringBuilder out, Group list, GroupType listType) {
    out.append('[');
    Type repeated = listType.getType(0);
    int count = list.getFieldRepetitionCount(0);
    for (int r = 0; r < count; r += 1) {
      out.append(r > 0 ? "," : "");
      if (repeated.isPrimitive()) {
        appendValue(out, list, 0, r, repeated);
        continue;
      }
      Group entry = list.getGroup(0, r);
      Type element = repeated.asGroupType().getType(0);
      if (entry.getFieldRepetitionCount(0) == 0) {
        out.append("null");
      } else {
        appendValue(out, entry, 0, 0, element);
      }
    }
    out.append(']');
  }

  private static String hex(byte[] bytes) {
    StringBuilder out = new StringBuilder(bytes.length * 2);
    for (byte b : bytes) {
      out.append(Character.forDigit((b >> 4) & 0xF, 16)).append(Character.forDigit(b & 0xF, 16));
    }
    return out.toString();
  }

  private static String quote(String text) {
    StringBuilder out = new StringBuilder(text.length() + 2).append('"');
    for (int i = 0; i < text.length(); i += 1) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }
}
