package io.pyicebergcrypto.testkit;

/** Test-vector helpers live in this package; see the classes beside this one. */
final class Placeholder {
  private Placeholder() {}
}
