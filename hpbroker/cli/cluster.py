"""``hpbroker cluster``: the brokers of the cluster and its controller (DescribeCluster)."""

from hpbroker.cli import output
from hpbroker.cli.connection import add_connection_args, connect, guarded, result

PREFIX = "hpbroker cluster"


def add_parser(sub) -> None:
    p = sub.add_parser("cluster", help="the cluster's id, its live brokers and which one is controller")
    add_connection_args(p)
    p.set_defaults(run=run)


def run(args) -> int:
    return guarded(PREFIX, describe, args)


def describe(args) -> int:
    admin = connect(args)
    found = result(admin.describe_cluster(request_timeout=args.timeout), args.timeout, "the cluster")
    controller = found.controller.id if found.controller is not None else -1
    brokers = [{"id": node.id, "host": node.host, "port": node.port, "rack": node.rack,
                "controller": node.id == controller} for node in sorted(found.nodes, key=lambda n: n.id)]
    if args.json:
        output.emit_json({"cluster_id": found.cluster_id, "controller": controller, "brokers": brokers})
        return 0
    output.line(f"Cluster: {found.cluster_id}  Controller: {controller if controller >= 0 else 'none'}  "
                f"Brokers: {len(brokers)}")
    output.table(["BROKER", "HOST", "PORT", "RACK", "CONTROLLER"],
                 [[b["id"], b["host"], b["port"], b["rack"] or "-", "yes" if b["controller"] else ""] for b in brokers])
    return 0
