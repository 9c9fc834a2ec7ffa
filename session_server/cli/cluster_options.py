"""``serve``'s cluster options (``--cluster``, ``--node-id``, ``--advertise``, ...) and the
node they start (docs/cluster.md). NATS is imported only when ``--cluster`` is given."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .options import env

if TYPE_CHECKING:
    from ..runtime.cluster_node import ClusterNode

__all__ = ["cluster_arguments", "start_cluster"]


def _servers(value: str) -> list[str]:
    urls = [u.strip() for u in value.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("nats://", "tls://")):
            raise argparse.ArgumentTypeError(f"--cluster: {url!r} is not a nats:// URL")
    if not urls:
        raise argparse.ArgumentTypeError("--cluster: at least one nats://HOST:PORT")
    return urls


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not 0.2 <= seconds <= 600:
        raise argparse.ArgumentTypeError(f"between 0.2 and 600 seconds, got {value}")
    return seconds


def cluster_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster",
        type=_servers,
        default=_servers(env("CLUSTER") or "") if env("CLUSTER") else None,
        metavar="nats://HOST:PORT[,...]",
        help="join a cluster whose engine is NATS JetStream at these servers; without it "
        "the server is the single-node default (env SESSION_SERVER_CLUSTER)",
    )
    p.add_argument(
        "--node-id",
        default=env("NODE_ID"),
        help="this node's id in the cluster: letters, digits, '-', '_' (env "
        "SESSION_SERVER_NODE_ID; required with --cluster)",
    )
    p.add_argument(
        "--advertise",
        default=env("ADVERTISE"),
        metavar="ws://HOST:PORT",
        help="the URL other nodes and clients reach this node at (env "
        "SESSION_SERVER_ADVERTISE; default ws://HOST:PORT of --host and --port)",
    )
    p.add_argument(
        "--cluster-lease",
        type=_seconds,
        default=_seconds(env("CLUSTER_LEASE", "3") or "3"),
        help="seconds without a heartbeat after which other nodes may claim this node's "
        "agents (env SESSION_SERVER_CLUSTER_LEASE; default 3)",
    )
    p.add_argument(
        "--cluster-prefix",
        default=env("CLUSTER_PREFIX", "ss"),
        help="prefix of the JetStream stream, buckets and subjects: clusters sharing NATS "
        "servers use different prefixes (env SESSION_SERVER_CLUSTER_PREFIX; default ss)",
    )
    p.add_argument(
        "--cluster-replicas",
        type=int,
        choices=(1, 3, 5),
        default=None,
        help="JetStream replicas of the log and buckets (default: 3 when --cluster names "
        "three or more servers, else 1)",
    )


async def start_cluster(args: argparse.Namespace, url: str) -> ClusterNode | None:
    """The started node of ``--cluster`` (``None`` without it); ``ValueError`` for a bad
    option (the caller reports it)."""
    if args.cluster is None:
        return None
    if not args.node_id:
        raise ValueError("--cluster needs --node-id")
    if args.cluster_secret_file is None:
        raise ValueError(
            "--cluster needs --cluster-secret-file (the same secret on every node: a node "
            "forwarding a client's connection to the agent's owner proves it is a node)"
        )
    try:
        from ..runtime.cluster_node import ClusterNode
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ValueError(
            f"--cluster needs the cluster extra (pip install 'session-server[cluster]'): {exc}"
        ) from None
    node = ClusterNode(
        args.cluster,
        args.node_id,
        args.advertise or url,
        prefix=args.cluster_prefix,
        lease_s=args.cluster_lease,
        replicas=args.cluster_replicas,
    )
    try:
        await node.start()
    except Exception as exc:  # nats-py's connection and JetStream errors
        await node.stop()
        raise ValueError(f"{', '.join(args.cluster)}: {exc!r}") from exc
    return node
