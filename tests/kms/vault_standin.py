"""A local stand-in of Vault's Transit API (the documented wire format), on 127.0.0.1.

Implements only what :mod:`pyiceberg_crypto.kms.vault` uses: encrypt / decrypt / rewrap (with
``associated_data``), read / rotate / config / delete keys, token auth (``X-Vault-Token``), AppRole
and Kubernetes login. Ciphertexts are ``vault:v<N>:base64(nonce12 || AES-256-GCM)`` like Vault's.
Not a real Vault: the provider is tested against a real OpenBao server (tests/kms/test_vault_openbao.py);
this stand-in stays for the fault shapes a real server cannot produce (test_vault.py): Kubernetes
login without a Kubernetes API server, and a server slower than the client's timeout (``delay``).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
import time

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tests.kms.http_standin import HttpStandIn


class TransitStandIn(HttpStandIn):
    def __init__(self, mount: str = "transit"):
        self.mount = mount
        self.tokens = {"root-" + secrets.token_hex(8)}
        self.root_token = next(iter(self.tokens))
        self.approle = {"role_id": "role-1", "secret_id": "secret-" + secrets.token_hex(8)}
        self.k8s = {"role": "lake", "jwt": "jwt-" + secrets.token_hex(8)}
        self.keys: dict[str, dict] = {}
        self.delay = 0.0
        self.lock = threading.Lock()
        self.start()
        self.address = self.base_url

    # admin helpers (what `vault write transit/keys/<k>` etc. do)
    def create_key(self, name: str):
        with self.lock:
            self.keys[name] = {"versions": {1: os.urandom(32)}, "latest": 1, "min_dec": 1, "deletion_allowed": False}

    def rotate(self, name: str):
        with self.lock:
            key = self.keys[name]
            key["latest"] += 1
            key["versions"][key["latest"]] = os.urandom(32)

    # --- HTTP --------------------------------------------------------------------------------

    def _handle(self, h, method):
        if self.delay:
            time.sleep(self.delay)  # the behaviour under test: a server slower than the client's timeout
        length = int(h.headers.get("Content-Length") or 0)
        try:
            body = json.loads(h.rfile.read(length) or b"{}") if length else {}
        except ValueError:
            return self._reply(h, 400, {"errors": ["failed to parse JSON input"]})
        parts = h.path.split("?")[0].strip("/").split("/")
        if parts[:2] == ["v1", "auth"] and len(parts) == 4 and parts[3] == "login" and method == "POST":
            return self._login(h, parts[2], body)
        if h.headers.get("X-Vault-Token") not in self.tokens:
            return self._reply(h, 403, {"errors": ["permission denied"]})
        if len(parts) < 4 or parts[0] != "v1" or parts[1] != self.mount:
            return self._reply(h, 404, {"errors": []})
        op, name, rest = parts[2], parts[3], parts[4:]
        with self.lock:
            key = self.keys.get(name)
            if op == "keys" and not rest:
                if method == "GET":
                    if key is None:
                        return self._reply(h, 404, {"errors": []})
                    return self._reply(h, 200, {"data": {
                        "name": name, "type": "aes256-gcm96", "latest_version": key["latest"],
                        "min_decryption_version": key["min_dec"], "deletion_allowed": key["deletion_allowed"],
                        "keys": {str(v): 0 for v in key["versions"]}}})
                if method == "DELETE":
                    if key is not None and not key["deletion_allowed"]:
                        return self._reply(h, 400, {"errors": ["deletion is not allowed for this key"]})
                    self.keys.pop(name, None)
                    return self._reply(h, 204, None)
            if key is None:
                return self._reply(h, 400, {"errors": ["encryption key not found"]})
            if op == "keys" and rest == ["rotate"] and method == "POST":
                key["latest"] += 1
                key["versions"][key["latest"]] = os.urandom(32)
                return self._reply(h, 204, None)
            if op == "keys" and rest == ["config"] and method == "POST":
                if "min_decryption_version" in body:
                    key["min_dec"] = int(body["min_decryption_version"])
                    for v in [v for v in key["versions"] if v < key["min_dec"]]:
                        pass  # Vault keeps them archived; they just may not decrypt
                if "deletion_allowed" in body:
                    key["deletion_allowed"] = bool(body["deletion_allowed"])
                return self._reply(h, 204, None)
            # As OpenBao 2.7 measured: rewrap takes no associated_data.
            ad = base64.b64decode(body.get("associated_data", "")) or None if op != "rewrap" else None
            if op == "encrypt" and method == "POST":
                try:
                    plaintext = base64.b64decode(body["plaintext"], validate=True)
                except (KeyError, ValueError):
                    return self._reply(h, 400, {"errors": ["failed to base64-decode plaintext"]})
                return self._reply(h, 200, {"data": {"ciphertext": self._seal(key, plaintext, ad),
                                                     "key_version": key["latest"]}})
            if op in ("decrypt", "rewrap") and method == "POST":
                plaintext, error = self._open(key, body.get("ciphertext", ""), ad)
                if error:
                    return self._reply(h, 400 if error != "internal" else 500,
                                       {"errors": [error if error != "internal" else
                                                   "cipher: message authentication failed"]})
                if op == "decrypt":
                    return self._reply(h, 200, {"data": {"plaintext": base64.b64encode(plaintext).decode()}})
                return self._reply(h, 200, {"data": {"ciphertext": self._seal(key, plaintext, ad),
                                                     "key_version": key["latest"]}})
        return self._reply(h, 405, {"errors": ["unsupported operation"]})

    def _login(self, h, method, body):
        ok = ((method == "approle" and body.get("role_id") == self.approle["role_id"]
               and body.get("secret_id") == self.approle["secret_id"])
              or (method == "kubernetes" and body == self.k8s))
        if not ok:
            return self._reply(h, 400 if method == "approle" else 403,
                               {"errors": ["invalid role or secret ID" if method == "approle" else "permission denied"]})
        token = "s." + secrets.token_hex(12)
        self.tokens.add(token)
        return self._reply(h, 200, {"auth": {"client_token": token, "policies": ["lake"], "lease_duration": 3600,
                                             "renewable": True}})

    @staticmethod
    def _seal(key, plaintext, ad):
        nonce = os.urandom(12)
        sealed = AESGCM(key["versions"][key["latest"]]).encrypt(nonce, plaintext, ad)
        return f"vault:v{key['latest']}:" + base64.b64encode(nonce + sealed).decode()

    @staticmethod
    def _open(key, ciphertext, ad):
        if not ciphertext.startswith("vault:v") or ciphertext.count(":") != 2:
            return None, "invalid ciphertext: no prefix"
        version = int(ciphertext.split(":")[1][1:])
        if version < key["min_dec"]:
            return None, "ciphertext or signature version is disallowed by policy (too old)"
        if version not in key["versions"] or version > key["latest"]:
            return None, "invalid ciphertext: version is too new"
        raw = base64.b64decode(ciphertext.split(":")[2])
        try:
            return AESGCM(key["versions"][version]).decrypt(raw[:12], raw[12:], ad), None
        except Exception:  # noqa: BLE001
            return None, "internal"

    @staticmethod
    def _reply(h, status, payload):
        data = b"" if payload is None else json.dumps(payload).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the slow-server test)
