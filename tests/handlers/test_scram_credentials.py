"""AlterUserScramCredentials (51) and DescribeUserScramCredentials (50) in
process, with Kafka's answers for each bad change; and SaslHandshake /
SaslAuthenticate on a PLAINTEXT listener (out of turn: ILLEGAL_SASL_STATE)."""

import hashlib

from hpbroker.errors import ErrorCode
from hpbroker.security import scram
from tests.handlers.conftest import request

ALTER, DESCRIBE, HANDSHAKE, AUTHENTICATE = 51, 50, 17, 36
SHA256, SHA512 = 1, 2


def upsert(name, mechanism=SHA256, iterations=4096, salt=b"salt", password="pw"):
    salted = hashlib.pbkdf2_hmac("sha256" if mechanism == SHA256 else "sha512", password.encode(), salt,
                                 max(iterations, 1)) if mechanism in (SHA256, SHA512) else b"x"
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def alter(broker, deletions=(), upsertions=()):
    answer = broker.send(request(ALTER, 0, deletions=list(deletions), upsertions=list(upsertions)))
    return {r.user: (r.error_code, r.error_message) for r in answer.results}


def describe(broker, users=None):
    answer = broker.send(request(DESCRIBE, 0, users=None if users is None else [{"name": u} for u in users]))
    assert answer.error_code == ErrorCode.none
    return {r.user: (r.error_code, [(int(i.mechanism), int(i.iterations)) for i in r.credential_infos])
            for r in answer.results}


def test_credentials_are_added_described_and_deleted(broker):
    assert alter(broker, upsertions=[upsert("alice"), upsert("alice", SHA512, 8192), upsert("bob")]) == {
        "alice": (ErrorCode.none, None), "bob": (ErrorCode.none, None)}
    assert describe(broker) == {"alice": (ErrorCode.none, [(SHA256, 4096), (SHA512, 8192)]),
                                "bob": (ErrorCode.none, [(SHA256, 4096)])}
    stored = broker.run(broker.ctx.credentials.get("alice"))["SCRAM-SHA-256"]
    client = scram.ScramClient("SCRAM-SHA-256", "alice", "pw")
    server = scram.ScramServer("SCRAM-SHA-256")
    server.client_first(client.first())
    client.check(server.client_final(client.final(server.server_first(stored))))  # the password logs in

    assert alter(broker, deletions=[{"name": "bob", "mechanism": SHA256}]) == {"bob": (ErrorCode.none, None)}
    assert describe(broker, ["alice", "bob"]) == {"alice": (ErrorCode.none, [(SHA256, 4096), (SHA512, 8192)]),
                                                  "bob": (ErrorCode.resource_not_found, [])}


def test_each_bad_change_gets_kafkas_error_and_spoils_only_its_user(broker):
    answer = alter(broker, deletions=[{"name": "ghost", "mechanism": SHA256}],
                   upsertions=[upsert(""), upsert("few", iterations=100), upsert("many", iterations=20000),
                               upsert("odd", mechanism=7), upsert("twice"), upsert("twice"),
                               upsert("nosalt", salt=b""), upsert("fine")])
    assert {user: code for user, (code, _) in answer.items()} == {
        "ghost": ErrorCode.resource_not_found, "": ErrorCode.unacceptable_credential,
        "few": ErrorCode.unacceptable_credential, "many": ErrorCode.unacceptable_credential,
        "odd": ErrorCode.unsupported_sasl_mechanism, "twice": ErrorCode.duplicate_resource,
        "nosalt": ErrorCode.unacceptable_credential, "fine": ErrorCode.none}
    assert set(describe(broker)) == {"fine"}
    assert describe(broker, ["fine", "fine"])["fine"][0] == ErrorCode.duplicate_resource


def test_sasl_requests_on_a_plaintext_listener_are_out_of_turn(broker):
    assert broker.send(request(HANDSHAKE, 1, mechanism="PLAIN")).error_code == ErrorCode.illegal_sasl_state
    answer = broker.send(request(AUTHENTICATE, 2, auth_bytes=b"\x00a\x00b"))
    assert answer.error_code == ErrorCode.illegal_sasl_state
