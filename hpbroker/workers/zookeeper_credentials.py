"""Users' SCRAM credentials in a cluster: ZooKeeper's ``/config/users/<user>``,
where Kafka keeps them (``{"version": 1, "config": {"SCRAM-SHA-256":
"salt=...,stored_key=...,server_key=...,iterations=4096"}}``), so every
broker sees a change at the next login and a user added with Kafka's own
``kafka-configs --zookeeper`` logs in here too.  Read and written through the
worker's admin client on the broker's one ZooKeeper session."""

from __future__ import annotations

from hpbroker.cluster.admin import AdminError
from hpbroker.cluster.znodes import ZnodeFormatError
from hpbroker.security.credentials import Change, Credentials, CredentialStoreError, apply, decoded
from hpbroker.security.scram import ScramCredential


class ZooKeeperCredentials:
    def __init__(self, admin):
        self.admin = admin  # cluster.admin.ClusterAdmin

    async def get(self, user: str) -> dict[str, ScramCredential]:
        return decoded(await self._call(self.admin.user_config(user)))

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
