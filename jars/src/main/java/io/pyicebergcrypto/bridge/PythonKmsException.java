package io.pyicebergcrypto.bridge;

/** A Python KMS call failed, or no Python KMS is reachable. Messages never contain key bytes. */
public class PythonKmsException extends RuntimeException {
  public PythonKmsException(String message) {
    super(message);
  }

  public PythonKmsException(String message, Throwable cause) {
    super(message, cause);
  }
}
