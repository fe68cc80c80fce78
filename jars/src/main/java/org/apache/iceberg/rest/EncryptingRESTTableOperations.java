package org.apache.iceberg.rest;

import io.pyicebergcrypto.rest.EncryptionKeysNotKeptException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import org.apache.iceberg.CatalogProperties;
import org.apache.iceberg.MetadataUpdate;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.SnapshotRef;
import org.apache.iceberg.TableMetadata;
import org.apache.iceberg.TableOperations;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.encryption.EncryptedKey;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.encryption.EncryptingFileIO;
import org.apache.iceberg.encryption.EncryptionManager;
import org.apache.iceberg.encryption.EncryptionUtil;
import org.apache.iceberg.encryption.KeyManagementClient;
import org.apache.iceberg.encryption.PlaintextEncryptionManager;
import org.apache.iceberg.encryption.StandardEncryptionManager;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.relocated.com.google.common.collect.Lists;
import org.apache.iceberg.util.PropertyUtil;

/**
 * {@link RESTTableOperations} with table encryption, wired the way Iceberg 1.12.0's
 * HiveTableOperations wires it: the table key id ({@code encryption.key-id}) comes from the
 * metadata the REST catalog returned (not from a file in storage), the encryption manager is
 * {@link EncryptionUtil#createEncryptionManager} over the table's {@code encryption-keys} and the
 * catalog's KMS, {@link #io()} is an {@link EncryptingFileIO}, and every commit adds the keys the
 * manager generated to the new metadata, so the commit request carries them as
 * {@code add-encryption-key} updates.
 *
 * <p>A REST server that drops the {@code add-encryption-key} updates (or serves the table without
 * its {@code encryption-keys}) would leave a current snapshot nobody can read: the commit response
 * is checked for every key sent, and if one is missing the table is rolled back to its previous
 * snapshot with a standard commit ({@code set-snapshot-ref} / {@code remove-snapshot-ref} and
 * {@code remove-snapshots}) before {@link EncryptionKeysNotKeptException} says what the server did;
 * a table whose current snapshot's key is missing is refused at load with the same exception.
 *
 * <p>Lives in {@code org.apache.iceberg.rest} because its superclass and constructors are
 * package-private: the bridge jar must be loaded by the same class loader as the Iceberg runtime.
 */
public class EncryptingRESTTableOperations extends RESTTableOperations {
  private final KeyManagementClient keyManagementClient;
  private final String catalogUri;
  private final String tableName;
  private EncryptionManager encryptionManager;
  private EncryptingFileIO encryptingFileIO;
  private String tableKeyId;
  private int encryptionDekLength;
  private List<EncryptedKey> encryptedKeys = Lists.newLinkedList();

  EncryptingRESTTableOperations(
      KeyManagementClient keyManagementClient,
      String catalogUri,
      RESTClient client,
      String path,
      Supplier<Map<String, String>> readHeaders,
      Supplier<Map<String, String>> mutationHeaders,
      FileIO io,
      UpdateType updateType,
      List<MetadataUpdate> createChanges,
      TableMetadata current,
      Set<Endpoint> endpoints,
      Map<String, String> readQueryParams) {
    super(client, path, readHeaders, mutationHeaders, io, updateType, createChanges, current,
        endpoints, readQueryParams);
    this.keyManagementClient = keyManagementClient;
    this.catalogUri = catalogUri;
    this.tableName = tableName(path);
    // current() is null for a create transaction; the key id then comes from the uncommitted
    // metadata (temp / commit)
    keysFromMetadata(current());
  }

  @Override
  public TableMetadata refresh() {
    TableMetadata refreshed = super.refresh();
    keysFromMetadata(refreshed);
    return refreshed;
  }

