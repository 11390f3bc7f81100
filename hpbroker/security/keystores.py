"""Key and trust material as Kafka's ``ssl.*`` settings name it, read into PEM
for Python's ``ssl`` module:

* a keystore: this broker's private key and its certificate chain, from a PEM
  file (key and chain in one file, the key encrypted with
  ``ssl.key.password`` or not), a PKCS12 file (``ssl.keystore.password``), or
  inline PEM (``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``);
* a truststore: the certificates a peer's chain must lead to, from a PEM or
  PKCS12 file, or inline PEM (``ssl.truststore.certificates``).

Java's JKS format is not read: ``keytool -importkeystore -deststoretype
PKCS12`` converts a JKS store.  With no ``ssl.keystore.type`` the file's
contents tell its format.  Every failure is a ConfigError naming the setting
and never showing a password or a key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from hpbroker.storage.config import ConfigError

PEM, PKCS12, JKS = "PEM", "PKCS12", "JKS"
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


@dataclass(frozen=True)
class KeyMaterial:
    key_pem: bytes = field(repr=False)  # unencrypted PKCS8: it stays in this process's memory, out of any repr
    chain_pem: bytes  # the leaf certificate first
    leaf: x509.Certificate


def _store_type(data: bytes, given: str | None, key: str) -> str:
    if given:
        kind = given.strip().upper()
        if kind not in (PEM, PKCS12, JKS):
            raise ConfigError(f"{key}={given}: expected PEM or PKCS12")
    elif data.lstrip().startswith(b"-----BEGIN"):
        kind = PEM
    else:
        kind = JKS if data.startswith(_JKS_MAGIC) else PKCS12
    if kind == JKS:
        raise ConfigError(f"{key}: Java's JKS format is not read; convert the store with keytool -importkeystore "
                          f"-deststoretype PKCS12, or give PEM")
    return kind


def _read_file(path: str, key: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path} ({exc.strerror or exc})") from None


def _password(text: str | None) -> bytes | None:
    return text.encode() if text else None


def _certificates(data: bytes, where: str) -> list[x509.Certificate]:
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        certificates = []
    if not certificates:
        raise ConfigError(f"{where}: no PEM certificate found")
    return certificates


def _pem_key(data: bytes, password: bytes | None, where: str):
    blocks = [m.group(0) for m in _PEM_BLOCK.finditer(data) if m.group(1).endswith(b"PRIVATE KEY")]
    if len(blocks) != 1:
        raise ConfigError(f"{where}: expected one PEM private key, found {len(blocks)}")
    encrypted = b"ENCRYPTED" in blocks[0].split(b"\n", 1)[0] or b"Proc-Type: 4,ENCRYPTED" in blocks[0]
    try:
        return serialization.load_pem_private_key(blocks[0], password if encrypted else None)
    except (ValueError, TypeError):
        why = "wrong or missing ssl.key.password" if encrypted else "not a private key this broker can read"
        raise ConfigError(f"{where}: cannot read the private key ({why})") from None


def _material(key, chain: list[x509.Certificate], where: str) -> KeyMaterial:
    leaf = chain[0]
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(serialization.Encoding.DER, public) != \
            leaf.public_key().public_bytes(serialization.Encoding.DER, public):
        raise ConfigError(f"{where}: the private key does not belong to the first certificate of the chain")
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return KeyMaterial(key_pem, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain), leaf)


def keystore(get) -> KeyMaterial | None:
    """This broker's key and chain; None when no keystore is set.  ``get(key)``
    is a setting's text (the listener's own, else the broker's) or None."""
    inline_key, inline_chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    location = get("ssl.keystore.location")
    if inline_key or inline_chain:
        if location:
            raise ConfigError("ssl.keystore.location and ssl.keystore.key: give the keystore one way, not both")
        if not (inline_key and inline_chain):
            raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together: set both")
        key = _pem_key(inline_key.encode(), _password(get("ssl.key.password")), "ssl.keystore.key")
        return _material(key, _certificates(inline_chain.encode(), "ssl.keystore.certificate.chain"),
                         "ssl.keystore.key")
    if not location:
        return None
    data = _read_file(location, "ssl.keystore.location")
    where = f"ssl.keystore.location {location}"
    if _store_type(data, get("ssl.keystore.type"), "ssl.keystore.type") == PEM:
        key = _pem_key(data, _password(get("ssl.key.password")), where)
        return _material(key, _certificates(data, where), where)
    try:
        key, leaf, others = pkcs12.load_key_and_certificates(data, _password(get("ssl.keystore.password")))
    except ValueError:
        raise ConfigError(f"{where}: cannot open the PKCS12 store (wrong ssl.keystore.password, or not "
                          f"PKCS12)") from None
    if key is None or leaf is None:
        raise ConfigError(f"{where}: the store holds no private key with its certificate")
    return _material(key, [leaf, *others], where)


def truststore(get) -> str | None:
    """The trusted certificates, as PEM text; None when no truststore is set."""
    inline, location = get("ssl.truststore.certificates"), get("ssl.truststore.location")
    if inline and location:
        raise ConfigError("ssl.truststore.location and ssl.truststore.certificates: give the truststore one way, "
                          "not both")
    if inline:
        certificates = _certificates(inline.encode(), "ssl.truststore.certificates")
    elif location:
        data = _read_file(location, "ssl.truststore.location")
        where = f"ssl.truststore.location {location}"
        if _store_type(data, get("ssl.truststore.type"), "ssl.truststore.type") == PEM:
            certificates = _certificates(data, where)
        else:
            try:
                store = pkcs12.load_pkcs12(data, _password(get("ssl.truststore.password")))
            except ValueError:
                raise ConfigError(f"{where}: cannot open the PKCS12 store (wrong ssl.truststore.password, or not "
                                  f"PKCS12)") from None
            certificates = [entry.certificate for entry in store.additional_certs]
            if store.cert is not None:
                certificates.insert(0, store.cert.certificate)
            if not certificates:
                raise ConfigError(f"{where}: the store holds no certificate")
    else:
        return None
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)
