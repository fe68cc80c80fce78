"""``pyiceberg_crypto.kms.pyiceberg.PyIcebergKms`` against PyIceberg's KMS interface as its table
encryption PR (apache/iceberg-python#3968, open) defines it. PyIceberg does not ship it yet, so the
interface is written here from the PR's signatures, in the two shapes the PR has had, and installed
as ``pyiceberg.encryption.kms`` for the test:

- earlier: ``KeyManagementClient`` (ABC: ``wrap_key``, ``unwrap_key``, an ``initialize(properties)``
  hook); the loader reads ``py-kms-impl``, checks ``issubclass``, builds the class with no argument
  and calls ``initialize(properties)``;
- later: the constructor takes ``properties``; optional ``supports_key_generation`` and
  ``generate_key(wrapping_key_id) -> GeneratedKey(key, wrapped_key)``.
"""

from __future__ import annotations

import abc
import importlib
import os
import sys
import types
from dataclasses import dataclass, field

import pytest

import pyiceberg_crypto.kms.pyiceberg as adapter_module
from pyiceberg_crypto.kms import KmsError
from pyiceberg_crypto.kms.keystore import Keystore

IMPL = "pyiceberg_crypto.kms.pyiceberg.PyIcebergKms"


def earlier_interface() -> types.ModuleType:
    class KeyManagementClient(abc.ABC):
        @abc.abstractmethod
        def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes: ...

        @abc.abstractmethod
        def unwrap_key(self, wrapped_key: bytes, wrapping_key_id: str) -> bytes: ...

        def initialize(self, properties: dict[str, str]) -> None:  # noqa: B027 - a hook
            pass

    def load_kms_client(properties: dict[str, str]):
        module_name, _, class_name = properties["py-kms-impl"].rpartition(".")
        kms_class = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(kms_class, type) and issubclass(kms_class, KeyManagementClient)):
            raise ValueError(f"{properties['py-kms-impl']} is not a subclass of KeyManagementClient")
        client = kms_class()
        client.initialize(dict(properties))
        return client

    module = types.ModuleType("pyiceberg.encryption.kms")
    module.KeyManagementClient, module.load_kms_client = KeyManagementClient, load_kms_client
    return module


def later_interface() -> types.ModuleType:
    @dataclass(frozen=True)
    class GeneratedKey:
        key: bytes = field(repr=False)
        wrapped_key: bytes

    class KeyManagementClient(abc.ABC):
        def __init__(self, properties: dict[str, str] = {}) -> None:  # noqa: B006 - the PR's EMPTY_DICT
            self.properties = properties

        @abc.abstractmethod
        def wrap_key(self, key: bytes, wrapping_key_id: str) -> bytes: ...

        @abc.abstractmethod
        def unwrap_key(self, wrapped_key: bytes, wrapping_key_id: str) -> bytes: ...

        def supports_key_generation(self) -> bool:
            return False

        def generate_key(self, wrapping_key_id: str) -> GeneratedKey:
            raise NotImplementedError

    def load_kms_client(properties: dict[str, str]):
        module_name, _, class_name = properties["py-kms-impl"].rpartition(".")
        kms_class = getattr(importlib.import_module(module_name), class_name)
        if not issubclass(kms_class, KeyManagementClient):
            raise ValueError(f"{properties['py-kms-impl']} is not a subclass of KeyManagementClient")
        return kms_class(properties)

    module = types.ModuleType("pyiceberg.encryption.kms")
    module.KeyManagementClient, module.GeneratedKey = KeyManagementClient, GeneratedKey
    module.load_kms_client = load_kms_client
    return module


@pytest.fixture(params=["earlier", "later"])
def pyiceberg_kms(request, monkeypatch):
    """The PR's ``pyiceberg.encryption.kms`` installed, and the adapter module imported against it."""
    interface = earlier_interface() if request.param == "earlier" else later_interface()
    for name in ("pyiceberg", "pyiceberg.encryption"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "pyiceberg.encryption.kms", interface)
    importlib.reload(adapter_module)
    yield interface
    monkeypatch.undo()
    importlib.reload(adapter_module)  # back to the module without PyIceberg


def test_pyiceberg_loads_a_keystore_kms_by_class_path(pyiceberg_kms, tmp_path):
    keystore = Keystore(tmp_path / "keys.json")
    keystore.create()
    keystore.add_key("orders")
    properties = {"type": "hive", "uri": "thrift://metastore:9083", "py-kms-impl": IMPL,
                  "pyiceberg-crypto.kms": "keystore", "keystore.path": str(keystore.path)}
    client = pyiceberg_kms.load_kms_client(properties)
    assert isinstance(client, pyiceberg_kms.KeyManagementClient)
    secret = os.urandom(16)
    wrapped = client.wrap_key(secret, "orders")
    assert isinstance(wrapped, bytes) and secret not in wrapped
    assert client.unwrap_key(wrapped, "orders") == secret
    assert client.supports_key_generation() is False
    assert "py-kms-impl" not in client.properties and "pyiceberg-crypto.kms" not in client.properties
    with pytest.raises(KmsError, match="'missing'"):
        client.wrap_key(secret, "missing")


def test_pyiceberg_loads_the_vault_kms_on_openbao(pyiceberg_kms, openbao_server):
    openbao_server.create_transit_key("pyiceberg-orders")
    properties = {"py-kms-impl": IMPL, "pyiceberg-crypto.kms": "vault", **openbao_server.kms_properties()}
    client = pyiceberg_kms.load_kms_client(properties)
    secret = os.urandom(32)
    wrapped = client.wrap_key(secret, "pyiceberg-orders")
    assert wrapped.startswith(b"vault:v1:") and client.unwrap_key(wrapped, "pyiceberg-orders") == secret
    assert openbao_server.root_token not in repr(client) and "vault" in repr(client)


def test_pyiceberg_generate_key_with_a_kms_that_generates(pyiceberg_kms, aws_properties, kms_admin):
    key_id = kms_admin.create_key(Description="pyiceberg adapter")["KeyMetadata"]["KeyId"]
    client = pyiceberg_kms.load_kms_client({"py-kms-impl": IMPL, "pyiceberg-crypto.kms": "aws", **aws_properties})
    assert client.supports_key_generation() is True
    generated = client.generate_key(key_id)
    if hasattr(pyiceberg_kms, "GeneratedKey"):
        assert isinstance(generated, pyiceberg_kms.GeneratedKey)
    assert client.unwrap_key(generated.wrapped_key, key_id) == generated.key
    assert generated.key.hex() not in repr(generated)


def test_pyiceberg_without_the_kms_property_says_what_to_set(pyiceberg_kms):
    with pytest.raises(KmsError, match="set the catalog property pyiceberg-crypto.kms"):
        pyiceberg_kms.load_kms_client({"py-kms-impl": IMPL})


def test_without_pyiceberg_the_adapter_stands_alone(tmp_path):
    """No PyIceberg installed (the case today): the class works on its own, initialize() first."""
    assert adapter_module.PyIcebergKms.__mro__[1] is object
    client = adapter_module.PyIcebergKms()
    with pytest.raises(KmsError, match="not initialized"):
        client.wrap_key(b"k" * 16, "orders")
    keystore = Keystore(tmp_path / "keys.json")
    keystore.create()
    keystore.add_key("orders")
    client.initialize({"pyiceberg-crypto.kms": "keystore", "keystore.path": str(keystore.path)})
    assert client.unwrap_key(client.wrap_key(b"k" * 16, "orders"), "orders") == b"k" * 16