  @Override
  public void commit(TableMetadata base, TableMetadata metadata) {
    if (base != null) {
      String baseKeyId = base.properties().get(TableProperties.ENCRYPTION_TABLE_KEY);
      String newKeyId = metadata.properties().get(TableProperties.ENCRYPTION_TABLE_KEY);
      if (baseKeyId != null && newKeyId == null) {
        throw new IllegalArgumentException(String.format(
            "Cannot remove key ID from an encrypted table: '%s' is set to '%s'; an encrypted table "
                + "stays encrypted (copy it into a new table to change that)",
            TableProperties.ENCRYPTION_TABLE_KEY, baseKeyId));
      }
      if (baseKeyId == null && newKeyId != null) {
        throw new IllegalArgumentException(String.format(
            "Cannot set '%s' on an existing plaintext table: its files stay plaintext; create a new "
                + "table with '%s' and copy the rows into it",
            TableProperties.ENCRYPTION_TABLE_KEY, TableProperties.ENCRYPTION_TABLE_KEY));
      }
      if (!Objects.equals(baseKeyId, newKeyId)) {
        throw new IllegalArgumentException(String.format(
            "Cannot modify key ID of an encrypted table: '%s' is '%s', the commit sets '%s'; "
                + "rotate the master key in the KMS instead",
            TableProperties.ENCRYPTION_TABLE_KEY, baseKeyId, newKeyId));
      }
    }

    encryptionPropsFromMetadata(metadata.properties());
    TableMetadata toCommit = metadata;
    EncryptionManager manager = encryption();
    if (manager instanceof StandardEncryptionManager) {
      // the keys this manager generated go into the new metadata; the builder records each as a
      // MetadataUpdate.AddEncryptionKey, which the REST commit sends as an add-encryption-key
      // update. Keys the base metadata already had are not added back: a commit that removes one
      // (keys prune, a re-wrap) must stay removed.
      Set<String> inBase = keyIds(base);
      TableMetadata.Builder builder = TableMetadata.buildFrom(metadata);
      for (EncryptedKey key : EncryptionUtil.encryptionKeys(manager).values()) {
        if (!inBase.contains(key.keyId())) {
          builder.addEncryptionKey(key);
        }
      }
      toCommit = builder.build();
    }

    super.commit(base, toCommit);
    TableMetadata committed = current();
    List<String> notKept = keysNotKept(toCommit, committed);
    if (!notKept.isEmpty()) {
      rollBack(base, committed, notKept.size());
    }
    keysFromMetadata(committed);
  }

  /** The ids of a metadata's {@code encryption-keys} (none for no metadata, e.g. a create). */
  private static Set<String> keyIds(TableMetadata metadata) {
    return metadata == null || metadata.encryptionKeys() == null ? Set.of()
        : metadata.encryptionKeys().stream().map(EncryptedKey::keyId).collect(Collectors.toSet());
  }

  /** Ids of the keys this commit sent ({@code add-encryption-key}) that the server's answer lacks. */
  private static List<String> keysNotKept(TableMetadata sent, TableMetadata committed) {
    Set<String> kept = keyIds(committed);
    return sent.changes().stream()
        .filter(update -> update instanceof MetadataUpdate.AddEncryptionKey)
        .map(update -> ((MetadataUpdate.AddEncryptionKey) update).key().keyId())
        .filter(keyId -> !kept.contains(keyId))
        .collect(Collectors.toList());
  }

  /**
   * Undo a commit whose keys the server dropped: every ref the commit moved to one of its new
   * snapshots goes back to where it was (or is removed if it did not exist), and the new snapshots
   * are removed, in one standard commit; then throw. Nothing that needs the lost keys stays.
   */
  private void rollBack(TableMetadata base, TableMetadata committed, int lost) {
    String problem = String.format(
        "the REST catalog at %s did not keep the table's encryption keys (add-encryption-key): the "
            + "metadata it committed for %s lacks %d of the keys the commit sent, so it cannot store "
            + "encrypted tables; use a REST server that stores 'encryption-keys' (see Known limits)",
        catalogUri, tableName, lost);
    Set<Long> before = base == null ? Set.of()
        : base.snapshots().stream().map(Snapshot::snapshotId).collect(Collectors.toSet());
    List<Long> added = committed.snapshots().stream().map(Snapshot::snapshotId)
        .filter(id -> !before.contains(id)).collect(Collectors.toList());
    if (added.isEmpty()) {
      throw new EncryptionKeysNotKeptException(problem + ". The commit added no snapshot.");
    }
    TableMetadata.Builder undo = TableMetadata.buildFrom(committed);
    StringBuilder what = new StringBuilder();
    for (Map.Entry<String, SnapshotRef> entry : committed.refs().entrySet()) {
      if (!added.contains(entry.getValue().snapshotId())) {
        continue;
      }
      SnapshotRef previous = base == null ? null : base.ref(entry.getKey());
      if (previous != null && committed.snapshot(previous.snapshotId()) != null) {
        undo.setRef(entry.getKey(), previous);
        what.append(String.format("; '%s' is back at snapshot %d", entry.getKey(),
            previous.snapshotId()));
      } else {
        undo.removeRef(entry.getKey());
        what.append(String.format("; '%s' is removed again (it had no snapshot before)",
            entry.getKey()));
      }
    }
    undo.removeSnapshots(added);
    try {
      super.commit(committed, undo.build());
    } catch (RuntimeException e) {
      throw new CommitStateUnknownException(new EncryptionKeysNotKeptException(String.format(
          "%s. Rolling the table back failed too (%s: %s): its current snapshot %s needs a key the "
              + "server lost and cannot be read; roll it back with CALL <catalog>.system."
              + "rollback_to_snapshot", problem, e.getClass().getSimpleName(), e.getMessage(),
          added)));
    }
    throw new EncryptionKeysNotKeptException(String.format(
        "%s. The commit was rolled back (snapshot %s removed%s); the table reads as before it.",
        problem, added, what));
  }

