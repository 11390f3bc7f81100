"""The pieces of SASL on their own: JAAS entries, PLAIN, SCRAM (against RFC
7677's worked example, and a full exchange both ways), the credential file,
the listener's settings, and one connection's session from handshake to
principal, with every way out of order or wrong."""

import asyncio
import base64
import os
import stat

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.security import jaas, plain, scram
from hpbroker.security.credentials import FileCredentials
from hpbroker.security.sasl import SaslFailure, SaslSession, Stage
from hpbroker.security.settings import ListenerSecurity, Login
from hpbroker.server.config import BrokerConfig, read_properties_file
from hpbroker.storage.config import ConfigError

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="a \\"quoted\\" secret";')


def test_a_jaas_entry_gives_its_options_and_plain_users():
    entry = jaas.parse(JAAS, "k")
    assert entry.module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.options["username"] == "admin"
    assert entry.users() == {"admin": "admin-secret", "alice": 'a "quoted" secret'}
    assert jaas.parse("x.ScramLoginModule required username=bare password=\"p\";", "k").options == {
        "username": "bare", "password": "p"}


@pytest.mark.parametrize("text", ["", "PlainLoginModule", "PlainLoginModule required username=\"a\"",
                                  "PlainLoginModule required username=\"a\"; Other required;",
                                  "PlainLoginModule maybe username=\"a\";", "M required =\"a\";"])
def test_a_malformed_jaas_entry_names_its_setting(text):
    with pytest.raises(ConfigError, match="^the.key: "):
        jaas.parse(text, "the.key")


def test_plain_accepts_the_right_password_only():
    users = {"alice": "secret"}
    assert plain.authenticate(b"\x00alice\x00secret", users) == "alice"
    assert plain.authenticate(b"alice\x00alice\x00secret", users) == "alice"
    for bad in (b"\x00alice\x00wrong", b"\x00bob\x00secret", b"\x00alice", b"\x00\x00", b"bob\x00alice\x00secret",
                b"\x00alice\x00secret\x00", b"\xff\x00alice\x00secret"):
        with pytest.raises(plain.PlainError):
            plain.authenticate(bad, users)


