package io.pyicebergcrypto.rest;

import org.apache.iceberg.exceptions.CleanableFailure;

/**
 * The REST catalog server did not keep an encrypted table's keys: it dropped the
 * {@code add-encryption-key} updates of a commit, or it served the table without the
 * {@code encryption-keys} its snapshots need.
 *
 * <p>Thrown by a commit only after the table was rolled back to its previous snapshot (so the files
 * of the failed commit are unreferenced, and Iceberg may delete them: a {@link CleanableFailure}),
 * and by a table load whose current snapshot's key is missing (nothing was read or written).
 */
public class EncryptionKeysNotKeptException extends RuntimeException implements CleanableFailure {
  public EncryptionKeysNotKeptException(String message) {
    super(message);
  }
}
