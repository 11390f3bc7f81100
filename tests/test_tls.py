"""TLS settings read as Kafka names them: keystores and truststores in each
format, the checks that stop a broker that could not serve TLS, and
``ssl.principal.mapping.rules``."""

import ssl

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from harness.tls import Authority
from hpbroker.security import keystores, principal_rules, tls
from hpbroker.server.config import BrokerConfig
from hpbroker.storage.config import ConfigError


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    authority = Authority(directory)
    return authority, authority.issue("broker", "broker-0", hosts=("127.0.0.1",)), directory


def read(**settings: str) -> tls.TlsSettings:
    return tls.read({k.replace("_", "."): v for k, v in settings.items()}, "SSL")


def test_a_pem_keystore_holds_the_key_and_its_chain(pki):
    authority, broker, _ = pki
    settings = read(ssl_keystore_location=str(broker.keystore_pem), ssl_truststore_location=str(authority.ca_file))
    assert settings.key.leaf == broker.certificate
    assert settings.server_context.verify_mode == ssl.CERT_NONE  # ssl.client.auth=none
    assert (settings.client_context.check_hostname, settings.versions) == \
        (True, (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3))


def test_an_encrypted_pem_key_needs_ssl_key_password(pki, tmp_path):
    _, broker, _ = pki
    encrypted = broker.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"key-secret"))
    path = tmp_path / "encrypted.pem"
    path.write_bytes(encrypted + broker.cert_file.read_bytes())
    assert read(ssl_keystore_location=str(path), ssl_key_password="key-secret").key.leaf == broker.certificate
    for password in ({}, {"ssl_key_password": "wrong"}):
        with pytest.raises(ConfigError, match="cannot read the private key .wrong or missing ssl.key.password") as e:
            read(ssl_keystore_location=str(path), **password)
        assert "key-secret" not in str(e.value) and "wrong" not in str(e.value).split("(")[0]


def test_a_pkcs12_keystore_and_truststore(pki, tmp_path):
    authority, broker, _ = pki
    store = broker.pkcs12(tmp_path / "broker.p12", "store-secret")
    trust = tmp_path / "trust.p12"
    trust.write_bytes(pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(authority.certificate, b"ca")], serialization.BestAvailableEncryption(b"t")))
    settings = read(ssl_keystore_location=str(store), ssl_keystore_password="store-secret",
                    ssl_truststore_location=str(trust), ssl_truststore_password="t", ssl_truststore_type="PKCS12")
    assert settings.key.leaf == broker.certificate
    assert "BEGIN CERTIFICATE" in (settings.trusted_pem or "")
    with pytest.raises(ConfigError, match="cannot open the PKCS12 store .wrong ssl.keystore.password"):
        read(ssl_keystore_location=str(store), ssl_keystore_password="nope")


def test_inline_pem_settings(pki):
    authority, broker, _ = pki
    settings = read(ssl_keystore_key=broker.key_file.read_text(), ssl_keystore_certificate_chain=broker.cert_file
                    .read_text(), ssl_truststore_certificates=authority.ca_file.read_text())
    assert settings.key.leaf == broker.certificate and settings.trusted_pem is not None
    with pytest.raises(ConfigError, match="go together"):
        read(ssl_keystore_key=broker.key_file.read_text())


@pytest.mark.parametrize("content, settings, message", [
    (None, {"ssl_keystore_location": "/nonexistent.pem"}, "ssl.keystore.location: cannot read /nonexistent.pem"),
    (b"\xfe\xed\xfe\xed\x00\x00\x00\x02", {}, "Java's JKS format is not read; convert the store with keytool"),
    (b"garbage", {"ssl_keystore_type": "PKCS12"}, "cannot open the PKCS12 store"),
    (b"garbage", {"ssl_keystore_type": "BCFKS"}, "ssl.keystore.type=BCFKS: expected PEM or PKCS12"),
    ("other key", {}, "the private key does not belong to the first certificate"),
    ("no key", {}, "expected one PEM private key, found 0"),
    ("keystore", {"ssl_client_auth": "always"}, "ssl.client.auth=always: expected none, requested or required"),
    ("keystore", {"ssl_enabled_protocols": "TLSv1.1"}, "ssl.enabled.protocols=TLSv1.1: expected TLSv1.2"),
    ("keystore", {"ssl_endpoint_identification_algorithm": "ldap"}, "expected https or empty"),
    ("keystore", {"ssl_principal_mapping_rules": "RULE:x"}, "cannot read the rule at 'RULE:x'"),
])
def test_what_cannot_work_is_refused_by_name(pki, tmp_path, content, settings, message):
    authority, broker, _ = pki
    path = tmp_path / "store"
    if content == "other key":
        path.write_bytes(authority.issue("x", "x").key_file.read_bytes() + broker.cert_file.read_bytes())
    elif content == "no key":
        path.write_bytes(broker.cert_file.read_bytes())
    elif content == "keystore":
        path.write_bytes(broker.keystore_pem.read_bytes())
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        read(**{"ssl_keystore_location": str(path), **settings})


def test_listener_settings_win_and_are_known_keys(pki):
    authority, broker, _ = pki
    config = BrokerConfig.from_sources(overrides={
        "listeners": "SECURE://127.0.0.1:9093", "listener.security.protocol.map": "SECURE:SSL",
        "ssl.keystore.location": "/nonexistent.pem",
        "listener.name.secure.ssl.keystore.location": str(broker.keystore_pem),
        "listener.name.secure.ssl.client.auth": "required", "ssl.truststore.location": str(authority.ca_file)})
    security = config.security
    assert security.protocol == "SSL" and not security.sasl and security.tls is not None
    assert security.tls.server_context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ConfigError, match="unknown config key 'ssl.keystore.locaton'"):
        BrokerConfig.from_sources(overrides={"ssl.keystore.locaton": "x"})


# --- principals ---------------------------------------------------------------------------
@pytest.mark.parametrize("rules, principal", [
    ("DEFAULT", "User:CN=alice,OU=eng,O=hpbroker,C=GB"),
    ("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/", "User:alice@eng"),
    ("RULE:^CN=(.*?),OU=eng,.*$/$1/U", "User:ALICE"),
    ("RULE:^CN=(.*?),OU=ops,.*$/$1/, RULE:^CN=(.*?),.*$/$1\\/x/L, DEFAULT", "User:alice/x"),
    ("RULE:^CN=nobody,.*$/n/", None),
])
def test_mapping_rules(pki, rules, principal):
    authority, _, _ = pki
    alice = authority.issue("alice", "alice", unit="eng")
    der = alice.certificate.public_bytes(serialization.Encoding.DER)
    assert principal_rules.principal(principal_rules.parse(rules), der) == principal
    assert principal_rules.principal(principal_rules.parse(rules), None) == principal_rules.ANONYMOUS


def test_a_key_never_reaches_the_disk(pki, tmp_path, monkeypatch):
    """The unencrypted key is handed to OpenSSL through a memory file."""
    _, broker, _ = pki
    material = keystores.keystore({"ssl.keystore.location": str(broker.keystore_pem)}.get)
    assert material is not None
    opened: list[str] = []
    real = ssl.SSLContext.load_cert_chain

    def spy(self, certfile, *args, **kw):
        opened.append(str(certfile))
        return real(self, certfile, *args, **kw)
    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    tls._load_key(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), material)
    assert len(opened) == 1 and opened[0].startswith("/proc/self/fd/")
