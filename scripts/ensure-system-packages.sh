# Sourced by test.sh: Debian packages the tests drive for real (kcat: Debian's
# librdkafka 2.0.2 client; systemd-analyze for the units; a Java runtime for
# PySpark; the ZooKeeper server the cluster-mode tests start; ip and nft, with
# which the fault tests give each broker a network namespace of its own and
# cut links between them; Node.js and npm for kafkajs).  Installed only when
# missing.
set -euo pipefail
NEEDED=()
command -v kcat >/dev/null 2>&1 || NEEDED+=(kcat)
command -v systemd-analyze >/dev/null 2>&1 || NEEDED+=(systemd)
command -v java >/dev/null 2>&1 || NEEDED+=(default-jre-headless)  # Spark's JVM
[ -f /usr/share/java/zookeeper.jar ] || NEEDED+=(zookeeper)
command -v ip >/dev/null 2>&1 || NEEDED+=(iproute2)
command -v nft >/dev/null 2>&1 || NEEDED+=(nftables)
command -v node >/dev/null 2>&1 || NEEDED+=(nodejs)
command -v npm >/dev/null 2>&1 || NEEDED+=(npm)
if [ "${#NEEDED[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi
    echo "installing Debian packages for the tests: ${NEEDED[*]}" >&2
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${NEEDED[@]}" >/dev/null
fi
