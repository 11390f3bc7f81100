"""``ssl.principal.mapping.rules``: the principal a client certificate names.

The certificate's subject is written as an RFC 2253 distinguished name, the
most specific part first (``CN=alice,OU=eng,O=Example,C=GB``), and the rules
are tried in order.  ``DEFAULT`` takes the whole name; ``RULE:pattern/
replacement/`` takes a name the pattern matches in full and rewrites it
(``$1`` for a group), with an optional ``L`` or ``U`` after the last slash
for lower or upper case.  A name no rule matches is refused, as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cryptography import x509

from hpbroker.storage.config import ConfigError

ANONYMOUS = "User:ANONYMOUS"  # a TLS client that showed no certificate
_ENTRY = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|$)")
_GROUP_REF = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""  # in re's template syntax
    case: str = ""  # "", "L" or "U"

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        match = self.pattern.fullmatch(name)
        if match is None:
            return None
        mapped = match.expand(self.replacement)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


def parse(text: str, key: str = "ssl.principal.mapping.rules") -> tuple[Rule, ...]:
    rules: list[Rule] = []
    position, text = 0, text.strip()
    while position < len(text):
        entry = _ENTRY.match(text, position)
        if entry is None or entry.end() == position:
            raise ConfigError(f"{key}: cannot read the rule at {text[position:position + 40]!r} (expected DEFAULT "
                              f"or RULE:pattern/replacement/[LU])")
        position = entry.end()
        if entry.group(1):
            rules.append(Rule(None))
            continue
        try:
            pattern = re.compile(entry.group(2))
        except re.error as exc:
            raise ConfigError(f"{key}: pattern {entry.group(2)!r}: {exc}") from None
        literal = re.sub(r"\\(.)", r"\1", entry.group(3))  # "\/" is a slash, as in Kafka's
        replacement = _GROUP_REF.sub(r"\\g<\1>", literal.replace("\\", "\\\\"))
        rules.append(Rule(pattern, replacement, entry.group(4)))
    if not rules:
        raise ConfigError(f"{key}: give at least one rule (DEFAULT takes the certificate's whole name)")
    return tuple(rules)


def subject_name(der: bytes) -> str:
    """A certificate's subject, most specific part first."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def principal(rules: tuple[Rule, ...], der: bytes | None) -> str | None:
    """``User:<name>`` for a client certificate (ANONYMOUS without one); None
    when no rule maps its subject."""
    if der is None:
        return ANONYMOUS
    name = subject_name(der)
    for rule in rules:
        mapped = rule.apply(name)
        if mapped is not None:
            return f"User:{mapped}"
    return None
