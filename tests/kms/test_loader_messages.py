"""issue 34: a KMS spec that cannot be imported says what to do (PYTHONPATH, the current directory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyiceberg_crypto.errors import InvalidArgumentError
from pyiceberg_crypto.kms.loader import load_kms


def test_a_module_in_the_current_directory_names_pythonpath(tmp_path, monkeypatch):
    (tmp_path / "mycompany").mkdir()
    (tmp_path / "mycompany" / "__init__.py").write_text("")
    (tmp_path / "mycompany" / "kms.py").write_text("def make_client():\n    raise AssertionError\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    with pytest.raises(InvalidArgumentError) as excinfo:
        load_kms("mycompany.kms:make_client")
    message = str(excinfo.value)
    assert "No module named 'mycompany'" in message
    assert "is in the current directory" in message and "PYTHONPATH=." in message


def test_a_module_nowhere_says_install_it_or_set_pythonpath(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="install it, or put its directory on PYTHONPATH"):
        load_kms("nosuchcompany.kms:make_client")


def test_a_module_that_imports_something_missing_says_so(tmp_path, monkeypatch):
    (tmp_path / "brokenkms.py").write_text("import not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(InvalidArgumentError, match="the module itself was found; it imports something that is not installed"):
        load_kms("brokenkms:make_client")


def test_the_cli_prints_the_hint(tmp_path):
    (tmp_path / "mycompany.py").write_text("def make_client():\n    raise AssertionError\n")
    console_script = str(Path(sys.executable).parent / "pyiceberg-crypto")  # unlike python -m, no cwd on sys.path
    result = subprocess.run([console_script, "verify", "m.metadata.json",
                             "--kms", "mycompany:make_client"], cwd=tmp_path, capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 2 and "PYTHONPATH=." in result.stderr, result.stderr


def test_an_unknown_key_id_says_keystore_add(tmp_path):
    """The one line the JVM shows in a failed statement (bridge callback: ``Type: message``)."""
    from pyiceberg_crypto.kms import KeystoreKms, UnknownKeyError
    from pyiceberg_crypto.kms.keystore import Keystore

    path = tmp_path / "keys.json"
    Keystore(path).create()
    with pytest.raises(UnknownKeyError) as excinfo:
        KeystoreKms(str(path)).wrap_key(b"\0" * 16, "k1")
    assert f"pyiceberg-crypto keystore add {path} k1" in str(excinfo.value)
