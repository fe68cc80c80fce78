package io.pyicebergcrypto.bridge;

/**
 * {@link ReadersGuardExtensions} refused a statement that would make a table declared for Trino
 * unreadable by Trino. The message is one line: the table, the declared reader, the way out.
 */
public class ReadersGuardException extends IllegalArgumentException {
  public ReadersGuardException(String message) {
    super(message);
  }
}
