"""TLS settings read as Kafka names them: keystores and truststores in each
format, the checks that stop a broker that could not serve TLS, and
``ssl.principal.mapping.rules``."""

import asyncio
import datetime
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from harness.tls import Authority
from hpbroker.replication import client
from hpbroker.security import keystores, principal_rules, tls
from hpbroker.security.settings import ListenerSecurity
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
    for password in ({}, {"ssl_key_password": "guess-7x9q"}):
        with pytest.raises(ConfigError, match="cannot read the private key .wrong or missing ssl.key.password") as e:
            read(ssl_keystore_location=str(path), **password)
        assert "key-secret" not in str(e.value) and "guess-7x9q" not in str(e.value)


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


def test_client_certificates_need_a_truststore_and_sasl_ssl_reads_only_its_own_setting(pki):
    """With no truststore the system's authorities would vouch for clients;
    on SASL_SSL the broker-wide ssl.client.auth (for SSL listeners) is not
    read, only the listener's own (KIP-684)."""
    authority, broker, _ = pki
    with pytest.raises(ConfigError, match="ssl.client.auth=required needs ssl.truststore.location"):
        read(ssl_keystore_location=str(broker.keystore_pem), ssl_client_auth="required")
    props = {"ssl.keystore.location": str(broker.keystore_pem), "ssl.client.auth": "required"}
    assert tls.read(props, "SASL_SSL", sasl=True).client_auth == "none"
    props.update({"listener.name.sasl_ssl.ssl.client.auth": "requested",
                  "ssl.truststore.location": str(authority.ca_file)})
    assert tls.read(props, "SASL_SSL", sasl=True).client_auth == "requested"
    capped = read(ssl_keystore_location=str(broker.keystore_pem), ssl_protocol="TLSv1.2")
    assert capped.client_context.maximum_version == ssl.TLSVersion.TLSv1_2
    assert "key_pem" not in repr(capped)  # the key never in a repr (a log line, a test's failure)


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
    ("RULE:^CN=(.*?),.*$/$2-$12/", "User:$2-alice2"),  # Java's reading: no group 2; group 1, then "2"
    ("RULE:^CN=(.*?),.*$/\\$1=$1/", "User:$1=alice"),  # an escaped dollar is text
])
def test_mapping_rules(pki, rules, principal):
    authority, _, _ = pki
    alice = authority.issue("alice", "alice", unit="eng")
    der = alice.certificate.public_bytes(serialization.Encoding.DER)
    assert principal_rules.principal(principal_rules.parse(rules), der) == principal
    assert principal_rules.principal(principal_rules.parse(rules), None) == principal_rules.ANONYMOUS


def test_a_subject_is_written_as_java_writes_it(pki):
    """Attributes Java's RFC 2253 form has no keyword for are the OID and the
    value's DER in hex (emailAddress here), not RFC 4514's text."""
    authority, _, _ = pki
    key = authority.key
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Ltd"),
                      x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
                      x509.NameAttribute(NameOID.COMMON_NAME, "alice")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                   .sign(key, hashes.SHA256()))
    assert principal_rules.subject_name(certificate.public_bytes(serialization.Encoding.DER)) == \
        "CN=alice,1.2.840.113549.1.9.1=#16056140622e63,O=Example\\, Ltd"


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


# --- a broker dialling another ------------------------------------------------------------
@pytest.mark.parametrize("algorithm, connects", [("https", False), ("", True)])
def test_a_broker_checks_the_name_it_dialled_against_the_certificate(pki, algorithm, connects):
    """The other broker's certificate names only ``localhost``; dialled at
    127.0.0.1, the handshake fails with ``https`` and goes through without."""
    authority, _, _ = pki
    named = authority.issue("named", "broker-1", hosts=("localhost",))
    settings = read(ssl_keystore_location=str(named.keystore_pem), ssl_truststore_location=str(authority.ca_file),
                    ssl_endpoint_identification_algorithm=algorithm)

    async def dial() -> str:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0, ssl=settings.server_context)
        port = server.sockets[0].getsockname()[1]
        client.use_security(ListenerSecurity("SSL", "SSL", tls=settings))
        try:
            connection = await client.ClientConnection.open("127.0.0.1", port, "test")
            connection.close()
            return "connected"
        except ConnectionError as exc:
            return str(exc)
        finally:
            client.use_security(ListenerSecurity("PLAINTEXT", "PLAINTEXT"))
            server.close()
    outcome = asyncio.run(dial())
    if connects:
        assert outcome == "connected"
    else:
        assert outcome.startswith("TLS handshake with 127.0.0.1:") and "IP address mismatch" in outcome, outcome
