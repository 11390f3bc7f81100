"""A broker with a SASL listener, for the tests and the benchmarks:
its settings (PLAIN's users in the listener's JAAS entry, every mechanism
enabled), the admin's login, client settings for librdkafka, and SCRAM
users made through AlterUserScramCredentials."""

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

ADMIN = ("admin", "admin-secret")  # PLAIN; also what a test harness logs in as to see the broker is up


def settings(listener: str = "SASL_PLAINTEXT", **plain_users: str) -> dict[str, str]:
    """A SASL listener (SASL_PLAINTEXT, or SASL_SSL with ``harness.tls``'s
    settings added) with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512; PLAIN's users
    are the admin and these."""
    users = " ".join(f'user_{name}="{password}"' for name, password in {ADMIN[0]: ADMIN[1], **plain_users}.items())
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN[0]}" password="{ADMIN[1]}" {users};')
    return {"listeners": f"{listener}://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            f"listener.name.{listener.lower()}.plain.sasl.jaas.config": jaas}


def ck_conf(bootstrap: str, mechanism: str, user: str, password: str) -> dict:
    """librdkafka's settings to log in."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def add_scram_user(bootstrap: str, user: str, passwords: dict[str, tuple[bytes, int]],
                   tls: dict | None = None) -> None:
    """``user``'s credentials, mechanism -> (password, iterations), made by the
    admin (over TLS with ``tls``, librdkafka's settings for it)."""
    admin = AdminClient({**ck_conf(bootstrap, "PLAIN", *ADMIN), **(tls or {})})
    mechanisms = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
    changes: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanisms[m], iterations), password)
        for m, (password, iterations) in passwords.items()]
    for future in admin.alter_user_scram_credentials(changes).values():
        assert future.result(30) is None
