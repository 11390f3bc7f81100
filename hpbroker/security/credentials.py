"""Where users' SCRAM credentials live: the store standalone, and what both
stores share.

Standalone they are a JSON file at the root of the first log dir (mode
0600), rewritten whole under a lock (every worker writes it) and renamed into
place, so a crash leaves the old file or the new one.  In a cluster they are
ZooKeeper's (``workers/zookeeper_credentials.py``), where Kafka keeps them.
Both stores have ``get(user)``, ``all()`` and ``alter(changes)``, which
returns the users whose change failed alone (a ZooKeeper write per user) and
raises CredentialStoreError when none was made.

Both are read at each login, not cached: a deleted credential stops the next
login at once, and logins are few next to requests.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from hpbroker.security import locked_json
from hpbroker.security.scram import ScramCredential

CREDENTIALS_FILE = "hpbroker-scram-credentials.json"

# user -> mechanism -> credential
Credentials = dict[str, dict[str, ScramCredential]]
# what an alteration does to one user's credentials: mechanism -> credential (None: delete it)
Change = dict[str, ScramCredential | None]


class CredentialStoreError(Exception):
    """The store cannot be read or written now (ZooKeeper away, the disk refusing)."""


def apply(current: dict[str, str], change: Change) -> dict[str, str]:
    result = dict(current)
    for mechanism, credential in change.items():
        if credential is None:
            result.pop(mechanism, None)
        else:
            result[mechanism] = credential.encode()
    return result


def decoded(settings: dict[str, str]) -> dict[str, ScramCredential]:
    found = {}
    for mechanism, text in settings.items():
        if mechanism.startswith("SCRAM-"):
            try:
                found[mechanism] = ScramCredential.decode(text)
            except ValueError:
                continue  # unreadable: as if absent (a login with it fails)
    return found


class FileCredentials:
    def __init__(self, log_dir: str):
        self.path = os.path.join(log_dir, CREDENTIALS_FILE)

    async def get(self, user: str) -> dict[str, ScramCredential]:
        return decoded(self._read().get(user, {}))

    async def all(self) -> Credentials:
        return {user: decoded(settings) for user, settings in self._read().items()}

    async def alter(self, changes: dict[str, Change]) -> dict[str, str]:
        """All the changes, in one rewrite of the file (CredentialStoreError: none);
        no user failed alone."""
        def rewrite(users: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
            for user, change in changes.items():
                settings = apply(users.get(user, {}), change)
                if settings:
                    users[user] = settings
                else:
                    users.pop(user, None)
            return users
        await asyncio.to_thread(self._locked_rewrite, rewrite)
        return {}

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            users = locked_json.read(self.path).get("users", {})
        except (OSError, ValueError) as exc:
            raise CredentialStoreError(f"cannot read {self.path}: {exc}") from None
        return users if isinstance(users, dict) else {}

    def _locked_rewrite(self, rewrite: Callable[[dict], dict]) -> None:
        def change(document: dict) -> dict:
            users = document.get("users", {})
            return {"version": 1, "users": rewrite(users if isinstance(users, dict) else {})}
        try:
            locked_json.rewrite(self.path, change)
        except OSError as exc:
            raise CredentialStoreError(f"cannot write {self.path}: {exc.strerror}") from None
        except ValueError as exc:
            raise CredentialStoreError(f"cannot read {self.path}: {exc}") from None