  @Override
  public FileIO io() {
    if (tableKeyId == null) {
      return super.io();
    }
    if (encryptingFileIO == null) {
      encryptingFileIO = EncryptingFileIO.combine(super.io(), encryption());
    }
    return encryptingFileIO;
  }

  @Override
  public EncryptionManager encryption() {
    if (encryptionManager != null) {
      return encryptionManager;
    }
    if (tableKeyId == null) {
      return PlaintextEncryptionManager.instance();
    }
    if (keyManagementClient == null) {
      throw new IllegalArgumentException(String.format(
          "Cannot create encryption manager without a key management client: the table sets '%s' "
              + "but this REST catalog has no KMS. Set the '%s' catalog property (files of this "
              + "table are encrypted; nothing is read or written in plaintext)",
          TableProperties.ENCRYPTION_TABLE_KEY, CatalogProperties.ENCRYPTION_KMS_IMPL));
    }
    checkCurrentSnapshotKey();
    Map<String, String> encryptionProperties = Map.of(
        TableProperties.ENCRYPTION_TABLE_KEY, tableKeyId,
        TableProperties.ENCRYPTION_DEK_LENGTH, String.valueOf(encryptionDekLength));
    encryptionManager = EncryptionUtil.createEncryptionManager(
        encryptedKeys, encryptionProperties, keyManagementClient);
    return encryptionManager;
  }

  /**
   * A table served without the key of its current snapshot cannot be read or written: say which
   * server lost it, instead of Iceberg's "Cannot find manifest list key metadata" in a scan.
   */
  private void checkCurrentSnapshotKey() {
    TableMetadata metadata = current();
    Snapshot snapshot = metadata == null ? null : metadata.currentSnapshot();
    if (snapshot == null || snapshot.keyId() == null) {
      return;
    }
    boolean known = encryptedKeys.stream().anyMatch(key -> key.keyId().equals(snapshot.keyId()));
    if (!known) {
      throw new EncryptionKeysNotKeptException(String.format(
          "the REST catalog at %s served table %s without the encryption key '%s' of its current "
              + "snapshot %d ('encryption-keys' of the loaded metadata lacks it): the server does "
              + "not keep or serve the table's encryption keys, so the table cannot be read or "
              + "written through it; use a REST server that stores and serves 'encryption-keys' "
              + "(see Known limits)",
          catalogUri, tableName, snapshot.keyId(), snapshot.snapshotId()));
    }
  }

  /** {@code ns.table} of a REST table path ({@code v1/[prefix/]namespaces/NS/tables/T}). */
  private static String tableName(String path) {
    int namespaces = path.lastIndexOf("namespaces/");
    String name = namespaces < 0 ? path : path.substring(namespaces + "namespaces/".length());
    name = name.replace("/tables/", ".");
    return URLDecoder.decode(name, StandardCharsets.UTF_8).replace((char) 0x1f, '.');
  }

  @Override
  public TableOperations temp(TableMetadata uncommittedMetadata) {
    // the superclass's temp ops call this.io() and this.encryption(): give them the key id of the
    // uncommitted metadata (a create or replace transaction has no current metadata yet)
    encryptionPropsFromMetadata(uncommittedMetadata.properties());
    return super.temp(uncommittedMetadata);
  }

  private void encryptionPropsFromMetadata(Map<String, String> tableProperties) {
    if (tableKeyId == null) {
      tableKeyId = tableProperties.get(TableProperties.ENCRYPTION_TABLE_KEY);
    }
    if (tableKeyId != null && encryptionDekLength <= 0) {
      encryptionDekLength = PropertyUtil.propertyAsInt(tableProperties,
          TableProperties.ENCRYPTION_DEK_LENGTH, TableProperties.ENCRYPTION_DEK_LENGTH_DEFAULT);
    }
  }

  /** Like HiveTableOperations.doRefresh: keys of the metadata plus the ones not committed yet. */
  private void keysFromMetadata(TableMetadata metadata) {
    if (metadata == null) {
      return;
    }
    String keyId = metadata.properties().get(TableProperties.ENCRYPTION_TABLE_KEY);
    if (keyId == null) {
      return;
    }
    tableKeyId = keyId;
    encryptionDekLength = PropertyUtil.propertyAsInt(metadata.properties(),
        TableProperties.ENCRYPTION_DEK_LENGTH, TableProperties.ENCRYPTION_DEK_LENGTH_DEFAULT);
    List<EncryptedKey> keys = metadata.encryptionKeys() == null
        ? Lists.newLinkedList() : Lists.newLinkedList(metadata.encryptionKeys());
    if (encryptionManager != null) {
      Set<String> known = keys.stream().map(EncryptedKey::keyId).collect(Collectors.toSet());
      for (EncryptedKey key : EncryptionUtil.encryptionKeys(encryptionManager).values()) {
        if (!known.contains(key.keyId())) {
          keys.add(key);
        }
      }
    }
    encryptedKeys = keys;
    encryptingFileIO = null;
    encryptionManager = null;
  }
}
