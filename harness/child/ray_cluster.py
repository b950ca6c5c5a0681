"""Joining or starting Ray for the child's replicas and client shards, and what the
cluster is (cluster.json): one place for both, so they start Ray the same way."""

from __future__ import annotations

import logging
import os
import platform
from typing import Any

from harness.config.run_config import RAY_MISSING, Distribute
from harness.errors import ConfigError, first_line

#: a local Ray keeps to loopback and reports nothing home (DESIGN: Ray on one machine)
LOCAL_NODE_IP = "127.0.0.2"
#: how long placing and loading actors may take before the run is refused
START_TIMEOUT_S = 300.0


def ray_module() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ConfigError(RAY_MISSING) from e
    return ray


def init(ray: Any, spec: Distribute) -> bool:
    """Join `spec.address`, or start a local Ray on loopback. True when this call started or
    joined it (so the caller shuts it down after the test)."""
    if ray.is_initialized():
        return False
    if spec.address is None:
        # A local cluster of this machine only: loopback, no usage report, no dashboard.
        # address="local": a new one, always. Without it ray.init joins the last cluster
        # started on this host (RAY_ADDRESS, or /tmp/ray/ray_current_cluster that `ray start`
        # writes), so a run meant for a private local Ray would land on a user's cluster.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address="local", include_dashboard=False, _node_ip_address=LOCAL_NODE_IP, log_to_driver=False,
                 logging_level=logging.WARNING, configure_logging=False)
    else:
        try:
            ray.init(address=spec.address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise ConfigError(f"distribute.address {spec.address}: cannot join the Ray cluster: "
                              f"{first_line(e)}") from e
    return True


def facts(ray: Any) -> dict[str, Any]:
    """Ray's version, the driver, the cluster's resources and its live nodes."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {
        "ray_version": ray.__version__,
        "driver": {"hostname": platform.node(), "pid": os.getpid(), "python": platform.python_version()},
        "resources": {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU", "memory")},
        "nodes": [{"node_id": n["NodeID"], "address": n["NodeManagerAddress"], "hostname": n.get("NodeManagerHostname"),
                   "resources": {k: v for k, v in n.get("Resources", {}).items() if k in ("CPU", "GPU")}}
                  for n in nodes],
    }


def check_room(cluster: dict[str, Any], what: str, count: int, need: dict[str, float], fix: str) -> None:
    """Refuse a request the cluster can never place, instead of waiting for it: more in
    all than the cluster has, or more for one member than any one node has (Ray would
    wait forever for a node that fits it)."""
    have = cluster["resources"]
    for key, each in need.items():
        total = each * count
        if total and total > have.get(key, 0):
            raise ConfigError(f"distribute: {count} {what} x {each:g} {key} = {total:g} {key}, but the Ray cluster "
                              f"has {have.get(key, 0):g}; {fix}")
    nodes = [n.get("resources", {}) for n in cluster.get("nodes") or []]
    wanted = {key: each for key, each in need.items() if each}
    if nodes and wanted and not any(all(n.get(k, 0) >= v for k, v in wanted.items()) for n in nodes):
        one = " and ".join(f"{v:g} {k}" for k, v in wanted.items())
        most = ", ".join(f"{max(n.get(k, 0) for n in nodes):g} {k}" for k in wanted)
        raise ConfigError(f"distribute: each of the {count} {what} needs {one} on one node, but no node of the Ray "
                          f"cluster's {len(nodes)} has that (the most on one node: {most}); {fix}")


def where() -> dict[str, Any]:
    """Where the calling actor runs (called inside it)."""
    import ray

    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "address": ray.util.get_node_ip_address(),
        "hostname": platform.node(),
        "pid": os.getpid(),
        "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
