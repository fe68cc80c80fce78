"""``pyiceberg-crypto keystore``: create a keystore file, add and rotate master keys, list them.

    pyiceberg-crypto keystore create PATH
    pyiceberg-crypto keystore add PATH KEY_ID [--length 16|24|32]
    pyiceberg-crypto keystore rotate PATH KEY_ID
    pyiceberg-crypto keystore retire PATH KEY_ID VERSION --metastore-uri thrift://hms:9083 --catalog lake [--table ...] [--force]
    pyiceberg-crypto keystore retire PATH KEY_ID VERSION --rest-uri http://catalog:8181 --catalog lake [--force]
    pyiceberg-crypto keystore compromised PATH KEY_ID VERSION
    pyiceberg-crypto keystore list PATH [--json]

``compromised`` marks a version as leaked, in the keystore file (written atomically): it still
unwraps, so every table keeps reading, but ``audit`` fails (exit 1) and ``keys where-used KEY_ID
--compromised`` lists the tables while any still depends on it; ``keys reencrypt`` re-encrypts them.

``retire`` refuses while any table still needs that version (it checks every table of the catalog,
or the tables given, as ``keys where-used`` does: with ``--metastore-uri`` or ``--rest-uri``
the catalog is asked directly, no JVM), and backs the keystore up beside itself first. A table
keyed by another name of the key (``alias/KEY_ID``, a key or alias ARN, as the AWS face accepts)
needs it too, and so does a table with a KEK whose master key the keystore does not know (it cannot
be shown to be another key). KEY_ID itself may be given in those forms (``retire``, ``compromised``).

Key bytes are never printed: output names key ids, versions, lengths and creation times only.
Exit status: 0 done; 1 the keystore file fails a check (accessible by group/others, malformed);
2 usage error (unknown or existing key id, missing or existing file, bad arguments).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from pyiceberg_crypto.cli.catalog_arguments import add_catalog_arguments, catalog_given
from pyiceberg_crypto.cli.key_uses import find_key_uses, print_key_uses
from pyiceberg_crypto.errors import TableInputError
from pyiceberg_crypto.exit_status import ExitStatus
from pyiceberg_crypto.properties import AES_KEY_LENGTHS
from pyiceberg_crypto.kms.key_ids import canonical_key_id
from pyiceberg_crypto.kms.keystore import (
    DEFAULT_KEY_LENGTH,
    InsecureKeystoreError,
    Keystore,
    KeystoreKms,
    MalformedKeystoreError,
)
from pyiceberg_crypto.safe_text import escape_text


def add_parser(sub) -> None:
    """Add the ``keystore`` subcommand and its actions to ``sub`` (argparse subparsers)."""
    keystore = sub.add_parser("keystore", help="manage a keystore file of master keys (keystore KMS)")
    keystore.set_defaults(run=run_keystore)
    actions = keystore.add_subparsers(dest="keystore_action", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create an empty keystore file (mode 0600)")
    create.add_argument("path", metavar="PATH")
    add = actions.add_parser("add", help="add a new random master key (version 1)")
    add.add_argument("path", metavar="PATH")
    add.add_argument("key_id", metavar="KEY_ID")
    add.add_argument("--length", type=int, choices=AES_KEY_LENGTHS, default=DEFAULT_KEY_LENGTH,
                     help="key length in bytes (default: %(default)s)")
    rotate = actions.add_parser("rotate", help="add a new version of a master key; old versions stay")
    rotate.add_argument("path", metavar="PATH")
    rotate.add_argument("key_id", metavar="KEY_ID")
    retire = actions.add_parser("retire", help="delete an old version of a master key, once no table needs it "
                                               "(checked across the catalog; a backup is written first)")
    retire.add_argument("path", metavar="PATH", help="the keystore file")
    retire.add_argument("key_id", metavar="KEY_ID", help="the master key id")
    retire.add_argument("version", metavar="VERSION", type=int, help="the version to delete (never the newest)")
    add_catalog_arguments(retire)
    retire.add_argument("--force", action="store_true",
                        help="retire without checking the tables (data wrapped by it becomes unreadable)")
    leaked = actions.add_parser("compromised", help="mark a version of a master key as leaked (it still decrypts; "
                                                    "audit fails while a table depends on it)")
    leaked.add_argument("path", metavar="PATH", help="the keystore file")
    leaked.add_argument("key_id", metavar="KEY_ID", help="the master key id")
    leaked.add_argument("version", metavar="VERSION", type=int, help="the version that leaked")
    listing = actions.add_parser("list", help="list key ids and versions (never key bytes)")
    listing.add_argument("path", metavar="PATH")
    listing.add_argument("--json", action="store_true", help="print JSON")


def run_keystore(args: argparse.Namespace) -> int:
    keystore = Keystore(args.path)
    try:
        if args.keystore_action == "create":
            keystore.create()
            print(f"created keystore {keystore.path} (mode 0600)")
        elif args.keystore_action == "add":
            added = keystore.add_key(args.key_id, args.length)
            print(f"added key id {added.key_id!r} version {added.version} ({added.length} bytes) to {keystore.path}")
        elif args.keystore_action == "rotate":
            added = keystore.rotate_key(args.key_id)
            print(f"rotated key id {added.key_id!r}: new version {added.version} "
                  f"(older versions kept for unwrapping) in {keystore.path}")
        elif args.keystore_action == "retire":
            return _retire(keystore, args)
        elif args.keystore_action == "compromised":
            _mark_compromised(keystore, args)
        else:
            _print_listing(keystore, as_json=args.json)
    except (InsecureKeystoreError, MalformedKeystoreError) as exc:  # a keystore not to be trusted: exit 1
        print(f"pyiceberg-crypto keystore: {exc}", file=sys.stderr)
        return ExitStatus.INTEGRITY
    return ExitStatus.OK


def _retire(keystore: Keystore, args: argparse.Namespace) -> int:
    """Refuse while a table needs the version (or cannot be checked); back up; remove it. KEY_ID may
    be any name the AWS face accepts (``alias/NAME``, a key or alias ARN): the keystore's ``NAME``."""
    args.key_id = canonical_key_id(args.key_id)
    what = f"key id {args.key_id!r} version {args.version}"
    keystore.check_removable(args.key_id, args.version)  # unknown or newest: said before any catalog is read
    if not args.force:
        if not catalog_given(args):
            print(f"pyiceberg-crypto keystore: not retiring {what}: cannot tell which tables still need it. Give the "
                  "catalog to check (--metastore-uri thrift://host:port or --rest-uri http://..., asked without "
                  "Spark; --warehouse DIR; or --catalog NAME in a spark-submit session) or the tables "
                  f"(--table ...), e.g. `pyiceberg-crypto keystore retire {keystore.path} {args.key_id} {args.version} "
                  "--metastore-uri thrift://127.0.0.1:9083 --catalog CATALOG`; or --force to retire without a check (what it wrapped becomes unreadable)",
                  file=sys.stderr)
            return ExitStatus.USAGE
        try:
            result = find_key_uses(args, args.key_id, str(args.version), KeystoreKms(keystore.path))
        except (TableInputError, ValueError) as exc:
            print(f"pyiceberg-crypto keystore: not retiring {what}: {escape_text(str(exc))}", file=sys.stderr)
            return ExitStatus.USAGE
        if result.needed:
            print(f"pyiceberg-crypto keystore: not retiring {what}: still needed (re-wrap these tables first: "
                  "pyiceberg-crypto keys rewrap TABLE ...):", file=sys.stderr)
            with contextlib.redirect_stdout(sys.stderr):
                print_key_uses(result)
            return ExitStatus.USAGE
        print(f"no table of the {len(result.checked)} checked needs {what}")
    saved = keystore.remove_version(args.key_id, args.version)
    print(f"backed up keystore {keystore.path} to {saved} (mode 0600): restore it with `cp` if a table turns out "
          "to need the version")
    print(f"retired {what} from {keystore.path}: keys wrapped by it can no longer be unwrapped")
    return ExitStatus.OK


