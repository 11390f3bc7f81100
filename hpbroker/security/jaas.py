"""The JAAS configuration strings Kafka's SASL settings carry, e.g.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

one login module, a control flag, then ``key=value`` options (values quoted
or bare), ended by ``;``.  Only the options matter here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpbroker.storage.config import ConfigError

_MODULE = re.compile(r"\s*([A-Za-z_$][\w.$]*)\s+(required|requisite|sufficient|optional)\s*", re.IGNORECASE)
_OPTION = re.compile(r'\s*([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))\s*')


@dataclass(frozen=True)
class JaasEntry:
    module: str
    options: dict[str, str]

    def users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` options: name -> password."""
        return {key[len("user_"):]: value for key, value in self.options.items() if key.startswith("user_")}


def parse(text: str, key: str) -> JaasEntry:
    """One login module's entry; ConfigError naming ``key`` when it is not one."""
    match = _MODULE.match(text)
    if match is None:
        raise ConfigError(f"{key}: expected '<LoginModule class> required key=\"value\" ...;'")
    options: dict[str, str] = {}
    position = match.end()
    while position < len(text) and text[position] != ";":
        option = _OPTION.match(text, position)
        if option is None:  # the text is not shown: it may hold passwords
            after = f" after option {list(options)[-1]!r}" if options else ""
            raise ConfigError(f"{key}: cannot read option {len(options) + 1}{after} (key=\"value\" expected)")
        name, quoted, bare = option.groups()
        options[name] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        position = option.end()
    if text[position:].strip() != ";":
        raise ConfigError(f"{key}: the entry must end with ';' (and only one login module is read)")
    return JaasEntry(match.group(1), options)
