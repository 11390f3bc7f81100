"""Users' SCRAM credentials in a cluster: ZooKeeper's ``/config/users/<user>``,
where Kafka keeps them (``{"version": 1, "config": {"SCRAM-SHA-256":
"salt=...,stored_key=...,server_key=...,iterations=4096"}}``), so every
broker sees a change at the next login and a user added with Kafka's own
``kafka-configs --zookeeper`` logs in here too.  Read and written through the
worker's admin client on the broker's one ZooKeeper session.

A login reads the user's znode.  While ZooKeeper cannot answer (an outage,
this broker cut off from it), it waits no more than ``READ_TIMEOUT_S`` and
then takes what the worker last read for that user: leaders keep taking
writes through such an outage, and their clients' reconnections must still
log in.  A user never read here fails to log in until ZooKeeper is back."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from hpbroker.cluster.admin import AdminError
from hpbroker.cluster.znodes import ZnodeFormatError
from hpbroker.security.credentials import Change, Credentials, CredentialStoreError, apply, decoded
from hpbroker.security.scram import ScramCredential

log = logging.getLogger(__name__)
READ_TIMEOUT_S = 2.0  # a login waits this long for ZooKeeper before it takes the last known credential
KNOWN_USERS = 10000  # credentials kept for an outage, the most recently read


class ZooKeeperCredentials:
    def __init__(self, admin):
        self.admin = admin  # cluster.admin.ClusterAdmin
        self._known: OrderedDict[str, dict[str, ScramCredential]] = OrderedDict()

    async def get(self, user: str) -> dict[str, ScramCredential]:
        try:
            found = decoded(await self._call(asyncio.wait_for(self.admin.user_config(user), READ_TIMEOUT_S)))
        except (CredentialStoreError, TimeoutError) as exc:
            if user not in self._known:
                raise CredentialStoreError(f"ZooKeeper did not answer for user {user!r}: {exc}") from None
            log.warning("ZooKeeper did not answer for user %r (%s): its login uses the credential read last",
                        user[:64], exc or "timed out")
            return self._known[user]
        self._known[user] = found
        self._known.move_to_end(user)
        if len(self._known) > KNOWN_USERS:
            self._known.popitem(last=False)
        return found

    async def all(self) -> Credentials:
        return {user: decoded(settings) for user, settings in (await self._call(self.admin.user_configs())).items()}

    async def alter(self, changes: dict[str, Change]) -> dict[str, str]:
        """Each user's znode is written on its own: the users whose write failed, and why."""
        failed = {}
        for user, change in changes.items():
            try:
                await self._call(self.admin.change_user_config(
                    user, lambda current, change=change: apply(current, change)))
            except CredentialStoreError as exc:
                failed[user] = str(exc)
        return failed

    @staticmethod
    async def _call(work):
        try:
            return await work
        except (AdminError, ZnodeFormatError) as exc:
            raise CredentialStoreError(str(exc)) from None