def _mark_compromised(keystore: Keystore, args: argparse.Namespace) -> None:
    args.key_id = canonical_key_id(args.key_id)  # alias/NAME and ARNs name the keystore's NAME
    marked = keystore.mark_compromised(args.key_id, args.version)
    newest = keystore.load()[args.key_id][-1].version
    print(f"marked key id {args.key_id!r} version {marked.version} compromised (since {marked.compromised}) in "
          f"{keystore.path}; it still decrypts until the tables are re-encrypted")
    if newest == marked.version:
        print(f"  it is the newest version: new keys are still wrapped by it. Rotate first: "
              f"pyiceberg-crypto keystore rotate {keystore.path} {args.key_id}")
    print(f"  which tables depend on it: pyiceberg-crypto keys where-used {args.key_id} --compromised --kms keystore "
          f"--kms-property keystore.path={keystore.path} --metastore-uri thrift://HOST:PORT")
    print(f"  then, for each: pyiceberg-crypto keys reencrypt CATALOG.DB.TABLE "
          f"--compromised-version {args.key_id}:{marked.version} --kms keystore ...")


def _print_listing(keystore: Keystore, *, as_json: bool) -> None:
    keys = keystore.load()
    rows = {
        key_id: [{"version": v.version, "length": v.length, "created": v.created,
                  **({"compromised": v.compromised} if v.compromised else {})}
                 for v in versions]
        for key_id, versions in sorted(keys.items())
    }
    if as_json:
        print(json.dumps({"path": str(keystore.path), "keys": rows}, indent=2))
        return
    if not rows:
        print(f"{keystore.path}: no keys")
    for key_id, versions in rows.items():
        newest = versions[-1]
        leaked = [str(v["version"]) for v in versions if v.get("compromised")]
        print(f"{key_id}: {len(versions)} version(s), newest {newest['version']} "
              f"({newest['length']} bytes, created {newest['created']})"
              + (f"; COMPROMISED: version {', '.join(leaked)}" if leaked else ""))