# RFC 7677 section 3: user "user", password "pencil"
RFC_CLIENT_NONCE, RFC_SERVER_NONCE = "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_scram_sha_256_matches_rfc_7677():
    credential = scram.make_credential("SCRAM-SHA-256", "pencil", 4096, RFC_SALT)
    assert scram.ScramCredential.decode(credential.encode()) == credential
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    server = scram.ScramServer("SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert server.client_first(client.first()) == "user"
    server_first = server.server_first(credential)
    assert server_first == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    final = client.final(server_first)
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    server_final = server.client_final(final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.check(server_final)


@pytest.mark.parametrize("mechanism", sorted(scram.MECHANISMS))
def test_scram_refuses_a_wrong_password_a_changed_nonce_and_garbage(mechanism):
    credential = scram.make_credential(mechanism, "right")
    client, server = scram.ScramClient(mechanism, "u,=x", "wrong"), scram.ScramServer(mechanism)
    assert server.client_first(client.first()) == "u,=x"  # escaped on the wire, as RFC 5802 says
    with pytest.raises(scram.ScramError, match="invalid credentials"):
        server.client_final(client.final(server.server_first(credential)))

    client, server = scram.ScramClient(mechanism, "u", "right"), scram.ScramServer(mechanism)
    server.client_first(client.first())
    final = client.final(server.server_first(credential)).replace(b",p=", b"X,p=", 1)
    with pytest.raises(scram.ScramError, match="nonce"):
        server.client_final(final)

    for first in (b"", b"\xff\xfe", b"n,,", b"n,,r=abc", b"n,,n=u", b"p=tls-unique,,n=u,r=1", b"n,a=other,n=u,r=1",
                  b"q,,n=u,r=1", b"n,,n=a=b,r=1"):
        with pytest.raises(scram.ScramError):
            scram.ScramServer(mechanism).client_first(first)
    with pytest.raises(scram.ScramError, match="unknown user"):
        scram.ScramServer(mechanism).server_first(None)
    server = scram.ScramServer(mechanism)
    server.client_first(b"n,,n=u,r=abc")
    server.server_first(credential)
    for final in (b"", b"c=biws", b"p=AAAA,c=biws,r=x", b"c=eSws,r=abc,p=AAAA", b"c=biws,r=abc,p=!!"):
        with pytest.raises(scram.ScramError):
            server.client_final(final)


def test_the_credential_file_keeps_users_apart_and_is_private(tmp_path):
    store = FileCredentials(str(tmp_path))
    sha256 = scram.make_credential("SCRAM-SHA-256", "p")
    sha512 = scram.make_credential("SCRAM-SHA-512", "p", 8192)

    async def scenario():
        assert await store.get("alice") == {}
        await store.alter({"alice": {"SCRAM-SHA-256": sha256, "SCRAM-SHA-512": sha512},
                           "bob": {"SCRAM-SHA-256": sha256}})
        await store.alter({"alice": {"SCRAM-SHA-256": None}, "bob": {"SCRAM-SHA-256": None}})
        return await store.get("alice"), await store.all()
    alice, everyone = asyncio.run(scenario())
    assert alice == {"SCRAM-SHA-512": sha512}
    assert everyone == {"alice": {"SCRAM-SHA-512": sha512}}  # a user left with nothing is gone
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert asyncio.run(FileCredentials(str(tmp_path)).get("alice")) == alice  # another worker reads the same


def test_a_sasl_listener_reads_kafka_settings(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("listeners=CLIENTS://127.0.0.1:9093\n"
                     "listener.security.protocol.map=CLIENTS:SASL_PLAINTEXT\n"
                     "listener.name.clients.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN\n"
                     "listener.name.clients.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.\\\n"
                     "    PlainLoginModule required \\\n"
                     "    username=\"admin\" password=\"pw\" \\\n"
                     "    user_admin=\"pw\";\n"
                     "zookeeper.connect=zk:2181\n")
    assert read_properties_file(str(props))["listener.name.clients.plain.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=")
    security = BrokerConfig.from_sources(file=str(props)).security
    assert security == ListenerSecurity("CLIENTS", "SASL_PLAINTEXT", ("SCRAM-SHA-512", "PLAIN"), {"admin": "pw"},
                                        Login("PLAIN", "admin", "pw"))
    assert BrokerConfig.from_sources().security == ListenerSecurity("PLAINTEXT", "PLAINTEXT")


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "SSL://127.0.0.1:1"}, "listener SSL serves TLS: set ssl.keystore.location"),
    ({"listeners": "OTHER://127.0.0.1:1"}, "add OTHER:SASL_PLAINTEXT"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1"}, "set listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI is not supported"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": " , "}, "at least one mechanism"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
      "zookeeper.connect": "zk"}, "sasl.mechanism.inter.broker.protocol=PLAIN is not among"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:1", "sasl.enabled.mechanisms": "SCRAM-SHA-256",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256", "zookeeper.connect": "zk"},
     "give its username"),
    ({"listener.security.protocol.map": "A=PLAINTEXT"}, "is not LISTENER:PROTOCOL"),
    ({"listener.name.x.sasl.jaas.config.typo": "1"}, "unknown config key"),
])
def test_security_settings_that_cannot_work_are_refused_by_name(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_sources(overrides=settings)


class _Credentials:
    def __init__(self, users):
        self.users = users

    async def get(self, user):
        return self.users.get(user, {})


SECURITY = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", ("PLAIN", "SCRAM-SHA-512"), {"alice": "pw"})


def _session(users=None) -> SaslSession:
    return SaslSession(SECURITY, _Credentials(users or {}))


def test_a_session_logs_in_with_plain_or_scram():
    session = _session()
    assert session.handshake(1, "PLAIN") == ErrorCode.none and session.stage is Stage.TOKENS
    assert asyncio.run(session.authenticate(b"\x00alice\x00pw")) == b""
    assert session.authenticated and session.principal == "User:alice"

    credential = scram.make_credential("SCRAM-SHA-512", "s3cret")
    session = _session({"bob": {"SCRAM-SHA-512": credential}})
    assert session.handshake(0, "SCRAM-SHA-512") == ErrorCode.none and session.stage is Stage.RAW_TOKENS
    client = scram.ScramClient("SCRAM-SHA-512", "bob", "s3cret")
    server_first = asyncio.run(session.authenticate(client.first()))
    client.check(asyncio.run(session.authenticate(client.final(server_first))))
    assert session.principal == "User:bob"


def test_a_session_out_of_order_or_refused_fails_for_good():
    session = _session()
    assert session.handshake(1, "GSSAPI") == ErrorCode.unsupported_sasl_mechanism and session.failed

    session = _session()
    with pytest.raises(SaslFailure) as refused:
        asyncio.run(session.authenticate(b"\x00alice\x00pw"))  # before any handshake
    assert refused.value.code == ErrorCode.illegal_sasl_state and session.failed

    session = _session()
    session.handshake(1, "PLAIN")
    asyncio.run(session.authenticate(b"\x00alice\x00pw"))
    assert session.handshake(1, "PLAIN") == ErrorCode.illegal_sasl_state  # a second handshake

    session = _session({"bob": {}})
    session.handshake(1, "SCRAM-SHA-512")
    with pytest.raises(SaslFailure) as refused:
        asyncio.run(session.authenticate(b"n,,n=bob,r=abc"))  # no credential for this mechanism
    assert refused.value.code == ErrorCode.sasl_authentication_failed
    assert "bob" not in str(refused.value) and "'bob'" in refused.value.detail  # the client is not told why


def test_properties_lines_go_on_as_java_reads_them(tmp_path):
    props = tmp_path / "p.properties"
    props.write_text("a=1\n# a comment ending in a backslash continues nothing \\\nb=2\n"
                     "spaced=v\\ \nnext=3\nescaped=x\\\\\nz=4\nlast=one \\\n")
    assert read_properties_file(str(props)) == {"a": "1", "b": "2", "spaced": "v\\", "next": "3",
                                                "escaped": "x\\\\", "z": "4", "last": "one"}


def test_a_jaas_error_never_shows_a_password():
    with pytest.raises(ConfigError) as refused:
        jaas.parse('x.PlainLoginModule required user_alice="s3cret;', "k")
    assert "s3cret" not in str(refused.value)


def test_user_znodes_are_named_as_kafkas_sanitizer_names_them():
    from hpbroker.cluster import znodes  # kazoo's package: imported where it is needed
    assert znodes.user_config_path("a~b c*d/e.f_g-h") == "/config/users/a%7Eb%20c%2Ad%2Fe.f_g-h"
    assert znodes.user_of_znode("a%7Eb%20c%2Ad%2Fe.f_g-h") == "a~b c*d/e.f_g-h"


@pytest.mark.parametrize("server_first", [b"\xff", b"r=x", b"garbage", b"r=NONCE,s=!!,i=4096", b"r=NONCE,s=AAAA,i=1",
                                          b"r=NONCE,s=AAAA,i=99999999"])
def test_a_broker_logging_in_refuses_a_strange_server(server_first):
    client = scram.ScramClient("SCRAM-SHA-256", "u", "p", nonce="NONCE")
    with pytest.raises(scram.ScramError):
        client.final(server_first)
    for server_final in (b"v=!!", b"x", b"v=AAAA"):
        with pytest.raises(scram.ScramError):
            client.check(server_final)


@pytest.mark.parametrize("settings, message", [
    ({"security.inter.broker.protocol": "SASL_PLAINTEXT"}, "no listener has that protocol"),
    ({"connections.max.reauth.ms": "3600000"}, "re-authentication is not supported"),
])
def test_kafkas_other_sasl_settings_are_read(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_sources(overrides=settings)
    BrokerConfig.from_sources(overrides={"security.inter.broker.protocol": "PLAINTEXT",
                                         "connections.max.reauth.ms": "0", "sasl.server.max.receive.size": "1024",
                                         "connection.failed.authentication.delay.ms": "0"})
